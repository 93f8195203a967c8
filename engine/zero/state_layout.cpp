#include "zero/state_layout.h"

namespace zs::zero {

std::int64_t StateLayout::bytes() const {
  std::int64_t n = 0;
  for (const StatePart& p : parts) n += p.bytes();
  return n;
}

std::int64_t StateLayout::resident_bytes() const {
  std::int64_t n = 0;
  for (const StatePart& p : parts)
    if (!p.swapped) n += p.bytes();
  return n;
}

namespace {

StateLayout with_masters(std::int64_t owned, bool masters, std::int64_t element_bytes) {
  StateLayout l;
  if (masters) l.parts.push_back({"master", owned, element_bytes, true});
  return l;
}

}  // namespace

StateLayout adamw_state_layout(std::int64_t owned, bool masters, std::int64_t element_bytes) {
  StateLayout l = with_masters(owned, masters, element_bytes);
  l.parts.push_back({"exp_avg", owned, element_bytes, true});
  l.parts.push_back({"exp_avg_sq", owned, element_bytes, true});
  return l;
}

StateLayout adamw8bit_state_layout(std::int64_t numel, std::int64_t owned, bool masters, std::int64_t element_bytes) {
  if (!uses_8bit_state(OptimizerType::adamw8bit, numel)) return adamw_state_layout(owned, masters, element_bytes);
  StateLayout l = with_masters(owned, masters, element_bytes);
  l.parts.push_back({"exp_avg", owned, 1, true});
  l.parts.push_back({"exp_avg_sq", owned, 1, true});
  l.parts.push_back({"exp_avg.absmax", owned / kQuantBlock, 4, true});
  l.parts.push_back({"exp_avg_sq.absmax", owned / kQuantBlock, 4, true});
  return l;
}

StateLayout adafactor_state_layout(std::int64_t owned, std::int64_t statistics_numel, bool beta1, bool masters,
                                   std::int64_t element_bytes) {
  StateLayout l = with_masters(owned, masters, element_bytes);
  if (beta1) l.parts.push_back({"exp_avg", owned, element_bytes, true});
  l.parts.push_back({"statistics", statistics_numel, element_bytes, false});
  return l;
}

StateLayout state_layout(const LayoutRequest& r) {
  switch (r.optimizer) {
    case OptimizerType::adamw8bit: return adamw8bit_state_layout(r.numel, r.owned, r.masters, r.element_bytes);
    case OptimizerType::adafactor:
      return adafactor_state_layout(r.owned, r.statistics_numel, r.adafactor_beta1, r.masters, r.element_bytes);
    default: return adamw_state_layout(r.owned, r.masters, r.element_bytes);
  }
}

}  // namespace zs::zero
