#pragma once
// What every family's denoiser module shares (the UNet, the Flux and Qwen-Image transformers and
// those to come): ZeRO's hooks around each of its units, and activation checkpointing of the units
// with the kept inputs on the device or in CPU memory. A family's module derives from it and runs
// each unit through run_unit(); TrainableModel reaches the settings through denoiser().

#include <cstddef>
#include <memory>
#include <vector>

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>

#include "models/activation_checkpoint.h"
#include "models/param_unit.h"

namespace zs::models {

class DenoiserModule : public torch::nn::Module {
 public:
  /// The parameter units in forward order, "io" first, parameters by their names in the module.
  virtual std::vector<ParamUnit> units() const = 0;
  /// Installs (or with nullptr removes) hooks that wrap each unit's input and output (ZeRO
  /// stage 3's gathers); unit 0 ("io") wraps the whole forward's input and output.
  void set_unit_hooks(std::shared_ptr<UnitHooks> hooks) { hooks_ = std::move(hooks); }
  /// Activation checkpointing: every unit keeps only its input in forward and runs again in
  /// backward (models/activation_checkpoint.h). The hooks stay outside the recomputed part, so
  /// ZeRO stage 3 gathers the unit again before the rerun.
  void set_gradient_checkpointing(bool on) { gradient_checkpointing_ = on; }
  bool gradient_checkpointing() const { return gradient_checkpointing_; }
  /// With gradient checkpointing: the kept unit inputs wait in CPU memory
  /// (`training.cpu_checkpointing`, DeepSpeed's cpu_checkpointing).
  void set_cpu_checkpointing(bool on) { cpu_checkpointing_ = on; }
  bool cpu_checkpointing() const { return cpu_checkpointing_; }

 protected:
  /// The forward's input through unit 0's hook, and its output back out.
  at::Tensor enter(const at::Tensor& input) const { return hooks_ ? hooks_->before(0, input) : input; }
  at::Tensor leave(const at::Tensor& output) const { return hooks_ ? hooks_->after(0, output) : output; }
  /// Unit `id` on `x` between its hooks, with `aux` (what it reads besides x: the timestep
  /// embedding; may be undefined). `fn` owns what it uses: with checkpointing it runs again
  /// during backward.
  at::Tensor run_unit(std::size_t id, at::Tensor x, const at::Tensor& aux, CheckpointedFn fn) const {
    if (hooks_) x = hooks_->before(id, x);
    const bool recompute = gradient_checkpointing_ && (x.requires_grad() || (aux.defined() && aux.requires_grad()));
    at::Tensor y = recompute ? checkpoint(std::move(fn), x, aux, cpu_checkpointing_) : fn(x, aux);
    return hooks_ ? hooks_->after(id, y) : y;
  }

 private:
  std::shared_ptr<UnitHooks> hooks_;
  bool gradient_checkpointing_ = false;
  bool cpu_checkpointing_ = false;
};

}  // namespace zs::models
