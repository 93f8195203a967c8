// ZeroOptimizer's gradient reductions: all-reduce or reduce-scatter per unit as the plan says,
// started by the units' backward hooks (overlapping backward) or after it, and the deposit of each
// reduced part where the step reads it (offload: into CPU memory, on a side stream with CUDA;
// under bf16 held where it landed).
#include <algorithm>
#include <array>
#include <cmath>
#include <utility>

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include "core/copy_stream.h"
#include "core/error.h"
#include "comm/communicator.h"
#include "zero/zero_schedules.h"

namespace zs::zero {

namespace {

/// A collective that had nothing to do.
class NothingPending final : public comm::PendingCollective {
 public:
  void wait() override {}
};

}  // namespace

void ZeroOptimizer::reduce_scatter_into_shard(Unit& u, const at::Tensor& full_grad) {
  at::Tensor part = at::empty({u.plan.shard}, full_grad.options());
  comm_.reduce_scatter(full_grad, part);
  // Offload: the gradient leaves the device here, into the fp32 CPU copy the step reads.
  deposit_grad(u, part, 1.0 / comm_.world_size(), /*accumulate=*/true);
}

void ZeroOptimizer::deposit_grad(Unit& u, const at::Tensor& part, double scale, bool accumulate) {
  const bool copy_on_cpu = shard_grad_opts_.device().is_cpu();
  if (!copies_->asynchronous() || !copy_on_cpu || !part.is_cuda()) {
    release_held_grad(u);
    if (hold_bf16_grads_ && accumulate && u.shard_grad_clean && part.scalar_type() == at::kBFloat16 && copy_on_cpu) {
      // The step's first deposit stays bf16 (the part itself may be a view of a buffer that goes).
      if (!u.grad_host.defined()) u.grad_host = at::empty({u.plan.owned}, part.options().device(at::kCPU));
      u.grad_host.copy_(part);
      u.grad_held = true;
      u.held_scale = scale;
      return;
    }
    at::Tensor& copy = grad_copy(u);
    if (accumulate) copy.add_(part.to(copy.options()), scale);
    else copy.copy_(part);
    u.shard_grad_clean = false;
    return;
  }
  // To the CPU on the side stream, into pinned memory; added there once it has arrived
  // (settle_grad), so backward never waits for the copy.
  settle_grad(u);  // an earlier micro-step's gradient still in the same staging buffer
  release_held_grad(u);  // ... or held there: it goes into shard_grad before the buffer is reused
  if (!u.grad_host.defined())
    u.grad_host = at::empty({u.plan.owned}, part.options().device(at::kCPU).pinned_memory(true));
  at::Tensor host = u.grad_host;
  u.grad_fence = copies_->run([&] { host.copy_(part, /*non_blocking=*/true); }, {part});
  u.grad_pending = true;
  u.grad_accumulate = accumulate;
  u.grad_scale = scale;
  depositing_.push_back(&u);
}

bool ZeroOptimizer::settle_grad(Unit& u, bool block) {
  if (!u.grad_pending) return true;
  if (!block && !copies_->done(u.grad_fence)) return false;
  copies_->wait_on_host(u.grad_fence);
  u.grad_fence = {};
  if (hold_bf16_grads_ && u.grad_accumulate && u.shard_grad_clean && u.grad_host.scalar_type() == at::kBFloat16) {
    u.grad_held = true;  // the fused step reads it where it landed
    u.held_scale = u.grad_scale;
  } else {
    if (u.grad_accumulate) grad_copy(u).add_(u.grad_host, u.grad_scale);
    else grad_copy(u).copy_(u.grad_host);
    u.shard_grad_clean = false;
  }
  u.grad_pending = false;
  depositing_.erase(std::remove(depositing_.begin(), depositing_.end(), &u), depositing_.end());
  return true;
}

void ZeroOptimizer::release_held_grad(Unit& u) {
  if (!u.grad_held) return;
  grad_copy(u).add_(u.grad_host, u.held_scale);
  u.shard_grad_clean = false;
  u.grad_held = false;
}

void ZeroOptimizer::launch_reduce(Unit& u) {
  // Once per step for the units kept whole (a second reduction would reduce the reduced sums).
  if (u.pending || u.reduced || !u.flat_grad.defined()) return;
  if (!u.plan.reduce_scatter) {
    u.pending = comm_.all_reduce_async(u.flat_grad);
  } else if (comm_.world_size() == 1) {
    // One rank: the reduce-scatter is the identity; the buffer is its own part.
    u.part = u.flat_grad.narrow(0, u.plan.owned_offset, u.plan.owned);
    u.pending = std::make_unique<NothingPending>();
  } else {
    // Without a separate reduced copy (stage 1) the owned range of the full buffer receives it.
    u.part = has_grad_copy(u) ? at::empty({u.plan.shard}, u.flat_grad.options())
                              : u.flat_grad.narrow(0, u.plan.owned_offset, u.plan.owned);
    u.pending = comm_.reduce_scatter_async(u.flat_grad, u.part);
  }
  in_flight_.push_back(&u);
}

void ZeroOptimizer::stage_owned_grad(Unit& u) {
  if (!u.plan.reduce_scatter && has_grad_copy(u) && u.flat_grad.defined())
    deposit_grad(u, u.flat_grad.narrow(0, u.plan.owned_offset, u.plan.owned), 1.0, /*accumulate=*/false);
}

void ZeroOptimizer::finish_reduce(Unit& u) {
  if (!u.pending) return;
  u.pending->wait();
  u.pending.reset();
  u.reduced = true;
  in_flight_.erase(std::remove(in_flight_.begin(), in_flight_.end(), &u), in_flight_.end());
  if (!u.plan.reduce_scatter) {
    if (comm_.world_size() > 1) u.flat_grad.div_(comm_.world_size());
    stage_owned_grad(u);
    return;
  }
  if (has_grad_copy(u)) deposit_grad(u, u.part, 1.0 / comm_.world_size(), /*accumulate=*/true);  // every micro-step adds
  else u.part.mul_(1.0 / comm_.world_size());  // the owned range of the full buffer itself
  u.part = at::Tensor();
  if (!u.plan.partitioned_grads) return;
  // Only the shard is kept: the full gradient buffer goes until the next backward.
  for (auto& [name, p] : u.params) p.mutable_grad() = at::Tensor();
  u.flat_grad = at::Tensor();
}

void ZeroOptimizer::drain_reductions(const Unit* keep) {
  // Called from a unit's backward hook right after it started its own reduction. Reductions run
  // on while at most reduce_bucket_size elements of gradients are in flight (as DeepSpeed's
  // buckets); beyond that the oldest are finished here, and their buffers go (offload: their
  // gradients move on to the CPU). Finishing every earlier one at each hook instead cost 12 % at
  // stage 2 and 34 % at stage 3 on the 54 M-parameter bench model at N = 2.
  auto elements = [&] {
    std::int64_t n = 0;
    for (const Unit* u : in_flight_) n += u->plan.padded;
    return n;
  };
  while (!in_flight_.empty() && in_flight_.front() != keep && elements() > o_.reduce_bucket_size)
    finish_reduce(*in_flight_.front());
  // Gradients that have reached the CPU are added to the step's copy now, not all at the end.
  while (!depositing_.empty() && settle_grad(*depositing_.front(), /*block=*/false)) {
  }
}

at::Tensor ZeroOptimizer::take_grads(Unit& u) {
  bool any = false;
  at::Tensor full = at::empty({u.plan.padded}, compute_opts_);
  for (std::size_t i = 0; i < u.params.size(); ++i) {
    at::Tensor& p = u.params[i].second;
    at::Tensor slot = full.narrow(0, u.offsets[i], u.sizes[i]);
    if (!p.grad().defined()) {
      slot.zero_();
      continue;
    }
    slot.copy_(p.grad().reshape({-1}));
    p.mutable_grad() = at::Tensor();
    any = true;
  }
  if (!any) return {};
  if (u.plan.padded > u.numel) full.narrow(0, u.numel, u.plan.padded - u.numel).zero_();
  return full;
}

void ZeroOptimizer::reduce_into_part(Unit& u, const at::Tensor& full) {
  if (!u.shard_grad.defined()) u.shard_grad = host_scratch(u.plan.owned, shard_grad_opts_).zero_();  // freed by its step
  reduce_scatter_into_shard(u, full);
}

void ZeroOptimizer::reduce_unit(std::size_t unit) {
  Unit& u = indexed(unit);
  if (u.frozen) {
    release(u);
    return;
  }
  if (!u.plan.hook_grads) {
    if (fused_ && last_micro_) {
      fused_->defer(u);  // reduced and stepped once the unit before it in the forward reaches backward
      return;
    }
    if (plan_.overlap_comm && last_micro_ && comm_.world_size() > 1) {
      launch_reduce(u);
      if (o_.offload_optimizer != ZeroOptions::Offload::none) drain_reductions(&u);
    }
    return;
  }
  c10::NoGradGuard no_grad;
  // Stages 2-3: the unit's gradients exist only from its backward to here; they are flattened,
  // reduce-scattered into the shard (every micro-step) and dropped, so at most about two units'
  // full gradients are alive at once.
  const at::Tensor full = take_grads(u);
  if (full.defined()) {
    if (fused_) {
      reduce_into_part(u, full);
    } else if (!plan_.overlap_comm) {
      reduce_scatter_into_shard(u, full);
    } else {
      finish_reduce(u);  // a reduction of this unit from an earlier backward pass
      u.flat_grad = full;
      u.reduced = false;  // every micro-step's gradients are reduced
      launch_reduce(u);
      drain_reductions(&u);
    }
  }
  if (fused_ && last_micro_ && !fused_->stepped(u)) fused_->defer(u);
  release(unit);
}

void ZeroOptimizer::ensure_grads() {
  for (auto& u : units_) {
    if (u->plan.hook_grads || u->flat_grad.defined()) continue;
    u->flat_grad = at::zeros({u->plan.padded}, compute_opts_);
    for (std::size_t i = 0; i < u->params.size(); ++i) {
      at::Tensor& p = u->params[i].second;
      // Backward accumulates into these views in place, so gradients land in the flat buffer.
      p.mutable_grad() = u->flat_grad.narrow(0, u->offsets[i], p.numel()).view(p.sizes());
    }
  }
}

void ZeroOptimizer::zero_grad() {
  ensure_grads();
  if (fused_) fused_->begin();
  for (auto& u : units_) {
    u->reduced = false;
    // A buffer nothing was added into since the last zero_grad is still zero (a held gradient
    // was read where it landed).
    if (u->shard_grad.defined() && !(hold_bf16_grads_ && u->shard_grad_clean)) u->shard_grad.zero_();
    u->shard_grad_clean = true;
    u->grad_held = false;
    if (u->plan.hook_grads) {
      for (auto& [name, p] : u->params) p.mutable_grad() = at::Tensor();
    } else {
      u->flat_grad.zero_();
    }
  }
  grads_reduced_ = false;
}

void ZeroOptimizer::skip_step() { zero_grad(); }

void ZeroOptimizer::reduce_gradients() {
  const int world = comm_.world_size();
  c10::NoGradGuard no_grad;
  if (fused_) fused_->finish();  // the last unit the hooks reached
  bool launched = false;
  for (auto& u : units_) launched |= u->pending != nullptr;
  if (!plan_.any_reduce_scatter() && !launched && world > 1) {
    // Nothing started during backward: all-reduce in buckets of about reduce_bucket_size elements.
    std::vector<Unit*> bucket;
    std::int64_t in_bucket = 0;
    auto flush = [&] {
      if (bucket.empty()) return;
      if (bucket.size() == 1) {
        comm_.all_reduce(bucket[0]->flat_grad);
      } else {
        std::vector<at::Tensor> parts;
        for (auto* u : bucket) parts.push_back(u->flat_grad);
        at::Tensor flat = at::cat(parts);
        comm_.all_reduce(flat);
        std::int64_t off = 0;
        for (auto* u : bucket) {
          u->flat_grad.copy_(flat.narrow(0, off, u->plan.padded));
          off += u->plan.padded;
        }
      }
      for (auto* u : bucket) u->flat_grad.div_(world);
      bucket.clear();
      in_bucket = 0;
    };
    for (auto& u : units_) {
      if (fused_ && fused_->stepped(*u)) continue;  // reduced and stepped from its hook
      bucket.push_back(u.get());
      in_bucket += u->plan.padded;
      if (in_bucket >= o_.reduce_bucket_size) flush();
    }
    flush();
    for (auto& u : units_) stage_owned_grad(*u);
    for (auto& u : units_) settle_grad(*u);
    grads_reduced_ = true;
    return;
  }
  // Units whose backward hook already started their reduction are finished here; the rest
  // (io, text encoder, anything the hooks missed) are reduced now.
  for (std::size_t i = 0; i < by_index_.size(); ++i) {
    Unit& u = indexed(i);
    if (u.frozen) release(u);  // regathered for a backward whose input needed no gradient
    else if (u.plan.hook_grads) reduce_unit(i);  // normally done by its backward hook already
    else launch_reduce(u);
  }
  if (fused_) fused_->finish();
  for (auto& u : units_) finish_reduce(*u);
  // Every gradient is where the step reads it before anything looks at them (or zero_grad
  // clears the device buffers a copy still reads).
  for (auto& u : units_) settle_grad(*u);
  grads_reduced_ = true;
}

}  // namespace zs::zero
