#pragma once
// The reference AdamW: a straight-line, single-process implementation of the arithmetic every
// ZeRO path (sharded, offloaded, fused CPU kernel) is tested against. Not used for training.

#include <cstdint>
#include <functional>
#include <string>

#include "zero/state_bytes.h"

namespace zs::zero {

/// AdamW with decoupled weight decay (Loshchilov & Hutter), bias-corrected, state in the
/// parameters' dtype, updating `parameters` in place from their .grad().
class ReferenceAdamW {
 public:
  ReferenceAdamW(NamedTensors parameters, double beta1, double beta2, double eps, double weight_decay);
  /// Zeroes every defined gradient.
  void zero_grad();
  /// Global L2 norm of the gradients; scales them to `max_norm` when above it (<= 0: no clipping).
  double clip_grad_norm(double max_norm);
  /// One update with learning rate `lr` (× the parameter's scale).
  void step(double lr);
  /// Parameters whose name starts with `prefix` update with `scale` × the step's learning rate
  /// (a parameter group with its own lr, as ParamUnit::lr_scale).
  void set_lr_scale(const std::string& prefix, double scale);
  /// exp_avg.<name>, exp_avg_sq.<name> for every parameter, and step.
  NamedTensors state() const;
  /// Restores state(); `get(name)` returns the stored tensor or throws. Throws zs::Error(checkpoint)
  /// naming a tensor whose shape differs.
  void load_state(const std::function<at::Tensor(const std::string&)>& get);
  ModelStateBytes model_state() const;
  std::int64_t steps() const { return step_; }

 private:
  NamedTensors params_;
  std::vector<at::Tensor> exp_avg_, exp_avg_sq_;
  std::vector<double> lr_scale_;
  double beta1_, beta2_, eps_, weight_decay_;
  std::int64_t step_ = 0;
};

}  // namespace zs::zero
