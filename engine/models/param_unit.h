#pragma once
// Parameter units: the groups of parameters that ZeRO shards and gathers one at a time.

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>

namespace zs::models {

/// One unit: a resnet, a transformer, a sampler, or the model's small in/out layers together.
struct ParamUnit {
  std::string name;                                            ///< e.g. "down_blocks.0.resnets.0" or "io"
  std::vector<std::pair<std::string, at::Tensor>> parameters;  ///< full parameter names, in module order
  /// Number of elements over all parameters.
  std::int64_t numel() const;
};

/// Called with a unit's index (into the model's units()) just before that unit's forward runs.
using UnitHook = std::function<void(std::size_t unit)>;

}  // namespace zs::models
