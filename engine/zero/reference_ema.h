#pragma once
// The reference EMA: every parameter averaged whole, in fp32 CPU memory. The ZeRO optimizer's
// sharded EMA (each rank averages its own part) is tested against it.

#include "zero/state_bytes.h"

namespace zs::zero {

class ReferenceEma {
 public:
  /// Copies `parameters` to the CPU as the starting average.
  ReferenceEma(const NamedTensors& parameters, double decay);
  /// ema = decay·ema + (1−decay)·param, for every parameter (same order as at construction).
  void update(const NamedTensors& parameters);
  /// Swaps the averaged values into `parameters` and the live values into the EMA (call twice to undo).
  void swap_into(NamedTensors& parameters);
  const NamedTensors& tensors() const { return shadow_; }

 private:
  NamedTensors shadow_;
  double decay_;
};

}  // namespace zs::zero
