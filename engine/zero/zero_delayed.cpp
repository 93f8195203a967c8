// ZeroOptimizer's delayed update schedule (zero.offload_optimizer.delayed_update, ZeRO-Offload's
// one-step delayed parameter update): the update of step t runs on a host thread while the device
// runs step t+1 with the weights of step t-1, and is written into the weights at the next step().
#include <utility>

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include "zero/zero_schedules.h"

namespace zs::zero {

ZeroOptimizer::DelayedSchedule::~DelayedSchedule() {
  if (thread_.joinable()) thread_.join();
}

void ZeroOptimizer::DelayedSchedule::step(double lr) {
  ++z_.step_;
  if (z_.step_ <= warmup_steps_) {
    warmup_.update(lr);
    return;
  }
  // The update computed while this step's forward and backward ran goes into the weights (the
  // next forward uses them: the masters of step t−1); this step's gradients move aside and
  // their update is computed on a host thread while the device runs the next step.
  join();
  write();
  aside_.resize(z_.units_.size());
  for (std::size_t k = 0; k < z_.units_.size(); ++k) {
    Unit& u = *z_.units_[k];
    PutAside& d = aside_[k];
    d.held = u.grad_held;
    if (u.grad_held) {
      // A held bf16 gradient moves aside as it is (its buffer swapped for a second one of the
      // same kind); the float32 copy stays clean.
      if (!d.host.defined()) d.host = at::empty({u.plan.owned}, u.grad_host.options().pinned_memory(u.grad_host.is_pinned()));
      std::swap(u.grad_host, d.host);
      d.scale = u.held_scale;
      u.grad_held = false;
      continue;
    }
    if (u.shard_grad.defined() && u.shard_grad.is_cpu()) {
      if (!d.grad.defined()) d.grad = at::zeros_like(u.shard_grad);
      std::swap(u.shard_grad, d.grad);  // (zero_grad clears the other for the next step)
    } else {
      if (!d.grad.defined()) d.grad = at::empty({u.plan.owned}, z_.state_opts_);
      d.grad.copy_(z_.step_grad(u));
    }
  }
  pending_ = true;
  thread_ = std::thread([this, lr, step = z_.step_] {
    try {
      c10::NoGradGuard no_grad;
      for (std::size_t k = 0; k < aside_.size(); ++k) compute(k, lr, step);
    } catch (...) {
      error_ = std::current_exception();
    }
  });
}

void ZeroOptimizer::DelayedSchedule::compute(std::size_t k, double lr, std::int64_t step) {
  Unit& u = *z_.units_[k];
  const double unit_lr = lr * u.lr_scale;
  // (8-bit AdamW's large units ignore the scale: only AdamW holds bf16 gradients.)
  const PutAside& d = aside_[k];
  if (d.held) u.optimizer->step({u.master, d.host, unit_lr, step, d.scale});
  else u.optimizer->step({u.master, d.grad, unit_lr, step});
}

void ZeroOptimizer::DelayedSchedule::join() {
  if (thread_.joinable()) thread_.join();
  if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
}

void ZeroOptimizer::DelayedSchedule::write() {
  if (!pending_) return;
  c10::NoGradGuard no_grad;
  for (auto& u : z_.units_) {
    at::Tensor p = z_.owned_params(*u);
    copy_converted(p, u->master);
    z_.store_owned_params(*u, p);
  }
  pending_ = false;
}

void ZeroOptimizer::DelayedSchedule::flush() {
  join();
  if (!pending_) return;
  write();
  z_.gather_whole_units(false);
}

void ZeroOptimizer::DelayedSchedule::resume(bool pending) {
  join();
  pending_ = pending;  // the next step writes the saved masters into the weights
}

}  // namespace zs::zero
