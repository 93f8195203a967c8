#pragma once
// ZeRO stages 0-3 over parameter units: each unit's parameters live in one flat, padded buffer
// split into one shard per rank. What each stage and offload setting means for a unit is decided
// by its plan (zero_plan.h); this class carries it out.
//   stage 0: full gradients all-reduced (averaged) in buckets; every rank updates everything.
//   stage 1: gradients all-reduced; each rank updates only its shard and keeps Adam moments
//            for it; parameters are all-gathered after the step.
//   stage 2: gradients reduce-scattered: only the rank's gradient shard is kept for the step.
//   stage 3: parameters sharded too: through the model's UnitHooks a unit is gathered just before
//            its forward (the next one prefetched), released after it, gathered again before its
//            backward and its gradients reduce-scattered and released right after. "Persistent" units (the io
//            unit, the text encoder, units below the persistence threshold) stay whole as in
//            stage 2.
// Mixed precision and offload: the parameters the model computes with may be bf16/fp16
// (compute_dtype); the rank's part is then also kept as fp32 master weights next to the Adam
// moments. With offload_optimizer the masters, moments and the rank's fp32 gradients live in
// CPU memory (the step runs there, with the fused cpu_adamw) or in files under an NVMe folder
// (processed in sub-groups with reads, compute and writes overlapped). With offload_param
// (stage 3) the parameter shards live in CPU memory or NVMe files between gathers.

#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <c10/core/ScalarType.h>

#include "checkpoint/sharded_state.h"
#include "io/async_file_io.h"
#include "models/param_unit.h"
#include "zero/adafactor.h"
#include "zero/adamw_unit.h"
#include "zero/state_layout.h"
#include "zero/state_bytes.h"
#include "zero/zero_plan.h"
#include "zero/zero_rules.h"

namespace zs {
class CopyStream;
}
namespace zs::comm {
class Communicator;
}

namespace zs::zero {

struct ZeroOptions {
  int stage = 0;                                   ///< 0-3
  std::int64_t reduce_bucket_size = 500'000'000;   ///< elements per gradient collective (stages 0-1)
  std::int64_t allgather_bucket_size = 500'000'000;  ///< elements per parameter all-gather after the step
  std::int64_t persistence_threshold = kDefaultPersistenceThreshold;  ///< stage 3: units with fewer elements stay whole
  std::vector<std::string> persistent_units = {"io", "text_encoder"};  ///< stage 3: always whole
  /// Reduce a unit's gradients as soon as its backward is done (needs the hooks); unset: the
  /// plan's default (on).
  std::optional<bool> overlap_comm;
  std::int64_t prefetch_bucket_size = 50'000'000;  ///< stage 3: prefetch the next unit when it has at most this many elements
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0.0;
  OptimizerType optimizer = OptimizerType::adamw;
  /// Adafactor's settings (its weight decay is `weight_decay`).
  AdafactorOptions adafactor;
  /// fp32 master weights next to bf16/fp16 compute weights (optimizer.master_weights: fp32); false
  /// (none): only the bf16 weights, each update computed in float32 and rounded stochastically
  /// (stochastic_round.h), the optimizer state in float32.
  bool master_weights = true;
  /// Seeds the stochastic rounding (training.seed).
  std::uint64_t seed = 0;
  /// optimizer.fused_backward: a unit is stepped as soon as its reduced gradients exist (from its
  /// backward hook, on the last micro-batch) and, from stage 2 on, its gradient memory goes at
  /// once; call prepare_fused_step before each step's micro-batches. Clipping then scales by the
  /// previous step's global norm (the current one is known only when every unit has stepped).
  bool fused_backward = false;
  /// The host pipeline (issue 38): with AdamW in CPU memory under bf16, a step's bf16 gradients go
  /// into the fused CPU step where they landed instead of through a float32 copy. false: the copy,
  /// as before (tests and benchmarks compare the two).
  bool host_bf16_grads = true;
  /// zero.offload_optimizer.delayed_update (ZeRO-Offload's one-step delayed parameter update):
  /// after `delayed_update_warmup` ordinary steps, step t computes its update on a host thread
  /// while the device runs step t+1 with the weights of step t−1; the update is written at the
  /// next step(). AdamW or AdamW8bit with the optimizer in CPU memory, unfused; the EMA then
  /// follows the weights the device holds.
  bool delayed_update = false;
  std::int64_t delayed_update_warmup = 40;

