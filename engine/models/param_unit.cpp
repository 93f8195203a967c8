#include "models/param_unit.h"

#include <algorithm>

namespace zs::models {

std::int64_t ParamUnit::numel() const {
  std::int64_t n = 0;
  for (const auto& [name, t] : parameters) n += t.numel();
  return n;
}

bool ParamUnit::has_raw() const { return std::find(raw.begin(), raw.end(), true) != raw.end(); }

}  // namespace zs::models
