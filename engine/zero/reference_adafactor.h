#pragma once
// The reference Adafactor (issue 37's first piece): a straight-line, single-process implementation of
// transformers' Adafactor (src/transformers/optimization.py; Shazeer & Stern 2018), which the sharded
// and offloaded paths (zero/adafactor.h) are tested against, as ReferenceAdamW is for AdamW.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <c10/util/ArrayRef.h>

#include "zero/adafactor.h"
#include "zero/state_bytes.h"

namespace zs::zero {

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