  /// The dtype the model computes in (bf16/fp16: mixed precision with fp32 masters); unset: the
  /// parameters' own dtype.
  std::optional<at::ScalarType> compute_dtype;
  /// The compute device; unset: the parameters' own. Parameters given elsewhere (the CPU) move
  /// there one unit at a time, so the device never holds the whole model at full precision.
  std::optional<at::Device> device;
  using Offload = zero::Offload;
  Offload offload_optimizer = Offload::none;  ///< stages 1-3: masters, moments, fp32 gradients
  Offload offload_param = Offload::none;      ///< stage 3: parameter shards
  std::string optimizer_nvme_path, param_nvme_path;  ///< folders for the NVMe files
  std::string run_tag = "run";                ///< names the NVMe folders (with rank, host, pid)
  std::int64_t sub_group_size = 1'000'000'000;  ///< NVMe: optimizer elements per sub-group
  int buffer_count = 4;                       ///< NVMe: staging buffers for the sub-group pipeline (>= 3)
  bool pin_memory = true;                     ///< pin CPU copies when CUDA is present
  /// CUDA: offload copies (gradients down, new weights up) and stage-3 prefetches of offloaded
  /// shards run on a side stream, overlapping compute (false: in order; for measuring the overlap).
  bool side_streams = true;
  io::AsyncIoOptions aio;
  std::function<void(const std::string&)> log;  ///< where to say which I/O backend was chosen

  /// What the rules (zero_rules.h) read from these options (compute_dtype unset: full precision).
  RuleSettings rule_settings() const;
  /// Every combination of these options the optimizer cannot run, as "key: why" (the config's
  /// key and the message config validation gives there); the constructor refuses them all at once.
  std::vector<std::string> problems() const;
};

/// The plan options these ZeroOptions imply for rank `rank` of `world_size`.
PlanOptions plan_options(const ZeroOptions& o, int world_size, int rank);

/// The one optimizer of every run (also one process at stage 0: one optimizer, one checkpoint
/// format), carrying out its plan.
class ZeroOptimizer final {
 public:
  /// Flattens every unit's parameters (their names must be unique; they name the state).
  /// Parameters keep their identity: the module still trains them, as views (or, at stage 3,
  /// as empty tensors between gathers). Unit i must be the model's unit i for the hooks.
  /// Frozen units (ParamUnit::frozen, LoRA's base) are laid out, moved to the compute device and
  /// dtype, sharded and gathered the same way, but are not trained: everything below that speaks
  /// of units, parameters, gradients, state, EMA, layout or shards means the trained ones.
  ZeroOptimizer(std::vector<models::ParamUnit> units, comm::Communicator& comm, ZeroOptions options);
  ~ZeroOptimizer();
  ZeroOptimizer(const ZeroOptimizer&) = delete;
  ZeroOptimizer& operator=(const ZeroOptimizer&) = delete;

