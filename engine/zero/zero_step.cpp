// ZeroOptimizer's step after backward: one unit's update in memory (with fp32 masters, on the CPU
// with the fused kernel writing the compute weights in the same pass, or on a float copy of the
// weights), the in-memory schedule, step() running the schedule (zero_schedules.h), clipping and
// loss-scale checks, and the gradients and scratch buffers a step reads.
#include <algorithm>
#include <array>
#include <cmath>
#include <utility>

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include "core/copy_stream.h"
#include "core/error.h"
#include "core/parallel.h"
#include "zero/stochastic_round.h"
#include "zero/zero_schedules.h"

namespace zs::zero {

std::int64_t ZeroOptimizer::optimizer_bytes(const Unit& u) const {
  const StateLayout l = u.optimizer->layout(masters_, static_cast<std::int64_t>(c10::elementSize(master_dtype_)));
  return o_.offload_optimizer == ZeroOptions::Offload::nvme ? l.resident_bytes() : l.bytes();
}

namespace {

/// Σx² in float64: a contiguous CPU tensor through zs::sum_of_squares; others through ATen.
double squares_sum(const at::Tensor& x) {
  if (!x.is_cpu() || !x.is_contiguous() ||
      (x.scalar_type() != at::kFloat && x.scalar_type() != at::kDouble && x.scalar_type() != at::kBFloat16))
    return at::linalg_vector_norm(x, 2, c10::nullopt, false, at::kDouble).pow(2).item<double>();
  if (x.scalar_type() == at::kFloat) return zs::sum_of_squares(x.data_ptr<float>(), x.numel());
  if (x.scalar_type() == at::kDouble) return zs::sum_of_squares(x.data_ptr<double>(), x.numel());
  return zs::sum_of_squares(x.data_ptr<at::BFloat16>(), x.numel());
}

}  // namespace

at::Tensor ZeroOptimizer::grad_square_sum(Unit& u) {
  // A held bf16 gradient: one pass over its bf16 values, summed in float64, times its scale².
  if (u.grad_held) return at::scalar_tensor(squares_sum(u.grad_host) * (u.held_scale * u.held_scale), at::kDouble);
  return at::scalar_tensor(squares_sum(step_grad(u)), at::kDouble);
}

at::Tensor ZeroOptimizer::host_scratch(std::int64_t n, const at::TensorOptions& opts) {
  if (opts.device().is_cpu() && !opts.pinned_memory())
    for (auto it = scratch_.begin(); it != scratch_.end(); ++it)
      if (it->numel() == n && it->scalar_type() == opts.dtype().toScalarType()) {
        at::Tensor t = std::move(*it);
        scratch_.erase(it);
        return t;
      }
  return at::empty({n}, opts);
}

void ZeroOptimizer::recycle(at::Tensor t) {
  if (!t.defined() || !t.is_cpu() || t.is_pinned() || !t.is_contiguous() || t.storage_offset() != 0 ||
      t.storage().nbytes() != static_cast<std::size_t>(t.numel()) * t.element_size())
    return;
  // The two most recent: a run of equal units (a transformer's blocks) reuses them, and what is
  // kept stays within two units' buffers.
  scratch_.push_back(t.view({-1}));
  if (scratch_.size() > 2) scratch_.erase(scratch_.begin());
}

bool ZeroOptimizer::has_grad_copy(const Unit& u) const {
  return u.shard_grad.defined() || (u.grad_copy && hold_bf16_grads_);
}

at::Tensor& ZeroOptimizer::grad_copy(Unit& u) {
  if (!u.shard_grad.defined()) {
    const bool pin = o_.pin_memory && at::globalContext().hasCUDA() && shard_grad_opts_.device().is_cpu();
    u.shard_grad = at::zeros({u.plan.owned}, shard_grad_opts_.pinned_memory(pin));
    u.shard_grad_clean = true;
  }
  return u.shard_grad;
}

at::Tensor ZeroOptimizer::step_grad(Unit& u) {
  release_held_grad(u);  // readers of the float32 buffer see a held bf16 gradient in it
  if (has_grad_copy(u)) return grad_copy(u);
  return u.flat_grad.narrow(0, u.plan.owned_offset, u.plan.owned);
}

at::Tensor ZeroOptimizer::owned_weights(Unit& u) {
  if (masters_ && u.master.defined()) return u.master;
  return owned_params(u);
}

double ZeroOptimizer::clip_grad_norm(double max_norm) {
  c10::NoGradGuard no_grad;
  if (fused_) return fused_->norm();  // clipped unit by unit, by prepare_fused_step's max_norm
  // Each rank holds the reduced gradients of its own part (replicated: all of them, the same on
  // every rank), so the squares are summed over the ranks when the parts differ.
  // A held bf16 gradient is clipped through its scale (one product with the two factors' product,
  // where the copy took two roundings).
  at::Tensor local = at::zeros({1}, at::kDouble);
  for (auto& u : units_) local += grad_square_sum(*u);
  if (!plan_.replicated) comm_.all_reduce(local);
  const double total = std::sqrt(local.item<double>());
  if (max_norm > 0 && total > max_norm) {
    const double scale = max_norm / (total + 1e-6);
    for (auto& u : units_) {
      if (u->grad_held) u->held_scale *= scale;
      else step_grad(*u).mul_(scale);
    }
  }
  return total;
}

bool ZeroOptimizer::unscale_and_check_overflow(double inv_scale) {
  if (!grads_reduced_) reduce_gradients();
  c10::NoGradGuard no_grad;
  bool bad = false;
  for (auto& u : units_) {
    at::Tensor g = step_grad(*u);
    if (inv_scale != 1.0) g.mul_(inv_scale);
    bad |= !at::isfinite(g).all().item<bool>();
  }
  if (comm_.world_size() > 1) {
    // One rank's overflow stops every rank's step.
    at::Tensor flag = at::full({1}, bad ? 1.0 : 0.0);
    comm_.all_reduce(flag);
    bad = flag.item<double>() > 0;
  }
  return bad;
}

void ZeroOptimizer::reduce_shared(at::Tensor& t) {
  if (!plan_.replicated) comm_.all_reduce(t);
}

void ZeroOptimizer::write_weights(Unit& u, at::Tensor& p, const at::Tensor& w) {
  if (masters_) copy_converted(p, w);
  else if (stochastic_) stochastic_round_bf16_into(w, p, rounding_key(o_.seed, u.name, step_), u.plan.owned_offset);
  else if (!w.is_same(p)) p.copy_(w);
  if (!masters_ && !w.is_same(p)) recycle(w);  // step_weights' copy
}

at::Tensor ZeroOptimizer::step_weights(Unit& u, const at::Tensor& p) {
  if (masters_) return u.master;
  const bool in_place = p.device() == state_opts_.device() && p.scalar_type() == state_opts_.dtype().toScalarType();
  if (in_place) return p;
  return host_scratch(p.numel(), state_opts_).copy_(p.reshape({-1})).view(p.sizes());
}

void ZeroOptimizer::step_lean(Unit& u, double lr) {
  at::Tensor p = owned_params(u);
  const at::Tensor g = step_grad(u);
  at::Tensor w = step_weights(u, p);
  const at::Tensor grad = g.device() == w.device() ? g : g.to(w.device());
  UnitStep s;
  s.weights = w;
  s.grad = grad;
  s.lr = lr;
  s.step = step_;
  s.reduce = [this](at::Tensor& t) { reduce_shared(t); };
  u.optimizer->step(s);
  write_weights(u, p, w);
  store_owned_params(u, p);
}

void ZeroOptimizer::step_in_memory(Unit& u, double step_lr) {
  const double lr = step_lr * u.lr_scale;
  if (!u.optimizer->fused_kernel()) {
    step_lean(u, lr);
    return;
  }
  at::Tensor p = owned_params(u);
  // A held bf16 gradient goes into the fused step where it landed, its scale applied there.
  const at::Tensor g = u.grad_held ? u.grad_host : step_grad(u);
  const double grad_scale = u.grad_held ? u.held_scale : 1.0;
  if (masters_ && copies_->asynchronous() && u.master.device().is_cpu() && p.is_cuda()) {
    // The CPU step writes the new weights into pinned memory; they go up on the side stream
    // while the CPU updates the next unit (step() makes the compute stream wait for them).
    if (!u.param_host.defined()) u.param_host = at::empty({u.plan.owned}, p.options().device(at::kCPU).pinned_memory(true));
    copies_->wait_on_host(u.param_fence);  // the last step's copy out of the same buffer
    u.optimizer->step({u.master, g, lr, step_, grad_scale, u.param_host});
    at::Tensor host = u.param_host;
    u.param_fence = copies_->run([&] { p.copy_(host, /*non_blocking=*/true); }, {p});
    return;
  }
  if (!masters_) {
    // Parameter shards offloaded without the optimizer (stage 3, full precision), or bf16 weights
    // without masters: the update runs in float32 where the moments live and the result goes back
    // to the shard (rounded stochastically to bf16).
    const at::Tensor w = step_weights(u, p);
    if (stochastic_) u.optimizer->step({w, g.to(w.device()), lr, step_});
    else u.optimizer->step({w, g.to(w.options()), lr, step_, 1.0, at::Tensor(), /*exact=*/true});
    write_weights(u, p, w);
  } else {
    u.optimizer->step({u.master, g, lr, step_, grad_scale, p});
  }
  store_owned_params(u, p);
}

void ZeroOptimizer::InMemorySchedule::step(double lr) {
  ++z_.step_;
  update(lr);
}

void ZeroOptimizer::InMemorySchedule::update(double lr) {
  // Lean optimizers on NVMe bring each unit's state in for its step, the next unit's reads under
  // way while this one steps (nothing for units without swapped state).
  auto& units = z_.units_;
  for (std::size_t k = 0; k < units.size(); ++k) {
    Unit& u = *units[k];
    z_.finish_swap_in(u);
    if (k + 1 < units.size()) z_.begin_swap_in(*units[k + 1]);
    z_.step_in_memory(u, lr);
    z_.swap_out(u, /*write=*/true);
  }
}

std::unique_ptr<ZeroOptimizer::Schedule> ZeroOptimizer::make_schedule() {
  if (o_.fused_backward) {
    auto s = std::make_unique<FusedSchedule>(*this);
    fused_ = s.get();
    return s;
  }
  if (o_.delayed_update) {
    auto s = std::make_unique<DelayedSchedule>(*this, o_.delayed_update_warmup);
    delayed_ = s.get();
    return s;
  }
  // AdamW on NVMe streams sub-groups; the lean optimizers' NVMe state comes in a unit at a time.
  if (o_.offload_optimizer == ZeroOptions::Offload::nvme && o_.optimizer == OptimizerType::adamw)
    return std::make_unique<NvmeSchedule>(*this);
  return std::make_unique<InMemorySchedule>(*this);
}

void ZeroOptimizer::prepare_fused_step(double lr, double max_norm) {
  if (fused_) fused_->prepare(lr, max_norm);
}
double ZeroOptimizer::previous_grad_norm() const { return fused_ ? fused_->previous_norm() : -1; }
void ZeroOptimizer::set_previous_grad_norm(double norm) {
  if (fused_) fused_->set_previous_norm(norm);
}
std::size_t ZeroOptimizer::units_stepped() const { return fused_ ? fused_->units_stepped() : 0; }
void ZeroOptimizer::join_delayed() {
  if (delayed_) delayed_->join();
}
bool ZeroOptimizer::delayed_pending() const { return delayed_ && delayed_->pending(); }
void ZeroOptimizer::flush_delayed() {
  if (delayed_) delayed_->flush();
}

void ZeroOptimizer::step(double lr) {
  if (!grads_reduced_) reduce_gradients();
  c10::NoGradGuard no_grad;
  finish_gathers();  // (normally done by the forward hooks already)
  schedule_->step(lr);
  copies_->join();  // the new weights on their way up, before anything computes with them
  gather_whole_units(plan_.overlap_comm);
  grads_reduced_ = false;  // (the reduced gradients are cleared by the next zero_grad)
}

}  // namespace zs::zero
