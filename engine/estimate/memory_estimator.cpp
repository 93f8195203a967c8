#include "estimate/memory_estimator.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>
#include <optional>
#include <sstream>

#include <nlohmann/json.hpp>

#include "config/zero_settings.h"
#include "core/error.h"
#include "core/text.h"
#include "models/attention_options.h"
#include "models/model_family.h"
#include "models/quantized_base.h"
#include "models/unit_memory.h"
#include "settings/trainer_config.h"

namespace zs::estimate {
namespace {

using std::int64_t;

/// Measured activation bytes of the tiny model on the CPU divided by this file's element counts:
/// 0.95-1.01 over 16-64 px, batch 2-8, with and without checkpointing (tst_estimate measures
/// it on every run and requires 10 %), so the counts are used as they are.
constexpr double kActivationCalibration = 1.0;

constexpr int64_t kIoAlignment = 4096;
int64_t align_up(int64_t n) { return (n + kIoAlignment - 1) / kIoAlignment * kIoAlignment; }

int compute_bytes(const std::string& precision) { return precision == "fp32" ? 4 : 2; }

}  // namespace

std::int64_t adafactor_state_elements(const UnitShape* shape, std::int64_t parameters) {
  return shape ? shape->memory_model().adafactor_state_elements(*shape, parameters) : parameters / 8;
}

/// The optimizer type the estimate's `optimizer` names (AdamW for anything else, as before it was
/// checked by the config).
zero::OptimizerType optimizer_type(const EstimateOptions& o) {
  return zero::find_optimizer(o.optimizer).value_or(zero::OptimizerType::adamw);
}

zero::RuleSettings rule_settings(const EstimateOptions& o) {
  zero::RuleSettings s;
  s.optimizer = optimizer_type(o);
  s.compute = zero::precision_from_name(o.precision);
  s.master_weights = o.master_weights;
  s.fused_backward = o.fused_backward;
  s.delayed_update = o.delayed_update;
  s.offload_optimizer = o.offload_optimizer;
  return s;
}

namespace {

/// The units a run under `o` gives the optimizer, in its order: the model family's roster
/// (models::unit_roster, the list make_optimizer lays out) of this shape.
std::vector<models::RosterUnit> planned_units(const ModelShape& model, const EstimateOptions& o) {
  models::TrainedParts trained;
  trained.lora = o.lora;
  trained.text = o.text_training;
  return models::unit_roster(models::roster_parts(model), trained);
}

/// The ZeRO plan the optimizer would make for these units (rank 0's layout): the engine's
/// plan_options of the same settings, the roster's persistent units.
zero::Plan plan_for(const std::vector<models::RosterUnit>& units, const EstimateOptions& o) {
  zero::ZeroOptions z;
  z.stage = o.stage;
  z.offload_optimizer = o.offload_optimizer;
  z.offload_param = o.offload_param;
  z.persistence_threshold = o.persistence_threshold;
  z.overlap_comm = o.overlap_comm;
  z.optimizer = optimizer_type(o);
  z.fused_backward = o.fused_backward;
  z.persistent_units.clear();
  std::vector<std::pair<std::string, int64_t>> sizes;
  for (const auto& u : units) {
    sizes.emplace_back(u.name, u.parameters);
    if (u.persistent) z.persistent_units.push_back(u.name);
  }
  return zero::make_plan(zero::plan_options(z, o.world_size, 0), sizes);
}

/// What the units' memory models (models/unit_memory.h) need from the estimate.
models::ActivationQuery activation_query(const ModelShape& m, const EstimateOptions& o) {
  models::ActivationQuery q;
  q.side = std::max<int64_t>(o.resolution / std::max(m.latent_factor, 1), 1);
  q.context_tokens = m.context_tokens;
  q.model_out_channels = m.out_channels;
  q.batch_size = o.batch_size;
  q.attention = o.attention;
  return q;
}

}  // namespace

namespace {

/// ZeRO's gradient buffers while backward runs (stages 2-3 without fused_backward): each hooked
/// unit's fresh gradients and their flat copy while its backward finishes, then up to `bucket`
/// elements of the units after it (already through backward) still being reduced, with their
/// reduced parts (`parts` per element: 1/N, none with one rank).
struct BackwardBuffers {
  std::map<std::string, int64_t> hooked;  // unit name -> elements of its hooked gradients
  int64_t bucket = 0;
  double parts = 0;
  int64_t bytes = 2;  // per element (the compute dtype)
};

struct BackwardPeaks {
  double activations = 0;    // bytes
  double cpu_inputs = 0;     // bytes (cpu_checkpointing's kept inputs)
  double with_buffers = 0;   // bytes: activations and the buffers above at the same moment
};

/// Walks the units as backward meets them: the peak of what autograd holds, alone and with ZeRO's
/// gradient buffers of that moment (`buffers`: optional).
BackwardPeaks backward_peaks(const ModelShape& model, const EstimateOptions& o, const BackwardBuffers* buffers) {
  const models::ActivationQuery query = activation_query(model, o);
  // Forward order: the text encoder runs first, then io's input layers and the UNet units.
  // Backward walks it in reverse and frees each unit's saved tensors as it goes, so the peak is
  // the largest (everything saved up to unit k) + (what unit k's backward allocates).
  // A frozen text encoder runs without gradients: it keeps nothing.
  std::vector<const UnitShape*> order;
  const bool text_trained = o.text_training != models::TextEncoderTraining::frozen;
  if (text_trained)
    for (const auto& u : model.text_encoders) order.push_back(&u);
  for (const auto& u : model.units) order.push_back(&u);
  // The gradients backward has produced before it reaches unit k: the units after k.
  std::vector<double> hooked(order.size(), 0), after(order.size(), 0);
  if (buffers) {
    for (std::size_t k = 0; k < order.size(); ++k) {
      const auto it = buffers->hooked.find(order[k]->name);
      if (it != buffers->hooked.end()) hooked[k] = static_cast<double>(it->second);
    }
    for (std::size_t k = order.size(); k-- > 1;) after[k - 1] = after[k] + hooked[k];
  }
  // kept: saved on the device; inputs: unit inputs kept by checkpoints (on the device, or in
  // CPU memory with cpu_checkpointing, where the one being rerun comes back for its backward).
  const bool to_cpu = o.gradient_checkpointing && o.cpu_checkpointing;
  const double scale = static_cast<double>(o.batch_size) * compute_bytes(o.precision) * kActivationCalibration;
  double kept = 0, inputs = 0, peak = 0, with_buffers = 0;
  for (std::size_t k = 0; k < order.size(); ++k) {
    const UnitShape* u = order[k];
    const models::UnitMemory& memory = u->memory_model();
    const models::UnitActivation a = memory.activation(*u, query);
    const std::optional<double> checkpointed = o.gradient_checkpointing ? memory.checkpointed_input(*u, query) : std::nullopt;
    double held = 0;  // elements per sample autograd holds during unit k's backward
    if (checkpointed) {
      // Only the unit's input is kept; backward runs the unit again and holds its full set for a moment.
      const double input = *checkpointed;
      inputs += input;
      held = kept + (to_cpu ? input : inputs) + a.backward_peak();
    } else {
      held = kept + (to_cpu ? 0 : inputs) + a.backward_peak();
      kept += a.saved;
    }
    peak = std::max(peak, held);
    double in_flight = 0;
    if (buffers) {
      const double behind = std::min(static_cast<double>(buffers->bucket), after[k]);
      in_flight = static_cast<double>(buffers->bytes) * (2 * hooked[k] + behind * (1 + buffers->parts));
    }
    with_buffers = std::max(with_buffers, held * scale + in_flight);
  }
  return {peak * scale, to_cpu ? inputs * scale : 0, with_buffers};
}

}  // namespace

ActivationBytes activation_split(const ModelShape& model, const EstimateOptions& o) {
  const BackwardPeaks p = backward_peaks(model, o, nullptr);
  return {static_cast<int64_t>(p.activations), static_cast<int64_t>(p.cpu_inputs)};
}

int64_t activation_bytes(const ModelShape& model, const EstimateOptions& o) { return activation_split(model, o).device; }

namespace {

/// What the per-unit pass counts besides the model states themselves (elements).
struct UnitTally {
  int64_t max_hook_padded = 0;      // the largest unit whose hook reduces its gradients
  int64_t max_owned = 0;            // the largest part a rank updates
  int64_t whole_total = 0;          // trained units kept whole
  int64_t whole_frozen = 0;         // frozen units (LoRA's base) kept whole
  int64_t param_staging = 0;        // bytes: the largest NVMe parameter shard (its staging buffer)
  int64_t owned_total = 0;          // elements this rank updates
  int64_t sharded_shards = 0;       // this rank's shards of the sharded units
  int64_t largest_sharded = 0;      // the largest sharded unit
  int64_t gathered_after_step = 0;  // units all-gathered after the step
  int64_t hook_total = 0;           // units whose hooks reduce their gradients
  std::map<std::string, int64_t> hooked;  // ... each by name: its padded elements
  std::vector<int64_t> sharded_padded;
  std::vector<int64_t> sharded_bytes;  // ... each as it is gathered, in bytes
  int64_t offloaded_shards = 0;     // bytes: this rank's shards in CPU memory or NVMe (copied up when gathered)
  int64_t max_swapped = 0;          // bytes: the largest unit state the lean optimizers swap in from NVMe
};

/// Whether fp32 master weights exist (the engine's rule: mixed precision or offload, unless
/// master_weights: none).
bool keeps_masters(const EstimateOptions& o) {
  return zero::keeps_master_weights(o.master_weights, compute_bytes(o.precision) < 4, o.offload_optimizer);
}

/// Whether ZeroOptimizer holds reduced bf16 gradients in CPU memory as they land (the engine's rule)
/// instead of adding them into a float32 copy.
bool holds_bf16_grads(const EstimateOptions& o) { return zero::holds_bf16_grads(rule_settings(o)); }

/// One unit's optimizer state as the engine lays it out (zero::state_layout; masters included),
/// float32 (under bf16 without masters too). Adafactor's statistics are estimated from the shape.
zero::StateLayout state_layout(const EstimateOptions& o, const zero::UnitPlan& l, const UnitShape* shape) {
  zero::LayoutRequest r;
  r.optimizer = optimizer_type(o);
  r.numel = l.numel;
  r.owned = l.owned;
  r.masters = keeps_masters(o);
  r.statistics_numel = r.optimizer == zero::OptimizerType::adafactor ? adafactor_state_elements(shape, l.numel) : 0;
  r.adafactor_beta1 = o.adafactor_beta1;
  return zero::state_layout(r);
}

/// Parameters, gradients, optimizer states and EMA of every unit where the plan puts them.
UnitTally count_model_states(const zero::Plan& plan, const std::vector<models::RosterUnit>& units,
                             const std::map<std::string, const UnitShape*>& shapes, const EstimateOptions& o,
                             const std::set<std::string>& byte_units, MemoryEstimate& e) {
  const int64_t compute = compute_bytes(o.precision);
  // fused_backward without accumulation: a hooked unit's reduced part lives from its reduction to
  // its step only (count_buffers has it).
  const bool transient_parts = o.fused_backward && o.accumulation <= 1;
  UnitTally t;
  for (std::size_t k = 0; k < plan.units.size(); ++k) {
    const zero::UnitPlan& l = plan.units[k];
    // A quantized frozen unit is laid out in bytes (its plan counts bytes).
    const int64_t c = byte_units.count(units[k].name) ? 1 : compute;
    if (units[k].frozen) e.frozen_base_bytes += c * l.numel;
    // Parameters (compute dtype): whole units everywhere; stage 3 keeps the rank's shard. A
    // frozen base (LoRA) is laid out and gathered the same way, and has nothing else.
    if (!l.sharded) {
      e.gpu.parameters += c * l.padded;
      (units[k].frozen ? t.whole_frozen : t.whole_total) += l.padded;
    } else {
      t.sharded_padded.push_back(l.padded);
      t.sharded_bytes.push_back(c * l.padded);
      t.sharded_shards += l.shard;
      t.largest_sharded = std::max(t.largest_sharded, l.padded);
      if (o.offload_param == Offload::none) e.gpu.parameters += c * l.shard;
      else if (o.offload_param == Offload::cpu) e.cpu.parameters += c * l.shard;
      else {
        e.nvme += align_up(c * l.shard);
        t.param_staging = std::max(t.param_staging, align_up(c * l.shard));
      }
      if (o.offload_param != Offload::none) t.offloaded_shards += c * l.shard;
    }
    if (units[k].frozen) continue;
    t.owned_total += l.owned;
    t.max_owned = std::max(t.max_owned, l.owned);
    if (l.gather_after_step) t.gathered_after_step += l.padded;
    // Gradients: the full buffer where backward accumulates (stages 0-1, units kept whole), and
    // the rank's reduced part (stages 2-3; with optimizer offload an fp32 copy in CPU memory).
    if (!l.hook_grads) {
      e.gpu.gradients += c * l.padded;
    } else {
      t.max_hook_padded = std::max(t.max_hook_padded, l.padded);
      t.hook_total += l.padded;
      t.hooked[units[k].name] = l.padded;
    }
    if (transient_parts && l.hook_grads) {
      // (counted as working buffers)
    } else if (o.offload_optimizer != Offload::none) {
      // Offloaded AdamW under bf16 keeps a reduce-scattered gradient in bf16 where it lands
      // (ZeroOptimizer's held gradients); the float32 copy is made only when a second
      // micro-batch adds to it.
      if (holds_bf16_grads(o) && l.reduce_scatter) e.cpu.gradients += 2 * l.owned + (o.accumulation > 1 ? 4 * l.owned : 0);
      else e.cpu.gradients += 4 * l.owned;
    } else if (l.reduced_copy) {
      e.gpu.gradients += c * l.owned;
    }
    // Optimizer states.
    const auto found = shapes.find(units[k].name);
    const zero::StateLayout layout = state_layout(o, l, found == shapes.end() ? nullptr : found->second);
    const int64_t state = layout.bytes();
    if (o.offload_optimizer == Offload::none) e.gpu.optimizer_states += state;
    else if (o.offload_optimizer == Offload::cpu) e.cpu.optimizer_states += state;
    else {
      // On NVMe each swapped part is a region of its own, aligned; what is not swapped (Adafactor's
      // row and column statistics) stays in CPU memory. AdamW streams its regions through the
      // sub-group buffers; the lean optimizers bring a unit's state in whole
      // (ZeroOptimizer::begin_swap_in), which max_swapped counts.
      const int64_t in_memory = layout.resident_bytes();
      e.cpu.optimizer_states += in_memory;
      for (const zero::StatePart& part : layout.parts)
        if (part.swapped) e.nvme += align_up(part.bytes());
      if (optimizer_type(o) != zero::OptimizerType::adamw) t.max_swapped = std::max(t.max_swapped, state - in_memory);
    }
    if (o.ema) e.cpu.parameters += 4 * l.owned;
  }
  return t;
}

/// The device's working buffers on top of the model states (backward's and the step's) and the
/// CPU's staging buffers. Needs e.gpu.activations.
void count_buffers(const zero::Plan& plan, const UnitTally& t, const EstimateOptions& o, int64_t backward_excess,
                   MemoryEstimate& e) {
  const int64_t c = compute_bytes(o.precision);
  const bool masters = keeps_masters(o);
  // Stage 3: the unit being used plus the one prefetched (in forward the next, in backward the
  // previous), each gathered whole in the compute dtype.
  int64_t gathered = 0;
  for (std::size_t i = 0; i < t.sharded_padded.size(); ++i) {
    const int64_t next = i + 1 < t.sharded_padded.size() && t.sharded_padded[i + 1] <= o.prefetch_bucket_size
                             ? t.sharded_bytes[i + 1] : 0;
    gathered = std::max(gathered, t.sharded_bytes[i] + next);
  }
  // Stages 2-3: the fresh gradients of the unit backward is in and their flat copy, and up to
  // reduce_bucket_size elements of earlier units' copies still being reduced (their reduced parts
  // too), as ZeroOptimizer::drain_reductions allows; with one rank the reduce-scatter is the
  // identity and a unit's part is a view of its flat copy (ZeroOptimizer::launch_reduce).
  // They grow as backward frees the activations: `backward_excess` is what they add at the
  // moment the two together peak (backward_peaks).
  int64_t in_flight = t.max_hook_padded > 0 ? backward_excess : 0;
  // fused_backward: reductions are synchronous; the unit in backward and the one waiting to step
  // each hold their gradients and reduced part (fp32 in CPU memory with offload).
  if (o.fused_backward && t.max_hook_padded > 0) {
    in_flight = 2 * c * t.max_hook_padded;
    if (o.accumulation <= 1) {
      if (o.offload_optimizer == Offload::none) in_flight += 2 * c * t.max_owned;
      else e.cpu.buffers += 2 * 4 * t.max_owned;
    }
  }
  // Stages 1-3: the all-gather of the whole units' updated shards after the step.
  const int64_t allgather = c * std::min(o.allgather_bucket_size, t.gathered_after_step) * (o.world_size + 1) /
                            o.world_size;
  // Stages 0-1 without overlap: gradients all-reduced in buckets of concatenated units.
  const int64_t reduce = !plan.any_reduce_scatter() && o.world_size > 1 && !plan.overlap_comm
                             ? c * std::min(o.reduce_bucket_size, e.parameters)
                             : 0;
  // Mixed precision without offload: the step upcasts one unit's gradient part.
  const int64_t upcast = masters && o.offload_optimizer == Offload::none && c < 4 ? 4 * t.max_owned : 0;
  // Backward's buffers come on top of the activations; the step's (all-reduce before it,
  // all-gather after it) only once the activations are gone, so they add only their excess.
  const int64_t backward = gathered + in_flight;
  const int64_t step = gathered + std::max({allgather, reduce, upcast});
  e.gpu.buffers = std::max(backward, step - e.gpu.activations);
  if (o.offload_optimizer == Offload::nvme && t.max_swapped > 0) {
    e.cpu.buffers += 2 * t.max_swapped;  // the unit that steps and the next one being read
  } else if (o.offload_optimizer == Offload::nvme) {
    const int64_t slot = align_up(4 * std::min(o.sub_group_size, t.owned_total));
    e.cpu.buffers += std::max(o.buffer_count, 3) * 3 * slot;
  }
  // NVMe parameter shards are staged in CPU memory only while in flight (ZeroOptimizer::
  // read_owned_params): the unit being gathered, the one prefetched and the one stepping; the NVMe
  // optimizer's sub-group holds the shards of the units it spans until their last piece.
  if (t.param_staging > 0) {
    e.cpu.buffers += 3 * t.param_staging;
    if (o.offload_optimizer == Offload::nvme) e.cpu.buffers += c * std::min(o.sub_group_size, t.owned_total);
  }
  // delayed_update: the step's gradients move aside (a second bf16 buffer when they are held).
  if (o.delayed_update && o.offload_optimizer == Offload::cpu) e.cpu.buffers += (holds_bf16_grads(o) ? 2 : 4) * t.owned_total;
}

/// Bytes model.text_encoder_precision spares on these frozen text-encoder weights (0 while the
/// encoders train or stay in the compute dtype).
int64_t text_bytes_saved(const models::LinearWeights& w, const EstimateOptions& o) {
  if (o.text_training != models::TextEncoderTraining::frozen || o.text_format == quant::BaseFormat::bf16) return 0;
  return compute_bytes(o.precision) * w.elements - models::quantized_bytes(w, o.text_format);
}

/// Bytes of the frozen encoder that streams through the device piece by piece (0: none).
int64_t streamed_bytes(const ModelShape& model, const EstimateOptions& o) {
  return compute_bytes(o.precision) * model.frozen_streamed_parameters - text_bytes_saved(model.streamed_linear, o);
}

/// Frozen components (VAE, text encoders), in the compute dtype, the VAE in fp32 when it asks
/// for it (force_upcast): on the device while training, unless both caches are on, when they
/// wait in CPU memory (the caches assumed complete; a CPU-only run releases them instead).
void count_frozen_parts(const ModelShape& model, const EstimateOptions& o, MemoryEstimate& e) {
  const int64_t c = compute_bytes(o.precision);
  // model.text_encoder_precision: the encoders' Linear weights as codes and scales instead.
  const int64_t frozen = c * (e.frozen_parameters - model.frozen_fp32_parameters) + 4 * model.frozen_fp32_parameters -
                         text_bytes_saved(model.frozen_text_linear, o);
  // A streamed part (Flux's T5-XXL) never sits on the device whole: one piece at a time.
  const int64_t streamed = streamed_bytes(model, o);
  const int64_t resident =
      frozen - (streamed - (c * model.frozen_streamed_piece - text_bytes_saved(model.streamed_piece_linear, o)));
  if (o.frozen_off_device && e.frozen_parameters > 0 && model.latent_factor > 1) {
    // Loaded on demand, the streamed encoder never comes: the caches hold its outputs.
    e.cpu.parameters += model.frozen_on_demand ? frozen - streamed : frozen;
    // The pass that fills the caches: the frozen weights and one image through the VAE encoder
    // without gradients (about three 128-channel maps at full size alive at once).
    const int64_t vae_bytes = model.frozen_fp32_parameters > 0 ? 4 : c;
    e.cache_pass = resident + 3 * 128 * o.resolution * o.resolution * vae_bytes;
    e.cache_pass_host = frozen;
  } else {
    e.gpu.parameters += resident;
    e.cpu.parameters += frozen - resident;
    e.gpu_frozen = resident;
  }
}

}  // namespace

MemoryEstimate estimate_memory(const ModelShape& model, const EstimateOptions& options) {
  EstimateOptions o = options;
  o.world_size = std::max(o.world_size, 1);
  // zero.offload_param below stage 3 is refused as the trainer refuses it (validation, and
  // zero::make_plan, which plan_for below calls, throws saying so).
  MemoryEstimate e;
  e.options = o;
  const std::vector<models::RosterUnit> units = planned_units(model, o);
  for (const auto& u : units) (u.frozen ? e.frozen_base_parameters : e.parameters) += u.parameters;
  e.adapter_parameters = (o.lora ? model.lora_denoiser_parameters : 0) + (o.text_training == models::TextEncoderTraining::lora ? model.lora_text_parameters : 0);
  // The text encoders are frozen parts unless the roster has them (trained in full, or a LoRA
  // base laid out as a frozen unit).
  int64_t trained_text = 0;
  if (o.text_training != models::TextEncoderTraining::frozen)
    for (const auto& t : model.text_encoders) trained_text += t.parameters;
  e.frozen_parameters = model.frozen_parameters - trained_text;
  e.frozen_fp32_parameters = model.frozen_fp32_parameters;
  std::map<std::string, const UnitShape*> shapes;
  for (const auto& u : model.units) shapes[u.name] = &u;
  // A quantized base: each frozen block's size in bytes as ZeroOptimizer lays it out (io stays).
  std::set<std::string> byte_units;
  std::vector<models::RosterUnit> laid_out = units;
  int64_t largest_unit = 0;  // elements (the load peak's unit in float32)
  for (auto& u : laid_out) {
    const auto found = shapes.find(u.name);
    if (found == shapes.end()) continue;
    largest_unit = std::max(largest_unit, u.parameters);
    const models::LinearWeights& w = found->second->linear;
    if (!u.frozen || o.base_format == quant::BaseFormat::bf16 || w.tensors == 0 || u.name == model.units.front().name)
      continue;
    u.parameters = models::quantized_unit_bytes(w, o.base_format, u.parameters - w.elements, compute_bytes(o.precision));
    byte_units.insert(u.name);
  }
  const zero::Plan plan = plan_for(laid_out, o);
  const UnitTally tally = count_model_states(plan, laid_out, shapes, o, byte_units, e);
  // ZeRO's gradient buffers during backward, unit by unit, against the activations of the moment.
  BackwardBuffers buffers;
  buffers.bytes = compute_bytes(o.precision);
  buffers.hooked = tally.hooked;
  buffers.bucket = std::min(o.reduce_bucket_size, tally.hook_total);
  buffers.parts = o.world_size > 1 ? 1.0 / o.world_size : 0.0;
  const BackwardPeaks peaks = backward_peaks(model, o, &buffers);
  e.gpu.activations = static_cast<int64_t>(peaks.activations);
  e.cpu.activations = static_cast<int64_t>(peaks.cpu_inputs);  // cpu_checkpointing: the kept unit inputs
  count_frozen_parts(model, o, e);
  count_buffers(plan, tally, o, std::max<int64_t>(0, static_cast<int64_t>(peaks.with_buffers) - e.gpu.activations), e);
  if (o.gpu_memory > 0) {
    e.fits = e.gpu.total() <= o.gpu_memory;
    e.suggestion = lowest_fitting(model, o);
  }
  // Loading: every process builds the trainable model in fp32 in CPU memory (the optimizer then
  // moves it to the device unit by unit) and reads the frozen parts in fp32 before casting them;
  // with zero3_init_flag at stage 3 it keeps only its shards and one whole unit at a time.
  // LoRA's frozen base too: its adapters take their shapes from the layers' options.
  // Parameters on NVMe: each shard goes to a spill file as it is cut (ShardedInit), so only the
  // unit being built and its shard are in memory.
  const int64_t shard_bytes = o.master_weights && !o.lora ? 4 : compute_bytes(o.precision);
  const int64_t shards_kept = o.offload_param == Offload::nvme ? (tally.largest_sharded + o.world_size - 1) / o.world_size : tally.sharded_shards;
  const int64_t trainable_fp32 =
      o.stage == 3 && o.zero3_init
          ? 4 * (tally.whole_total + tally.whole_frozen + tally.largest_sharded) + shard_bytes * shards_kept
          : 4 * (e.parameters + e.frozen_base_parameters);
  // Quantized while loading: the blocks as codes and scales (every rank reads them whole), the
  // unit being read in float32, io and the trained units in float32.
  int64_t loaded = trainable_fp32;
  if (o.quantize_while_loading && !byte_units.empty()) {
    int64_t quantized_elements = 0, quantized_bytes = 0;
    for (std::size_t k = 0; k < units.size(); ++k)
      if (byte_units.count(units[k].name)) {
        quantized_elements += units[k].parameters;
        quantized_bytes += laid_out[k].parameters;
      }
    loaded = 4 * (e.parameters + e.frozen_base_parameters - quantized_elements + largest_unit) + quantized_bytes;
  }
  const bool never_loaded = model.frozen_on_demand && o.frozen_off_device && model.latent_factor > 1;
  e.cpu_load_peak = loaded + 4 * (e.frozen_parameters - (never_loaded ? model.frozen_streamed_parameters : 0));
  if (o.cpu_memory > 0)
    e.cpu_fits = std::max(e.cpu.total(), e.cpu_load_peak) * std::max(o.processes_per_machine, 1) <= o.cpu_memory;
  // Bytes up from CPU memory per step: offloaded shards twice a micro-batch; a streamed encoder
  // once a micro-batch unless the caches hold its outputs; updated weights after an offloaded step.
  {
    const int64_t c = compute_bytes(o.precision);
    const int64_t micro = std::max<int64_t>(o.accumulation, 1);
    const int64_t streamed = o.frozen_off_device ? 0 : streamed_bytes(model, o);
    const int64_t updated = o.offload_optimizer != Offload::none ? c * tally.owned_total : 0;
    e.host_to_device_per_step = micro * (2 * tally.offloaded_shards + streamed) + updated;
  }
  e.deepspeed = deepspeed_estimator(model, o);
  return e;
}

DeepSpeedFigures deepspeed_estimator(const ModelShape& model, const EstimateOptions& o) {
  // DeepSpeed's estimate_zero2_model_states_mem_needs (runtime/zero/stage_1_and_2.py) and
  // estimate_zero3_model_states_mem_needs (runtime/zero/stage3.py), term by term and in their
  // order of evaluation, so the truncation to whole bytes agrees; tst_estimate checks every case
  // of tests/fixtures/deepspeed_estimator.json, written by DeepSpeed itself.
  DeepSpeedFigures d;
  // DeepSpeed's total is what the optimizer trains: the roster's trained units (the denoiser's,
  // and the text encoders' when they train in full), its largest layer the largest among them.
  for (const auto& u : planned_units(model, o))
    if (!u.frozen) d.total_parameters += u.parameters;
  d.largest_layer_parameters = model.largest_module();
  if (o.text_training == models::TextEncoderTraining::full)
    for (const auto& t : model.text_encoders) d.largest_layer_parameters = std::max(d.largest_layer_parameters, t.largest_module);
  const double total = static_cast<double>(d.total_parameters), abf = 1.5;
  const double total_gpus = std::max(o.world_size, 1), per_node = std::max(o.processes_per_machine, 1);
  const double nodes = std::max(1.0, std::floor(total_gpus / per_node));
  const bool cpu_offload = o.offload_optimizer != Offload::none;  // DeepSpeed's estimator knows cpu only
  auto bytes = [](double v) { return static_cast<int64_t>(v); };
  if (o.stage == 2) {
    d.available = true;
    if (cpu_offload) {
      d.gpu = bytes(2 * total);
      d.cpu = bytes(total * std::max(4 * total_gpus, 16.0) * abf);
    } else {
      d.gpu = bytes(2 * total + std::floor(18 * total / total_gpus));
      d.cpu = bytes(total * 4 * per_node * abf);
    }
  } else if (o.stage == 3) {
    d.available = true;
    const double largest = static_cast<double>(d.largest_layer_parameters), largest_memory = 4 * largest;
    const double gpus_factor = 1 / nodes;
    const bool zero_init = o.zero3_init;
    if (cpu_offload && o.offload_param != Offload::none) {
      d.gpu = bytes(largest_memory);
      d.cpu = bytes(zero_init ? total * 18 * gpus_factor * abf : total * std::max(4 * per_node, 18 * gpus_factor) * abf);
    } else if (cpu_offload) {
      d.gpu = bytes(largest_memory + std::floor(2 * total / total_gpus));
      d.cpu = bytes(zero_init ? total * 16 * gpus_factor * abf : total * std::max(4 * per_node, 16 * gpus_factor) * abf);
    } else {
      d.gpu = bytes(largest_memory + std::floor(18 * total / total_gpus));
      d.cpu = bytes(zero_init ? largest * 4 * per_node * abf : total * 4 * per_node * abf);
    }
  }
  return d;
}

Suggestion lowest_fitting(const ModelShape& model, EstimateOptions o) {
  struct Step {
    int stage;
    Offload optimizer, param;
  };
  const Step ladder[] = {{0, Offload::none, Offload::none}, {1, Offload::none, Offload::none},
                         {2, Offload::none, Offload::none}, {2, Offload::cpu, Offload::none},
                         {3, Offload::none, Offload::none}, {3, Offload::cpu, Offload::none},
                         {3, Offload::cpu, Offload::cpu},   {3, Offload::nvme, Offload::cpu},
                         {3, Offload::nvme, Offload::nvme}};
  const int64_t budget = o.gpu_memory;
  o.gpu_memory = 0;  // no recursion
  for (const auto& s : ladder) {
    o.stage = s.stage;
    o.offload_optimizer = s.optimizer;
    o.offload_param = s.param;
    if (estimate_memory(model, o).gpu.total() <= budget) return {true, s.stage, s.optimizer, s.param};
  }
  return {};
}

int64_t zero_paper_bytes(int64_t psi, int world_size, int stage) {
  const int64_t n = world_size;
  switch (stage) {
    case 0: return 16 * psi;
    case 1: return 4 * psi + 12 * psi / n;
    case 2: return 2 * psi + 14 * psi / n;
    default: return 16 * psi / n;
  }
}

EstimateOptions options_from_config(const config::TrainerConfig& cfg) {
  EstimateOptions o;
  const models::TrainedParts trained = models::resolve_trained_parts(cfg);
  o.lora = trained.lora;
  o.text_training = trained.text;
  o.world_size = static_cast<int>(cfg.launch.num_processes);
  o.processes_per_machine = static_cast<int>(std::max<int64_t>(cfg.launch.num_processes / std::max<int64_t>(cfg.launch.num_machines, 1), 1));
  // The ZeRO settings as the trainer builds them (config::zero_options): one reading of the config.
  const zero::ZeroOptions zo = config::zero_options(cfg);
  o.stage = zo.stage;
  o.offload_optimizer = zo.offload_optimizer;
  o.offload_param = zo.offload_param;
  o.overlap_comm = zo.overlap_comm;
  o.persistence_threshold = zo.persistence_threshold;
  o.prefetch_bucket_size = zo.prefetch_bucket_size;
  o.reduce_bucket_size = zo.reduce_bucket_size;
  o.allgather_bucket_size = zo.allgather_bucket_size;
  o.sub_group_size = zo.sub_group_size;
  o.buffer_count = zo.buffer_count;
  // The trainer's build step decides the same way; a quantized base loads its own way instead
  // (estimate_memory), which the fastest-setting search may switch on or off.
  o.zero3_init = config::zero3_init_applies(cfg);
  o.base_format = trained.lora ? quant::base_format_from_string(cfg.model.base_precision) : quant::BaseFormat::bf16;
  // (a LoRA base from files is quantized as it is read whenever it is quantized: the fastest-setting
  // search may choose a format the config does not have yet)
  o.quantize_while_loading = trained.lora && !cfg.model.path.empty();
  o.text_format = quant::base_format_from_string(cfg.model.text_encoder_precision);
  o.precision = cfg.precision;
  o.batch_size = cfg.training.batch_size;
  o.resolution = cfg.data.resolution;
  o.gradient_checkpointing = cfg.training.gradient_checkpointing;
  o.cpu_checkpointing = cfg.training.cpu_checkpointing;
  o.attention.mode = models::parse_attention_mode(cfg.training.attention);
  o.ema = cfg.ema.enabled;
  // The cache settings decide, with model.path or without (a preset stands for the folder a
  // ready config will name): a trained text encoder is never cached, so the frozen parts stay
  // on the device then. estimate_memory applies it to latent models only (the caches hold VAE
  // latents; a pixel-space model has none).
  o.optimizer = cfg.optimizer.type;
  o.adafactor_beta1 = cfg.optimizer.adafactor.beta1.has_value();
  o.master_weights = cfg.optimizer.master_weights != "none";
  o.fused_backward = cfg.optimizer.fused_backward;
  o.delayed_update = cfg.zero.offload_optimizer.delayed_update && cfg.zero.offload_optimizer.device == "cpu";
  o.accumulation = cfg.training.gradient_accumulation_steps;
  o.frozen_off_device = cfg.data.cache_latents && cfg.data.cache_text_embeddings && !trained.text_trained();
  return o;
}

int64_t parse_bytes(const std::string& text) {
  std::string t;
  for (char ch : text)
    if (!std::isspace(static_cast<unsigned char>(ch))) t += static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  std::size_t used = 0;
  double value = 0;
  try {
    value = std::stod(t, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  const std::string unit = t.substr(used);
  double scale = 0;
  if (unit.empty() || unit == "b") scale = 1;
  else if (unit == "k" || unit == "kib") scale = 1024.0;
  else if (unit == "kb") scale = 1e3;
  else if (unit == "m" || unit == "mib") scale = 1024.0 * 1024;
  else if (unit == "mb") scale = 1e6;
  else if (unit == "g" || unit == "gib") scale = 1024.0 * 1024 * 1024;
  else if (unit == "gb") scale = 1e9;
  else if (unit == "t" || unit == "tib") scale = 1024.0 * 1024 * 1024 * 1024;
  else if (unit == "tb") scale = 1e12;
  if (used == 0 || scale == 0 || value < 0)
    throw Error(ErrorKind::config, "\"" + text + "\" is not a memory size: write e.g. 24GiB, 24GB, 16G or 25769803776");
  return static_cast<int64_t>(std::llround(value * scale));
}

namespace {
nlohmann::json breakdown_json(const MemoryBreakdown& b) {
  return {{"parameters", b.parameters}, {"gradients", b.gradients}, {"optimizer_states", b.optimizer_states},
          {"activations", b.activations}, {"buffers", b.buffers}, {"total", b.total()}};
}
}  // namespace

nlohmann::json to_json(const MemoryEstimate& e) {
  nlohmann::json j;
  j["parameters"] = e.parameters;
  j["adapter_parameters"] = e.adapter_parameters;
  j["frozen_base_parameters"] = e.frozen_base_parameters;
  j["text_encoders"] = models::to_string(e.options.text_training);
  j["frozen_parameters"] = e.frozen_parameters;
  j["frozen_fp32_parameters"] = e.frozen_fp32_parameters;
  j["world_size"] = e.options.world_size;
  j["stage"] = e.options.stage;
  j["precision"] = e.options.precision;
  j["offload_optimizer"] = offload_name(e.options.offload_optimizer);
  j["offload_param"] = offload_name(e.options.offload_param);
  j["gpu"] = breakdown_json(e.gpu);
  j["cpu"] = breakdown_json(e.cpu);
  j["nvme"] = {{"total", e.nvme}};
  j["cpu_load_peak"] = e.cpu_load_peak;
  j["frozen_base_bytes"] = e.frozen_base_bytes;
  j["host_to_device_per_step"] = e.host_to_device_per_step;
  j["base_precision"] = quant::to_string(e.options.base_format);
  j["text_encoder_precision"] = quant::to_string(e.options.text_format);
  j["cache_pass"] = e.cache_pass;
  j["cache_pass_host"] = e.cache_pass_host;
  j["gpu_memory"] = e.options.gpu_memory;
  j["fits"] = e.fits;
  j["cpu_fits"] = e.cpu_fits;
  if (e.suggestion.found)
    j["suggestion"] = {{"stage", e.suggestion.stage},
                       {"offload_optimizer", offload_name(e.suggestion.offload_optimizer)},
                       {"offload_param", offload_name(e.suggestion.offload_param)}};
  else
    j["suggestion"] = nullptr;
  if (e.deepspeed.available)
    j["deepspeed_estimator"] = {{"gpu", e.deepspeed.gpu},
                                {"cpu_per_machine", e.deepspeed.cpu >= 0 ? nlohmann::json(e.deepspeed.cpu) : nlohmann::json()},
                                {"total_parameters", e.deepspeed.total_parameters},
                                {"largest_layer_parameters", e.deepspeed.largest_layer_parameters}};
  return j;
}

std::string to_table(const MemoryEstimate& e, const ModelShape& model) {
  std::ostringstream out;
  const auto& o = e.options;
  char line[160];
  out << "Model " << model.name << ": " << e.parameters << " trainable parameters";
  if (e.adapter_parameters > 0)
    out << " (" << e.adapter_parameters << " in LoRA adapters"
        << (e.frozen_base_parameters > 0 ? ", on a frozen base of " + std::to_string(e.frozen_base_parameters) +
                                               (o.stage == 3 ? " partitioned like trained units" : "")
                                         : std::string())
        << ")";
  if (e.options.text_training != models::TextEncoderTraining::frozen)
    out << "; text encoders: " << models::to_string(e.options.text_training);
  if (e.frozen_parameters > 0)
    out << " (+" << e.frozen_parameters << " frozen: VAE and text encoders, "
        << (e.cache_pass > 0 ? "off the device: both caches on" : "on the device") << ")";
  out << "\nZeRO stage " << o.stage << ", " << o.world_size << " process(es), " << o.precision
      << ", optimizer offload " << offload_name(o.offload_optimizer) << ", parameter offload "
      << offload_name(o.offload_param) << "\nBatch " << o.batch_size << " at " << o.resolution << " px"
      << (o.gradient_checkpointing ? (o.cpu_checkpointing ? ", gradient checkpointing (inputs in CPU memory)"
                                                            : ", gradient checkpointing")
                                   : "")
      << ", attention "
      << (o.attention.mode == models::AttentionMode::plain     ? "plain"
          : o.attention.mode == models::AttentionMode::blocked ? "blocked"
                                                               : "auto (blocked from 1024 tokens)")
      << "\n\nPer process:\n";
  std::snprintf(line, sizeof line, "  %-18s %14s %14s\n", "", "device", "cpu");
  out << line;
  const std::pair<const char*, std::pair<int64_t, int64_t>> rows[] = {
      {"parameters", {e.gpu.parameters, e.cpu.parameters}},
      {"gradients", {e.gpu.gradients, e.cpu.gradients}},
      {"optimizer states", {e.gpu.optimizer_states, e.cpu.optimizer_states}},
      {"activations", {e.gpu.activations, e.cpu.activations}},
      {"buffers", {e.gpu.buffers, e.cpu.buffers}},
      {"total", {e.gpu.total(), e.cpu.total()}}};
  for (const auto& [name, v] : rows) {
    std::snprintf(line, sizeof line, "  %-18s %14s %14s\n", name, format_bytes(v.first).c_str(),
                  format_bytes(v.second).c_str());
    out << line;
  }
  if (e.nvme > 0) out << "  nvme files         " << format_bytes(e.nvme) << "\n";
  out << "  cpu while loading  " << format_bytes(e.cpu_load_peak)
      << (o.quantize_while_loading && o.base_format != quant::BaseFormat::bf16
              ? std::string(" (the base quantized unit by unit as it is read)")
          : o.stage == 3 ? (o.zero3_init ? " (zero3_init_flag: built into shards)" : " (zero3_init_flag would build it into shards)")
                         : "")
      << "\n";
  if (o.base_format != quant::BaseFormat::bf16 || o.text_format != quant::BaseFormat::bf16)
    out << "  frozen base        " << format_bytes(e.frozen_base_bytes) << " (" << quant::to_string(o.base_format)
        << "; text encoders " << quant::to_string(o.text_format) << ")\n";
  if (e.host_to_device_per_step > 0)
    out << "  host->device/step  " << format_bytes(e.host_to_device_per_step) << "\n";
  if (e.cache_pass > 0)
    out << "\nThe caches are assumed complete. Filling them (`zerostudio cache`) is a pass of its own: "
        << format_bytes(e.cache_pass) << " on the device (frozen weights, one image at a time) and "
        << format_bytes(e.cache_pass_host) << " of host memory (the frozen parts, the text encoder streamed from there)\n";
  if (e.deepspeed.available) {
    out << "\nDeepSpeed's estimator for this setup (model states only): GPU " << format_bytes(e.deepspeed.gpu);
    if (e.deepspeed.cpu >= 0) out << ", CPU " << format_bytes(e.deepspeed.cpu) << " per machine";
    out << "\n";
  }
  if (o.gpu_memory > 0) {
    out << "\nDevice memory " << format_bytes(o.gpu_memory) << ": " << (e.fits ? "fits" : "does NOT fit") << "\n";
    if (e.suggestion.found)
      out << "Lowest setting that fits: stage " << e.suggestion.stage << ", optimizer offload "
          << offload_name(e.suggestion.offload_optimizer) << ", parameter offload "
          << offload_name(e.suggestion.offload_param) << "\n";
    else
      out << "No stage or offload fits: lower the batch size or resolution, or turn on gradient checkpointing\n";
  }
  if (o.cpu_memory > 0 && !e.cpu_fits)
    out << "CPU memory " << format_bytes(o.cpu_memory) << " is not enough for " << o.processes_per_machine
        << " process(es) on this machine\n";
  return out.str();
}

}  // namespace zs::estimate