  /// Clears the gradients of every trained parameter (and the rank's reduced parts).
  void zero_grad();
  /// fused_backward: the coming step's learning rate and gradient_clipping (0: none), before its
  /// first micro-batch. Nothing happens without fused_backward.
  void prepare_fused_step(double lr, double max_norm);
  /// Tells the optimizer whether the coming backward is the step's last micro-batch (gradients
  /// are communicated only then, overlapped with that backward; stage 3 every micro-batch).
  void set_last_micro_step(bool last) { last_micro_ = last; }
  /// Averages the gradients over the ranks as the plan says (all-reduce, or reduce-scatter into
  /// this rank's part); waits for the reductions the hooks started. Call once per optimizer step,
  /// after the last micro-batch's backward.
  void reduce_gradients();
  /// Global L2 norm of the gradients before clipping (a collective when the ranks hold different
  /// parts); scales them to `max_norm` when above it (max_norm <= 0: no clipping). fused_backward:
  /// the norm of the gradients the units were stepped with (before scaling), and the units not
  /// stepped yet are scaled as the others were, by the previous step's norm.
  double clip_grad_norm(double max_norm);
  /// One update (AdamW, 8-bit AdamW or Adafactor) of the rank's part with learning rate `lr` (× each
  /// unit's lr_scale); the units kept whole are all-gathered afterwards.
  void step(double lr);
  /// Loss scaling: multiplies the reduced gradients by `inv_scale` and reports whether any of
  /// them, on any rank, is inf or NaN (a collective). Call after reduce_gradients.
  bool unscale_and_check_overflow(double inv_scale);
  /// Drops this step's gradients without updating (after an overflow).
  void skip_step();
  /// Updates done so far.
  std::int64_t steps() const { return step_; }
  /// fused_backward: the last step's global gradient norm (clips the next step; < 0: none yet),
  /// which a checkpoint keeps.
  double previous_grad_norm() const;
  void set_previous_grad_norm(double norm);
  /// fused_backward: units already stepped in this step (by their backward hooks, until step()).
  std::size_t units_stepped() const;
  /// Full (unsharded) optimizer state, gathered from every rank (a collective, so every rank must
  /// call it): AdamW's moments as exp_avg.<name> and exp_avg_sq.<name> (8-bit ones dequantized);
  /// Adafactor's as transformers names them (exp_avg.<name> with beta1, exp_avg_sq_row.<name> and
  /// exp_avg_sq_col.<name> for two or more dimensions, exp_avg_sq.<name> for one).
  NamedTensors state() const;
  /// Model state on the compute device.
  ModelStateBytes model_state() const;
  /// Model state kept in CPU memory or NVMe files instead.
  OffloadedBytes offloaded() const;
  /// Every trained parameter whole in its training precision (the masters when kept; a
  /// collective when the ranks hold parts). Empty when the model's own tensors are that already.
  NamedTensors full_parameters();

  /// Keeps an EMA of the rank's part, in fp32 CPU memory.
  void enable_ema(double decay);
  /// ema = decay·ema + (1−decay)·param on this rank's part.
  void update_ema();
  /// The whole EMA under the parameters' names (a collective when the ranks hold parts).
  NamedTensors ema_state();
  /// Exchanges the live weights and the EMA (call again to undo); a collective with several ranks.
  void swap_ema();
  /// Bytes of EMA this rank holds (in CPU memory; not model state).
  std::int64_t ema_bytes() const;
  /// The hooks to install on the model (UNet2DConditionModel::set_unit_hooks): stage 3 gathers
  /// and releases there; every stage starts a unit's gradient reduction right after the unit's
  /// backward (overlap_comm), so communication runs while backward goes on.
  std::shared_ptr<models::UnitHooks> unit_hooks();

  // Sharded checkpoints (checkpoint/sharded_state.h).
  /// The flat layout of the units (the same on every rank).
  std::vector<checkpoint::UnitLayout> layout() const;
  /// This rank's part of the model state as "<unit>/<kind>" tensors (kinds: weights — the
  /// masters, or the parameters in their training precision —, exp_avg, exp_avg_sq, and ema when
  /// kept). 8-bit AdamW saves its moments dequantized (any reader can cut them) and each block's
  /// absmax as exp_avg.absmax / exp_avg_sq.absmax (one value a kQuantBlock elements), which brings
  /// back the same codes. Adafactor saves exp_avg (with beta1) and, from rank 0 (every rank holds
  /// them whole), each parameter's statistics as "<unit>/adafactor:<parameter>".
  /// At stage 0 every rank holds everything, so only rank 0 returns anything.
  NamedTensors shard_state();
  /// The bytes shard_state() returns on this rank, known without reading the state (nothing is
  /// swapped in or copied): what one checkpoint's shard of this rank takes on disk, less the file
  /// headers. With delayed_update it counts the lagged weights too (most checkpoints have them).
  std::int64_t checkpoint_bytes() const;
  /// Source of a unit's elements [first, first + count) of one kind, from shards saved under
  /// any world size and stage. Kinds ending in ".absmax" count blocks, not elements, and may come
  /// back undefined (the unit was saved cut otherwise: the moments are quantized afresh); a kind
  /// "adafactor:<parameter>" asks for that parameter's statistics whole.
  using ShardSource = std::function<at::Tensor(const std::string& unit, const std::string& kind, std::int64_t first,
                                               std::int64_t count)>;
  /// Restores weights, moments, the EMA (when `with_ema`) and the step count from `read`; a
  /// collective from stage 1 on (the units kept whole are gathered again).
  void load_shards(const ShardSource& read, std::int64_t steps, bool with_ema, bool with_lagged = false);
  /// delayed_update: writes the update under way into the weights now. Nothing otherwise.
  void flush_delayed();
  /// delayed_update: whether an update is computed but not yet in the weights (the checkpoint then
  /// also keeps the weights the device trains with, as "<unit>/lagged").
  bool delayed_pending() const;

