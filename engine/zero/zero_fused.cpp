// ZeroOptimizer's fused backward schedule (optimizer.fused_backward): each unit steps as soon as
// its reduced gradients are final, from the backward hook of the unit before it in the forward,
// and its gradient memory goes at once; clipping scales by the previous step's global norm.
#include <cmath>
#include <utility>

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include "core/error.h"
#include "zero/zero_schedules.h"

namespace zs::zero {

void ZeroOptimizer::FusedSchedule::step(double lr) {
  // The units the hooks did not step (io, the text encoder, units without a hook) step now, with
  // the same scale; this step's norm becomes the next step's clipping norm.
  norm();
  lr_ = lr;
  for (auto& u : z_.units_) step_unit(*u);
  previous_norm_ = current_norm_;
  ready_ = false;
}

void ZeroOptimizer::FusedSchedule::prepare(double lr, double max_norm) {
  lr_ = lr;
  clip_ = max_norm;
  norm_sq_ = 0;
  ready_ = true;
  norm_known_ = false;
}

void ZeroOptimizer::FusedSchedule::begin() {
  begun_ = false;
  pending_ = nullptr;
  stepped_.clear();
}

double ZeroOptimizer::FusedSchedule::norm() {
  if (norm_known_) return current_norm_;
  // The stepped units' squares were summed as they stepped; the rest are added now.
  double local = norm_sq_;
  for (auto& u : z_.units_)
    if (!stepped(*u)) local += z_.grad_square_sum(*u).item<double>();
  at::Tensor t = at::full({1}, local, at::kDouble);
  if (!z_.plan_.replicated) z_.comm_.all_reduce(t);
  current_norm_ = std::sqrt(t.item<double>());
  norm_known_ = true;
  return current_norm_;
}

void ZeroOptimizer::FusedSchedule::step_unit(Unit& u) {
  if (stepped(u)) return;
  if (!ready_)
    throw Error(ErrorKind::config, "optimizer.fused_backward: prepare_fused_step must come before the step's backward");
  c10::NoGradGuard no_grad;
  if (!begun_) {
    ++z_.step_;
    begun_ = true;
  }
  if (u.plan.hook_grads && !u.shard_grad.defined()) u.shard_grad = z_.host_scratch(u.plan.owned, z_.shard_grad_opts_).zero_();
  norm_sq_ += z_.grad_square_sum(u).item<double>();
  at::Tensor g = z_.step_grad(u);
  // The global norm is known only once every unit has stepped: clipping scales by the last one's.
  if (clip_ > 0 && previous_norm_ > clip_) g.mul_(clip_ / (previous_norm_ + 1e-6));
  z_.step_in_memory(u, lr_);
  stepped_.insert(&u);
  if (u.plan.hook_grads) {  // its gradient memory goes now (in CPU memory: to the next unit)
    z_.recycle(std::move(u.shard_grad));
    u.shard_grad = at::Tensor();
  }
}

void ZeroOptimizer::FusedSchedule::defer(Unit& u) {
  // A unit's backward hook runs when the gradient of its input is done, but a parameter used
  // before that input in the forward (a transformer's proj_in ahead of its first block) gets its
  // gradient later: so a unit steps when the next hook (the unit before it in the forward) runs,
  // or at the end of backward.
  if (pending_ && pending_ != &u) finish();
  pending_ = &u;
}

void ZeroOptimizer::FusedSchedule::finish() {
  if (!pending_) return;
  Unit& u = *pending_;
  pending_ = nullptr;
  c10::NoGradGuard no_grad;
  if (u.plan.hook_grads) {
    const at::Tensor late = z_.take_grads(u);  // gradients that arrived after its hook
    if (late.defined()) z_.reduce_into_part(u, late);
  } else {
    z_.launch_reduce(u);  // its whole buffer (one rank: its part moves where the step reads it)
    z_.finish_reduce(u);
  }
  z_.settle_grad(u);
  step_unit(u);
}

}  // namespace zs::zero
