#include "zero/unit_optimizer.h"

namespace zs::zero {

void UnitOptimizer::full_state(const UnitView& u, const MomentRead& read, const Gather& gather, NamedTensors& out) const {
  const at::Tensor m = gather(read(Moment::first).contiguous()), v = gather(read(Moment::second).contiguous());
  for (std::size_t i = 0; i < u.params.size(); ++i) {
    const std::string& name = u.params[i].first;
    out.emplace_back("exp_avg." + name, m.narrow(0, u.offsets[i], u.sizes[i]).view(u.shapes[i]).clone());
    out.emplace_back("exp_avg_sq." + name, v.narrow(0, u.offsets[i], u.sizes[i]).view(u.shapes[i]).clone());
  }
}

void UnitOptimizer::load(const UnitView& u, const Read& read, const MomentWrite& write) {
  write(Moment::first, read("exp_avg", u.owned_offset, u.owned));
  write(Moment::second, read("exp_avg_sq", u.owned_offset, u.owned));
}

std::int64_t UnitOptimizer::checkpoint_bytes(const UnitView& u, bool, std::int64_t element_bytes) const {
  return static_cast<std::int64_t>(moments().size()) * u.owned * element_bytes;
}

}  // namespace zs::zero
