#pragma once
// The straight-line reference of zero.offload_optimizer.delayed_update: a reference optimizer
// keeps stepping the parameters (its masters), and from the step after `warmup` each forward runs
// on the masters as they were before the last update — every update lands one step late. The
// ZeRO optimizer's delayed update (a host thread, swapped gradient buffers) is tested against it.

#include <cstdint>
#include <vector>

#include "zero/state_bytes.h"

namespace zs::zero {

class ReferenceDelay {
 public:
  /// `parameters` are the reference optimizer's (stepped in place by it).
  ReferenceDelay(NamedTensors parameters, std::int64_t warmup);
  /// Before the forward: the parameters hold the delayed weights (the masters put aside).
  void begin_forward();
  /// After backward: the masters back in the parameters (their gradients stay).
  void end_backward();
  /// Before the optimizer's step `step` (counting from 1): after the warm-up, the masters as they
  /// are now become the next forward's weights.
  void before_step(std::int64_t step);
  /// The weights the device holds after the step (what the EMA follows).
  NamedTensors held() const;

 private:
  NamedTensors params_;
  std::vector<at::Tensor> lagged_, masters_;
  std::int64_t warmup_;
};

}  // namespace zs::zero
