#pragma once
// The reference Adafactor (issue 37's first piece): a straight-line, single-process implementation of
// transformers' Adafactor (src/transformers/optimization.py; Shazeer & Stern 2018), which the sharded
// and offloaded paths will be tested against, as ReferenceAdamW is for AdamW. Not used for training yet.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <c10/util/ArrayRef.h>

#include "zero/state_bytes.h"

namespace zs::zero {

/// transformers' Adafactor arguments. The defaults are what kohya's sd-scripts (docs/train_network:
/// `--optimizer_args "relative_step=False" "scale_parameter=False" "warmup_init=False"`) and OneTrainer
/// (modules/util/optimizer_util.py's Adafactor defaults) use to fine-tune diffusion models with an
/// explicit learning rate; transformers' own defaults turn relative_step and scale_parameter on.
struct AdafactorOptions {
  std::optional<double> beta1;        ///< first-moment decay; none: no first moment (transformers' default)
  double decay_rate = -0.8;           ///< β₂ₜ = 1 − step^decay_rate
  double eps1 = 1e-30;                ///< added to the squared gradient
  double eps2 = 1e-3;                 ///< floor of the parameter scale (scale_parameter)
  double clip_threshold = 1.0;        ///< the update is scaled down to RMS ≤ this
  double weight_decay = 0.0;          ///< decoupled, × the step's lr
  bool scale_parameter = false;       ///< lr × max(eps2, RMS(p))
  bool relative_step = false;         ///< lr = min(1e-2, 1/√step) (no lr given)
  bool warmup_init = false;           ///< with relative_step: min(1e-6·step, 1/√step)
};

class ReferenceAdafactor {
 public:
  /// Throws zs::Error(config) for the combinations transformers refuses (warmup_init without
  /// relative_step).
  ReferenceAdafactor(NamedTensors parameters, AdafactorOptions options);
  /// One update from the parameters' .grad(): `lr` is required unless relative_step, refused with it.
  void step(std::optional<double> lr);
  /// Per parameter, as transformers names them: exp_avg.<name> (with beta1), exp_avg_sq_row.<name>
  /// and exp_avg_sq_col.<name> (two or more dimensions: factored over the last two), exp_avg_sq.<name>
  /// (one dimension).
  NamedTensors state() const;
  std::int64_t steps() const { return step_; }
  /// Optimizer-state elements for a tensor of `shape`: a [O, I] matrix keeps O + I, a [O, I, 3, 3]
  /// convolution 2·O·I·3 (its last two dimensions are the 3 × 3 kernel), a vector its length; plus the
  /// tensor's size with a first moment.
  static std::int64_t state_elements(c10::IntArrayRef shape, bool first_moment);

 private:
  struct Slot {
    at::Tensor exp_avg, row, col, sq;
  };
  NamedTensors params_;
  std::vector<Slot> slots_;
  AdafactorOptions o_;
  std::int64_t step_ = 0;
};

}  // namespace zs::zero
