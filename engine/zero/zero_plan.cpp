#include "zero/zero_plan.h"

#include <algorithm>

#include "core/error.h"

namespace zs::zero {

std::size_t Plan::sharded_units() const {
  return static_cast<std::size_t>(std::count_if(units.begin(), units.end(), [](const UnitPlan& u) { return u.sharded; }));
}

bool Plan::any_reduce_scatter() const {
  return std::any_of(units.begin(), units.end(), [](const UnitPlan& u) { return u.reduce_scatter; });
}

namespace {

/// Units kept whole at stages 2-3 (their gradients too): the named ones (io runs at both ends of
/// the forward) and those below the persistence threshold.
bool persistent(const PlanOptions& o, const std::string& name, std::int64_t numel) {
  return std::find(o.persistent_units.begin(), o.persistent_units.end(), name) != o.persistent_units.end() ||
         numel < o.persistence_threshold;
}

}  // namespace

bool shards_parameters(const PlanOptions& o, const std::string& name, std::int64_t numel) {
  return o.stage == 3 && !persistent(o, name, numel);
}

std::int64_t padded_numel(const PlanOptions& o, std::int64_t numel) {
  const std::int64_t multiple = std::max(o.world_size, 1) * std::max<std::int64_t>(o.shard_multiple, 1);
  return (numel + multiple - 1) / multiple * multiple;
}

Plan make_plan(const PlanOptions& o, const std::vector<std::pair<std::string, std::int64_t>>& units) {
  if (o.stage < 0 || o.stage > 3)
    throw Error(ErrorKind::config, "zero.stage " + std::to_string(o.stage) + " does not exist (0-3)");
  if (o.offload_param != Offload::none && o.stage != 3)
    throw Error(ErrorKind::config, "zero.offload_param needs zero.stage 3 (parameters are sharded only there)");
  Plan p;
  p.options = o;
  p.options.world_size = std::max(o.world_size, 1);
  const std::int64_t world = p.options.world_size;
  p.overlap_comm = o.overlap_comm.value_or(true);
  p.replicated = o.stage == 0 || world == 1;
  const bool offloaded = o.offload_optimizer != Offload::none;
  for (const auto& [name, numel] : units) {
    UnitPlan u;
    u.name = name;
    u.numel = numel;
    u.padded = padded_numel(p.options, numel);
    u.shard = u.padded / world;
    u.owned = p.replicated ? u.padded : u.shard;
    u.owned_offset = p.replicated ? 0 : o.rank * u.shard;
    u.sharded = shards_parameters(o, name, numel);
    // From stage 2 on the gradients are reduce-scattered (the persistent units' after backward,
    // the others' by their hooks, which then free them). Stage 2 with one rank and nothing
    // offloaded has nothing to scatter and nowhere to move them: they stay as at stage 0.
    const bool scatter = o.stage >= 2 && !(o.stage == 2 && world == 1 && !offloaded && !o.fused_backward);
    u.hook_grads = u.sharded || (scatter && !persistent(o, name, numel));
    u.partitioned_grads = scatter;
    // Stage 1 needs only its part of the reduced gradients as well.
    u.reduce_scatter = scatter || (o.stage == 1 && world > 1);
    u.reduced_copy = scatter || offloaded;
    u.gather_after_step = !u.sharded && !p.replicated;
    p.units.push_back(std::move(u));
  }
  return p;
}

const char* offload_name(Offload o) {
  switch (o) {
    case Offload::cpu: return "cpu";
    case Offload::nvme: return "nvme";
    default: return "none";
  }
}

Offload offload_from_name(const std::string& name) {
  if (name == "cpu") return Offload::cpu;
  if (name == "nvme") return Offload::nvme;
  return Offload::none;
}

}  // namespace zs::zero