  /// What every unit's layout and treatment is (the plan this optimizer carries out).
  const Plan& plan() const { return plan_; }
  /// The NVMe folders in use (empty without NVMe offload).
  std::vector<std::string> nvme_dirs() const;

  /// Padded elements over all units (Σ units' flat sizes) and real ones (Ψ).
  std::int64_t padded_numel() const;
  std::int64_t numel() const;
  /// Units whose parameters are sharded (stage 3).
  std::size_t sharded_units() const;
  /// Frozen units: elements (Ψ of the frozen base) and how many of them are sharded.
  std::int64_t frozen_numel() const;
  /// Bytes the frozen units hold laid out (a quantized base: its codes and scales).
  std::int64_t frozen_bytes() const;
  std::size_t sharded_frozen_units() const;
  /// Padded elements of the units kept whole (all of them below stage 3).
  std::int64_t persistent_numel() const;
  /// Padded elements of the units whose full gradient buffer stays (stages 0-1: all; 2-3: the
  /// persistent ones, e.g. io, which runs at both ends of the forward).
  std::int64_t whole_gradient_numel() const;

  // Used by the stage-3 hooks and their autograd nodes.
  void gather(std::size_t unit);
  /// Stage 3: starts gathering a sharded unit in the background (the next one to run).
  void prefetch(std::size_t unit);
  void release(std::size_t unit);
  void reduce_unit(std::size_t unit);
  bool is_sharded(std::size_t unit) const;
  /// Whether the hooks should watch this unit's backward now.
  bool wants_backward_hook(std::size_t unit) const;

