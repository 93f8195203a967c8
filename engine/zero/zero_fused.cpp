// ZeroOptimizer's fused backward step (optimizer.fused_backward): each unit steps as soon as its
// reduced gradients are final, from the backward hook of the unit before it in the forward, and
// its gradient memory goes at once; clipping scales by the previous step's global norm.
#include <algorithm>
#include <array>
#include <cmath>
#include <utility>

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include "core/copy_stream.h"
#include "core/error.h"
#include "zero/zero_unit.h"

namespace zs::zero {

void ZeroOptimizer::step_fused(double lr) {
  // The units the hooks did not step (io, the text encoder, units without a hook) step now, with
  // the same scale; this step's norm becomes the next step's clipping norm.
  clip_grad_norm(fused_clip_);
  fused_lr_ = lr;
  for (auto& u : units_) fused_step_unit(*u);
  previous_norm_ = current_norm_;
  fused_ready_ = false;
  copies_->join();
  gather_whole_units(plan_.overlap_comm);
  grads_reduced_ = false;
}

void ZeroOptimizer::prepare_fused_step(double lr, double max_norm) {
  if (!o_.fused_backward) return;
  fused_lr_ = lr;
  fused_clip_ = max_norm;
  fused_norm_sq_ = 0;
  fused_ready_ = true;
  norm_known_ = false;
}

void ZeroOptimizer::fused_step_unit(Unit& u) {
  if (u.stepped) return;
  if (!fused_ready_)
    throw Error(ErrorKind::config, "optimizer.fused_backward: prepare_fused_step must come before the step's backward");
  c10::NoGradGuard no_grad;
  if (!fused_begun_) {
    ++step_;
    fused_begun_ = true;
  }
  if (u.plan.hook_grads && !u.shard_grad.defined()) u.shard_grad = host_scratch(u.plan.owned, shard_grad_opts_).zero_();
  fused_norm_sq_ += grad_square_sum(u).item<double>();
  at::Tensor g = step_grad(u);
  // The global norm is known only once every unit has stepped: clipping scales by the last one's.
  if (fused_clip_ > 0 && previous_norm_ > fused_clip_) g.mul_(fused_clip_ / (previous_norm_ + 1e-6));
  step_in_memory(u, fused_lr_);
  u.stepped = true;
  if (u.plan.hook_grads) {  // its gradient memory goes now (in CPU memory: to the next unit)
    recycle(std::move(u.shard_grad));
    u.shard_grad = at::Tensor();
  }
}

std::size_t ZeroOptimizer::units_stepped() const {
  return static_cast<std::size_t>(std::count_if(units_.begin(), units_.end(), [](const auto& u) { return u->stepped; }));
}
void ZeroOptimizer::fused_defer(Unit& u) {
  // A unit's backward hook runs when the gradient of its input is done, but a parameter used
  // before that input in the forward (a transformer's proj_in ahead of its first block) gets its
  // gradient later: so a unit steps when the next hook (the unit before it in the forward) runs,
  // or at the end of backward.
  if (fused_pending_ && fused_pending_ != &u) finish_fused();
  fused_pending_ = &u;
}

void ZeroOptimizer::finish_fused() {
  if (!fused_pending_) return;
  Unit& u = *fused_pending_;
  fused_pending_ = nullptr;
  c10::NoGradGuard no_grad;
  if (u.plan.hook_grads) {
    const at::Tensor late = take_grads(u);  // gradients that arrived after its hook
    if (late.defined()) reduce_into_part(u, late);
  } else {
    launch_reduce(u);  // its whole buffer (one rank: its part moves where the step reads it)
    finish_reduce(u);
  }
  settle_grad(u);
  fused_step_unit(u);
}

}  // namespace zs::zero
