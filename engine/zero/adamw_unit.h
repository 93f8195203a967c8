#pragma once
// AdamW over one unit's owned elements (UnitOptimizer): two moments in the optimizer's precision,
// stepped by the fused CPU kernel (cpu_adam.h) where everything is float32 in CPU memory, else by
// the reference arithmetic (ReferenceAdamW's order). 8-bit AdamW's units below kMin8bitSize are
// this too. On NVMe the moments are streamed in sub-groups by ZeroOptimizer (undefined here).

#include <cstdint>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>

#include "zero/unit_optimizer.h"

namespace zs::zero {

/// AdamW's hyper-parameters apart from the step's learning rate and count.
struct AdamSettings {
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0.0;
};

/// The reference arithmetic, in ReferenceAdamW's order: p, m, v updated in place from g (p's dtype).
void adam_reference(at::Tensor p, at::Tensor m, at::Tensor v, const at::Tensor& g, const AdamSettings& o, double lr,
                    std::int64_t step);
/// AdamW on weights `w` [n] with moments m, v: the fused kernel when everything is float32 in CPU
/// memory (a bf16 `grad` in CPU memory read as it is; `out`, a bf16/fp16 CPU tensor, written in
/// the same pass), else the reference arithmetic on a float copy of the gradients. `out`, when
/// defined, receives the updated weights; every gradient × grad_scale first.
void adam_master(at::Tensor w, at::Tensor m, at::Tensor v, const at::Tensor& grad, const AdamSettings& o, double lr,
                 std::int64_t step, at::Tensor out, double grad_scale = 1.0);
/// out = w, converted where w lives and then copied over (a copy across devices that also
/// converts goes through a pageable temporary on one CPU thread: 2.7 s a step for SD 1.5).
void copy_converted(at::Tensor& out, const at::Tensor& w);

class AdamWUnit final : public UnitOptimizer {
 public:
  /// `owned` elements of moments in `opts`; `streamed` (AdamW on NVMe): none in memory, the
  /// moments live in files that ZeroOptimizer streams.
  AdamWUnit(std::int64_t owned, const AdamSettings& settings, const at::TensorOptions& opts, bool streamed);
  StateLayout layout(bool masters, std::int64_t element_bytes) const override;
  void step(const UnitStep& s) override;
  bool fused_kernel() const override { return true; }
  at::Tensor moment(Moment k) const override { return k == Moment::first ? exp_avg_ : exp_avg_sq_; }
  void set_moment(Moment k, const at::Tensor& values) override;
  std::vector<std::pair<const char*, at::Tensor*>> swappable() override;
  void pin() override;

 private:
  std::int64_t owned_;
  AdamSettings o_;
  at::Tensor exp_avg_, exp_avg_sq_;  // [owned]
};

}  // namespace zs::zero
