#include "models/param_unit.h"

#include <algorithm>

#include <torch/nn/module.h>

namespace zs::models {

std::int64_t ParamUnit::numel() const {
  std::int64_t n = 0;
  for (const auto& [name, t] : parameters) n += t.numel();
  return n;
}

bool ParamUnit::has_raw() const { return std::find(raw.begin(), raw.end(), true) != raw.end(); }

std::vector<ParamUnit> units_by_prefix(const torch::nn::Module& module, const std::vector<std::string>& names) {
  std::vector<ParamUnit> out(names.size());
  for (std::size_t i = 0; i < names.size(); ++i) out[i].name = names[i];
  for (const auto& item : module.named_parameters(true)) {
    const std::string& key = item.key();
    std::size_t unit = 0;
    for (std::size_t i = 1; i < names.size(); ++i)
      if (key.size() > names[i].size() && key.compare(0, names[i].size(), names[i]) == 0 && key[names[i].size()] == '.') {
        unit = i;
        break;
      }
    out[unit].parameters.emplace_back(key, item.value());
  }
  return out;
}

}  // namespace zs::models