 private:
  struct Unit;
  struct Offload;  // NVMe stores, staging buffers and the sub-group plan (zero_unit.h)
  /// The unit the hooks call `index` (trained or frozen, in the order the constructor got them).
  Unit& indexed(std::size_t index) const { return *by_index_.at(index); }
  /// Fills a unit's offsets, sizes, shapes and numel from its parameters.
  void lay_out(Unit& u, const models::ParamUnit& pu) const;
  /// Parameter `i` of the unit as a view of its flat buffer, in its dtype and shape.
  static at::Tensor param_view(const Unit& u, const at::Tensor& flat, std::size_t i);
  /// Lays out a frozen unit in the compute dtype on the compute device (only its shard when sharded).
  std::unique_ptr<Unit> make_frozen_unit(models::ParamUnit& pu, const UnitPlan& up);
  /// A trained unit: laid out as `up` says, its weights moved into the flat buffer (or its
  /// prebuilt shard taken), masters and moments created where the optimizer state lives.
  std::unique_ptr<Unit> make_trained_unit(models::ParamUnit& pu, const UnitPlan& up);
  /// The precisions and where things live, from the units' parameters and the options.
  void choose_precisions(const std::vector<models::ParamUnit>& units);
  /// Offloaded parameter shards and optimizer state to CPU memory (pinned with CUDA).
  void place_offloaded_state();
  /// Stage 3: drops a sharded unit's gathered copy (its parameters become empty tensors).
  void release(Unit& u);
  void ensure_grads();
  void reduce_scatter_into_shard(Unit& u, const at::Tensor& full_grad);
  void launch_reduce(Unit& u);
  /// After the step: the units kept whole get every rank's updated shard (`defer`: the ones a
  /// forward hook reaches are gathered in the background; their hook waits).
  void gather_whole_units(bool defer = false);
  /// One rank with the shard on the compute device: the shard is the whole unit (no copy to gather).
  bool shard_is_unit(const Unit& u) const;
  /// Waits for the gathers gather_whole_units left running.
  void finish_gathers();
  void finish_reduce(Unit& u);
  /// Moves finished reductions' gradients along (offload: into the CPU copy) while backward runs.
  void drain_reductions(const Unit* keep);
  /// Stage 1 with offload: copies the rank's part of the reduced gradients to the CPU.
  void stage_owned_grad(Unit& u);
  /// Puts a reduced gradient `part` [owned] into the unit's shard_grad (added × scale, or
  /// copied). Into CPU memory with side streams it travels without blocking: settle_grad finishes it.
  void deposit_grad(Unit& u, const at::Tensor& part, double scale, bool accumulate);
  /// Finishes a deposit under way (blocking the host unless `block` is false; then only when its
  /// copy is done). Returns whether nothing of the unit's is left pending.
  bool settle_grad(Unit& u, bool block = true);
  /// A held bf16 gradient (Unit::grad_held) added into the float32 shard_grad, where a reader
  /// or a second deposit of the same step needs it.
  void release_held_grad(Unit& u);
  /// The gradient the step uses for the rank's part of a unit (owned elements).
  at::Tensor step_grad(Unit& u);
  /// Σg² of the unit's reduced gradients (a held bf16 one with its scale), float64, CPU scalar.
  at::Tensor grad_square_sum(Unit& u);
  /// The rank's part of a unit's compute parameters (stage 3 NVMe: read into a buffer).
  at::Tensor owned_params(Unit& u);
  /// Starts reading a stage 3 NVMe shard into a staging buffer made for it (none when a read is under
  /// way); owned_params() waits for it and hands the buffer over.
  void read_owned_params(Unit& u);
  /// Writes owned_params() back where it lives (only stage 3 NVMe shards need it).
  void store_owned_params(Unit& u, const at::Tensor& values);
  /// The rank's part of the weights in the best precision held in memory (masters, else params).
  at::Tensor owned_weights(Unit& u);
  void init_offload();
  void step_in_memory(Unit& u, double lr);
  /// An optimizer without the fused kernel (8-bit AdamW's large units, Adafactor) on a unit in memory.
  void step_lean(Unit& u, double lr);
  /// What a unit's checkpoint code reads of it (unit_optimizer.h).
  static UnitView view(const Unit& u);
  /// What a unit's optimizer state takes in memory between steps (with NVMe: its unswapped parts).
  std::int64_t optimizer_bytes(const Unit& u) const;
  // Where and when the update runs (zero_schedules.h): one schedule per optimizer, from the options.
  class Schedule;
  class InMemorySchedule;
  class NvmeSchedule;
  class FusedSchedule;
  class DelayedSchedule;
  std::unique_ptr<Schedule> make_schedule();
  /// delayed_update: waits for the host thread's update (rethrowing its error). Nothing otherwise.
  void join_delayed();
  /// Stages 2-3: the unit's parameter gradients moved into one padded buffer (undefined: none).
  at::Tensor take_grads(Unit& u);
  /// Reduce-scatters `full` into the unit's reduced part (created when it is not there).
  void reduce_into_part(Unit& u, const at::Tensor& full);
  /// The weights a step reads and writes for compute parameters `p` (the rank's part): the
  /// masters, else `p` itself where the state lives in its precision, else a copy there
  /// (float32 for bf16 weights without masters).
  at::Tensor step_weights(Unit& u, const at::Tensor& p);
  /// Writes the updated weights `w` (float32 where they were computed) into the unit's compute
  /// parameters `p`: converted from the masters, rounded stochastically without them, or copied.
  void write_weights(Unit& u, at::Tensor& p, const at::Tensor& w);
  /// Sums over the ranks that share a unit's elements (nothing when replicated).
  void reduce_shared(at::Tensor& t);
  /// A flat CPU buffer of n elements (contents undefined), from the ones recycle() kept: a step
  /// with the optimizer in CPU memory takes a unit-sized buffer or two per unit (a fused
  /// backward's gradient part, bf16 weights' float32 copy), and fresh pages of that size cost the
  /// kernel's zeroing every time (a third of a Flux Adafactor step, issue 39). Other devices allocate.
  at::Tensor host_scratch(std::int64_t n, const at::TensorOptions& opts);
  /// Keeps a CPU buffer for host_scratch() (the two most recent; older ones are freed).
  void recycle(at::Tensor t);
  /// The unit's reduced copy (shard_grad), zeros when first asked for. Offloaded AdamW under bf16
  /// makes it only when a step needs it (accumulation, fp32 readers): a held bf16 gradient alone
  /// goes straight into the fused step, so a run without accumulation never has it (−4 B a
  /// parameter in CPU memory).
  at::Tensor& grad_copy(Unit& u);
  /// Whether the reduced gradients go to a copy of their own (made or still to be made).
  bool has_grad_copy(const Unit& u) const;
  /// NVMe with Adafactor or 8-bit AdamW: a unit's whole optimizer state (masters, codes and
  /// absmax, Adafactor's first moment) lives in files and comes into memory for its step.
  /// begin_swap_in allocates and starts the reads, finish_swap_in waits for them; swap_out
  /// writes the state back (when `write`) and frees it. Units without swapped state: nothing.
  void begin_swap_in(Unit& u);
  void finish_swap_in(Unit& u);
  void swap_out(Unit& u, bool write);
  struct SwapGuard;  // swaps a unit in for a scope (zero_unit.h)
  struct NvmeUnit;     // a unit's NVMe regions and swapped state (zero_unit.h)
  /// The unit's NVMe state, made on first use.
  static NvmeUnit& nvme_state(Unit& u);
  /// The unit's NVMe region of a state kind (0 master, 1 m, 2 v); -1: none (the state is in memory).
  static int state_region(const Unit& u, int kind);
  /// Master / moments of a unit, whole (NVMe: read synchronously). kind: 0 master, 1 m, 2 v.
  at::Tensor read_state(Unit& u, int kind);
  void write_state(Unit& u, int kind, const at::Tensor& values);
  void write_state_in_memory(Unit& u, int kind, const at::Tensor& values);
  bool last_micro_ = true;
  double ema_decay_ = -1;  // < 0: no EMA
  bool ema_swapped_ = false;
  std::vector<std::unique_ptr<Unit>> units_;   // the trained units, in order
  std::vector<std::unique_ptr<Unit>> frozen_;  // the frozen ones, in order
  std::vector<Unit*> by_index_;                // every unit as the constructor got them (the hooks' indices)
  std::vector<Unit*> in_flight_;  // reductions started by the hooks, oldest first
  comm::Communicator& comm_;
  ZeroOptions o_;
  Plan plan_;
  at::ScalarType master_dtype_ = at::kFloat;
  at::Tensor signed_map_, unsigned_map_;  // 8-bit AdamW's dynamic maps, where the state lives
  AdamSettings adam_;                     // AdamW's (and 8-bit AdamW's) hyper-parameters
  bool masters_ = false;  // separate master weights (mixed precision or optimizer offload)
  bool stochastic_ = false;  // master_weights none under bf16: updates rounded stochastically
  bool hold_bf16_grads_ = false;  // offloaded AdamW with masters under bf16: Unit::grad_held
  at::TensorOptions shard_grad_opts_;  // what a unit's reduced gradient part is kept in
  std::vector<at::Tensor> scratch_;    // host_scratch's kept buffers
  at::TensorOptions compute_opts_, state_opts_;  // where/what the model computes; where the optimizer state lives
  at::TensorOptions given_opts_;  // the trained parameters' own precision, on the compute device
  std::unique_ptr<Offload> offload_;
  std::unique_ptr<CopyStream> copies_;  // host<->device copies (a side stream on CUDA)
  std::vector<Unit*> depositing_;       // units with a gradient deposit under way, oldest first
  std::int64_t step_ = 0;
  bool grads_reduced_ = false;
  // Last: its host thread (delayed_update) reads the units, so it goes before them.
  std::unique_ptr<Schedule> schedule_;
  FusedSchedule* fused_ = nullptr;      // schedule_ under fused_backward
  DelayedSchedule* delayed_ = nullptr;  // schedule_ under delayed_update
};

}  // namespace zs::zero
