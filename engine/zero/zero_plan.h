#pragma once
// What zero.stage and the offload settings mean, decided in one place: a pure plan computed from
// the options and the units' sizes. ZeroOptimizer lays out, reduces and steps each unit as its
// plan says, ShardedInit builds exactly the plan's sharded units into shards, and the memory
// estimator counts the same layout. No LibTorch here: the estimator runs it for models that are
// never built.
//
//   stage 0   every rank keeps and updates everything; gradients are all-reduced.
//   stage 1   each rank updates its shard (optimizer state 1/N): gradients are reduce-scattered
//             into the owned part of the (full) gradient buffer, the units' updated shards
//             all-gathered after the step (together what stage 0's all-reduce moves).
//   stage 2   gradients too: each unit's are reduce-scattered by its backward hook and only the
//             rank's part is kept.
//   stage 3   parameters too: units are gathered for their forward and backward and kept as the
//             rank's shard in between (the persistent ones stay whole, as at stage 2).
//   N = 1     nothing to shard: stages 1 and 2 run as stage 0 does unless something is offloaded
//             (then the hooks still move each unit's gradients off the device during backward);
//             stage 3 keeps its gather/release cycle (and with parameter offload, its purpose).

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace zs::zero {

/// zero.stage3_param_persistence_threshold's default (DeepSpeed's): the schema's default is this
/// constant, so the config, the optimizer's options and the estimator cannot disagree.
inline constexpr std::int64_t kDefaultPersistenceThreshold = 100'000;

/// bitsandbytes Optimizer8bit's block size (optim/optimizer.py init_state): 8-bit AdamW quantizes
/// its moments in blocks of this many elements, and its plan cuts shards on them.
inline constexpr std::int64_t kQuantBlock = 256;
/// Tensors with fewer elements keep 32-bit states (Optimizer8bit's min_8bit_size).
inline constexpr std::int64_t kMin8bitSize = 4096;

/// Where offloaded data lives.
enum class Offload { none, cpu, nvme };

/// What a plan depends on.
struct PlanOptions {
  int stage = 0;                              ///< 0-3
  int world_size = 1;                         ///< ranks
  int rank = 0;                               ///< this rank: which part it owns
  Offload offload_optimizer = Offload::none;  ///< masters, moments and the reduced gradients
  Offload offload_param = Offload::none;      ///< stage 3: the parameter shards
  std::int64_t persistence_threshold = kDefaultPersistenceThreshold;  ///< stage 3: units with fewer elements stay whole
  std::vector<std::string> persistent_units = {"io", "text_encoder"};  ///< stage 3: always whole
  /// Reduce each unit's gradients as soon as its backward is done. Unset: on at every stage (on the
  /// large model at N = 2 it took stage 0 from 1275 to 734 ms per step; DeepSpeed turns it on for
  /// stage 3 only).
  std::optional<bool> overlap_comm;
  /// Every shard a multiple of this many elements (8-bit AdamW: its quantization block, so blocks
  /// count from each unit's start whatever the world size and stage).
  std::int64_t shard_multiple = 1;
  /// optimizer.fused_backward: each unit is stepped from its backward hook, so stage 2 takes its
  /// gradients there even with one rank and nothing offloaded (they go right after its step).
  bool fused_backward = false;
};

/// One unit's layout and treatment.
struct UnitPlan {
  std::string name;
  std::int64_t numel = 0;         ///< real elements
  std::int64_t padded = 0;        ///< numel rounded up to a multiple of world size × shard_multiple
  std::int64_t shard = 0;         ///< padded / world size
  std::int64_t owned = 0;         ///< elements this rank updates (padded when replicated, else shard)
  std::int64_t owned_offset = 0;  ///< where they start in the unit's flat buffer
  bool sharded = false;           ///< parameters kept as the rank's shard between gathers
  bool hook_grads = false;        ///< gradients taken, reduced and freed by the unit's backward hook
  bool reduce_scatter = false;    ///< reduced by reduce-scatter into the owned part (else all-reduce)
  bool partitioned_grads = false; ///< only the owned part of the reduced gradients is kept; the full
                                  ///< buffer goes after each reduction (stages 2-3)
  bool reduced_copy = false;      ///< the owned part of the reduced gradients is kept apart (shard_grad)
  bool gather_after_step = false; ///< kept whole but updated in shards: all-gathered after the step
};

struct Plan {
  PlanOptions options;
  bool overlap_comm = true;   ///< overlap_comm resolved
  bool replicated = true;     ///< every rank owns every element (stage 0, or one rank)
  std::vector<UnitPlan> units;

  /// Units whose parameters are sharded.
  std::size_t sharded_units() const;
  /// Whether any unit is reduced by reduce-scatter.
  bool any_reduce_scatter() const;
};

/// Whether a unit named `name` with `numel` elements keeps only shards of its parameters under
/// `o` (ShardedInit asks this while the model is being built).
bool shards_parameters(const PlanOptions& o, const std::string& name, std::int64_t numel);

/// A unit of `numel` elements padded as the plan pads it (a multiple of world size × shard_multiple).
std::int64_t padded_numel(const PlanOptions& o, std::int64_t numel);

/// The plan for units given as (name, elements) in the model's order. Throws zs::Error(config)
/// for a stage that does not exist or parameter offload below stage 3.
Plan make_plan(const PlanOptions& o, const std::vector<std::pair<std::string, std::int64_t>>& units);

const char* offload_name(Offload o);
/// "cpu", "nvme"; anything else is none.
Offload offload_from_name(const std::string& name);

}  // namespace zs::zero
