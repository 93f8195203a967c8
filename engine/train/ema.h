#pragma once
// Exponential moving average of the trained weights, kept in CPU memory.

#include <cstdint>
#include <string>

#include "train/optimizer.h"

namespace zs::train {

class Ema {
 public:
  /// Copies `parameters` to the CPU as the starting average.
  Ema(const NamedTensors& parameters, double decay);
  /// ema = decay·ema + (1−decay)·param, for every parameter.
  void update(const NamedTensors& parameters);
  /// Swaps the averaged values into `parameters` and the live values into the EMA (call twice to undo).
  void swap_into(NamedTensors& parameters);
  const NamedTensors& tensors() const { return shadow_; }
  /// Restores averages from a checkpoint; `get(name)` returns the stored tensor.
  void load(const std::function<at::Tensor(const std::string&)>& get);

 private:
  NamedTensors shadow_;
  double decay_;
};

}  // namespace zs::train
