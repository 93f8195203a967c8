// ZeroOptimizer's delayed update (zero.offload_optimizer.delayed_update, ZeRO-Offload's one-step
// delayed parameter update): the update of step t runs on a host thread while the device runs
// step t+1 with the weights of step t-1, and is written into the weights at the next step().
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

void ZeroOptimizer::step_delayed(double lr) {
  // The update computed while this step's forward and backward ran goes into the weights (the
  // next forward uses them: the masters of step t−1); this step's gradients move aside and
  // their update is computed on a host thread while the device runs the next step.
  join_delayed();
  write_delayed();
  for (auto& u : units_) {
    if (!u->delayed) u->delayed = std::make_unique<DelayedUnit>();
    DelayedUnit& d = *u->delayed;
    d.held = u->grad_held;
    if (u->grad_held) {
      // A held bf16 gradient moves aside as it is (its buffer swapped for a second one of the
      // same kind); the float32 copy stays clean.
      if (!d.host.defined()) d.host = at::empty({u->plan.owned}, u->grad_host.options().pinned_memory(u->grad_host.is_pinned()));
      std::swap(u->grad_host, d.host);
      d.scale = u->held_scale;
      u->grad_held = false;
      continue;
    }
    if (u->shard_grad.defined() && u->shard_grad.is_cpu()) {
      if (!d.grad.defined()) d.grad = at::zeros_like(u->shard_grad);
      std::swap(u->shard_grad, d.grad);  // (zero_grad clears the other for the next step)
    } else {
      if (!d.grad.defined()) d.grad = at::empty({u->plan.owned}, state_opts_);
      d.grad.copy_(step_grad(*u));
    }
  }
  delayed_pending_ = true;
  delayed_thread_ = std::thread([this, lr, step = step_] {
    try {
      c10::NoGradGuard no_grad;
      for (auto& u : units_) compute_delayed(*u, lr, step);
    } catch (...) {
      delayed_error_ = std::current_exception();
    }
  });
  copies_->join();
  gather_whole_units(plan_.overlap_comm);
  grads_reduced_ = false;
}

void ZeroOptimizer::compute_delayed(Unit& u, double lr, std::int64_t step) {
  const double unit_lr = lr * u.lr_scale;
  // (8-bit AdamW's large units ignore the scale: only AdamW holds bf16 gradients.)
  const DelayedUnit& d = *u.delayed;
  if (d.held) u.optimizer->step({u.master, d.host, unit_lr, step, d.scale});
  else u.optimizer->step({u.master, d.grad, unit_lr, step});
}

void ZeroOptimizer::join_delayed() {
  if (delayed_thread_.joinable()) delayed_thread_.join();
  if (delayed_error_) std::rethrow_exception(std::exchange(delayed_error_, nullptr));
}

void ZeroOptimizer::write_delayed() {
  if (!delayed_pending_) return;
  c10::NoGradGuard no_grad;
  for (auto& u : units_) {
    at::Tensor p = owned_params(*u);
    copy_converted(p, u->master);
    store_owned_params(*u, p);
  }
  delayed_pending_ = false;
}

void ZeroOptimizer::flush_delayed() {
  join_delayed();
  if (!delayed_pending_) return;
  write_delayed();
  gather_whole_units(false);
}

}  // namespace zs::zero
