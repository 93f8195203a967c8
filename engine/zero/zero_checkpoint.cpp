// ZeroOptimizer's state as others read it: the whole state and parameters gathered (a
// collective), this rank's shards for sharded checkpoints and their restore, the EMA, and the
// bytes of model state it holds where.
#include <algorithm>
#include <array>
#include <cmath>
#include <utility>

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include "core/copy_stream.h"
#include "core/error.h"
#include "zero/zero_schedules.h"

namespace zs::zero {

NamedTensors ZeroOptimizer::state() const {
  auto& self = const_cast<ZeroOptimizer&>(*this);  // NVMe reads change no logical state
  self.join_delayed();
  NamedTensors out;
  for (const auto& u : units_) {
    const SwapGuard in(self, *u, /*write=*/false);
    const auto gather = [&](const at::Tensor& part) {
      if (u->plan.owned == u->plan.padded) return part;
      at::Tensor full = at::zeros({u->plan.padded}, part.options());
      comm_.all_gather(part, full);
      return full;
    };
    const auto read = [&](Moment k) { return self.read_state(*u, k == Moment::first ? 1 : 2); };
    u->optimizer->full_state(view(*u), read, gather, out);
  }
  out.emplace_back("step", at::full({1}, step_, at::kLong));
  return out;
}

ModelStateBytes ZeroOptimizer::model_state() const {
  const bool on_device = o_.offload_optimizer == ZeroOptions::Offload::none;
  ModelStateBytes b;
  for (const Unit* u : by_index_)  // parameters of every unit, a frozen base's too (it has nothing else)
    b.parameters += u->plan.sharded ? (o_.offload_param == ZeroOptions::Offload::none ? tensor_bytes(u->shard_param) : 0)
                               : tensor_bytes(u->flat_param);
  for (const auto& u : units_) {
    // The full buffer backward accumulates into (units whose hook does not take the gradients;
    // at stages 2-3 it is freed after each reduction and comes back at zero_grad, so it counts),
    // then the rank's reduced part when it lives on the device.
    if (!u->plan.hook_grads) b.gradients += u->plan.padded * static_cast<std::int64_t>(c10::elementSize(compute_opts_.dtype().toScalarType()));
    if (on_device && u->shard_grad.defined()) b.gradients += tensor_bytes(u->shard_grad);
    if (on_device) b.optimizer_states += optimizer_bytes(*u);
  }
  return b;
}

OffloadedBytes ZeroOptimizer::offloaded() const {
  OffloadedBytes b;
  if (o_.offload_optimizer != ZeroOptions::Offload::none)
    for (const auto& u : units_) {
      b.gradients += tensor_bytes(u->shard_grad);
      // Held bf16 gradients: the buffer they land in (made by the first deposit).
      if (hold_bf16_grads_ && u->grad_copy && u->plan.reduce_scatter)
        b.gradients += u->grad_host.defined() ? tensor_bytes(u->grad_host) : 2 * u->plan.owned;
      b.optimizer_states += optimizer_bytes(*u);
    }
  if (o_.offload_param == ZeroOptions::Offload::cpu)
    for (const Unit* u : by_index_) b.parameters += u->plan.sharded ? tensor_bytes(u->shard_param) : 0;
  if (offload_) {
    if (offload_->optimizer_store) b.nvme_bytes += offload_->optimizer_store->bytes();
    if (offload_->param_store) b.nvme_bytes += offload_->param_store->bytes();
  }
  return b;
}

NamedTensors ZeroOptimizer::full_parameters() {
  finish_gathers();
  join_delayed();  // (the masters: one update ahead of the weights while one is pending)
  if (sharded_units() == 0 && !masters_) return {};
  c10::NoGradGuard no_grad;
  NamedTensors out;
  for (auto& u : units_) {
    at::Tensor flat;
    if (masters_) {
      // The fp32 masters, not the compute copy: checkpoints keep full precision.
      const at::Tensor mine = read_state(*u, 0).contiguous();
      flat = mine;
      if (u->plan.owned != u->plan.padded) {
        flat = at::empty({u->plan.padded}, mine.options());
        comm_.all_gather(mine, flat);
      }
    } else {
      flat = u->flat_param;
      if (u->plan.sharded && !flat.defined()) {
        flat = at::empty({u->plan.padded}, compute_opts_);
        comm_.all_gather(owned_params(*u).to(compute_opts_.device()), flat);
      }
    }
    for (std::size_t i = 0; i < u->params.size(); ++i)
      out.emplace_back(u->params[i].first, flat.narrow(0, u->offsets[i], u->sizes[i]).view(u->shapes[i]).cpu().clone());
  }
  return out;
}

void ZeroOptimizer::enable_ema(double decay) {
  ema_decay_ = decay;
  c10::NoGradGuard no_grad;
  for (auto& u : units_) u->ema = owned_weights(*u).detach().to(at::kCPU, at::kFloat, false, true);
}

void ZeroOptimizer::update_ema() {
  if (ema_decay_ < 0) return;
  c10::NoGradGuard no_grad;
  // delayed_update: the weights the device holds (the masters are being updated meanwhile).
  for (auto& u : units_)
    u->ema.lerp_((delayed_pending() ? owned_params(*u) : owned_weights(*u)).detach().to(at::kCPU, at::kFloat), 1.0 - ema_decay_);
}

NamedTensors ZeroOptimizer::ema_state() {
  NamedTensors out;
  if (ema_decay_ < 0) return out;
  for (auto& u : units_) {
    at::Tensor full = u->ema;
    if (u->plan.owned != u->plan.padded) {
      full = at::zeros({u->plan.padded}, u->ema.options());
      comm_.all_gather(u->ema, full);
    }
    for (std::size_t i = 0; i < u->params.size(); ++i)
      out.emplace_back(u->params[i].first, full.narrow(0, u->offsets[i], u->sizes[i]).view(u->shapes[i]).clone());
  }
  return out;
}

void ZeroOptimizer::swap_ema() {
  finish_gathers();
  if (ema_decay_ < 0) return;
  c10::NoGradGuard no_grad;
  // The live weights are put aside (not exchanged with the EMA), so swapping back restores them
  // exactly even when they are bf16 and the EMA fp32. The masters are left alone.
  for (auto& u : units_) {
    at::Tensor live = owned_params(*u);
    if (!ema_swapped_) {
      u->ema_saved = live.clone();
      live.copy_(u->ema);
    } else {
      live.copy_(u->ema_saved);
      u->ema_saved = at::Tensor();
    }
    store_owned_params(*u, live);
  }
  ema_swapped_ = !ema_swapped_;
  gather_whole_units();  // the whole parameters follow the swapped shards
}

std::vector<checkpoint::UnitLayout> ZeroOptimizer::layout() const {
  std::vector<checkpoint::UnitLayout> out;
  for (const auto& u : units_) {
    checkpoint::UnitLayout l;
    l.name = u->name;
    l.numel = u->numel;
    l.padded = u->plan.padded;
    l.dtype = master_dtype_ == at::kDouble ? "F64" : "F32";
    for (std::size_t i = 0; i < u->params.size(); ++i) l.params.push_back({u->params[i].first, u->offsets[i], u->shapes[i]});
    out.push_back(std::move(l));
  }
  return out;
}

NamedTensors ZeroOptimizer::shard_state() {
  finish_gathers();
  join_delayed();
  NamedTensors out;
  if (plan_.replicated && comm_.rank() != 0) return out;
  c10::NoGradGuard no_grad;
  const auto opts = at::TensorOptions().dtype(master_dtype_);
  for (auto& u : units_) {
    const SwapGuard in(*this, *u, /*write=*/false);
    out.emplace_back(u->name + "/weights", read_state(*u, 0).to(at::kCPU).to(opts).contiguous().clone());
    // delayed_update with an update computed but not yet written: the weights the device holds.
    if (delayed_pending()) out.emplace_back(u->name + "/lagged", owned_params(*u).to(at::kCPU).to(opts).contiguous().clone());
    for (const Moment k : u->optimizer->moments())
      out.emplace_back(u->name + (k == Moment::first ? "/exp_avg" : "/exp_avg_sq"),
                       read_state(*u, k == Moment::first ? 1 : 2).to(at::kCPU).to(opts).contiguous().clone());
    u->optimizer->save_extra(view(*u), u->name + "/", comm_.rank() == 0, opts, out);
    if (ema_decay_ >= 0) out.emplace_back(u->name + "/ema", u->ema.clone());
  }
  return out;
}

std::int64_t ZeroOptimizer::checkpoint_bytes() const {
  if (plan_.replicated && comm_.rank() != 0) return 0;
  const auto w = static_cast<std::int64_t>(c10::elementSize(master_dtype_));
  std::int64_t total = 0;
  for (const auto& u : units_) {
    // As shard_state: weights (+ lagged), the moments or Adafactor's first moment and (rank 0)
    // statistics, 8-bit AdamW's absmax per block, the EMA.
    total += (o_.delayed_update ? 2 : 1) * u->plan.owned * w + u->optimizer->checkpoint_bytes(view(*u), comm_.rank() == 0, w);
    if (ema_decay_ >= 0 && u->ema.defined()) total += u->ema.numel() * static_cast<std::int64_t>(u->ema.element_size());
  }
  return total;
}

void ZeroOptimizer::load_shards(const ShardSource& read, std::int64_t steps, bool with_ema, bool with_lagged) {
  finish_gathers();
  if (delayed_) delayed_->resume(with_lagged);
  c10::NoGradGuard no_grad;
  for (auto& u : units_) {
    SwapGuard in(*this, *u, /*write=*/true);
    const at::Tensor w = read(u->name, "weights", u->plan.owned_offset, u->plan.owned);
    at::Tensor live = owned_params(*u);
    live.copy_(with_lagged ? read(u->name, "lagged", u->plan.owned_offset, u->plan.owned) : w);
    store_owned_params(*u, live);
    if (masters_) write_state(*u, 0, w.to(at::TensorOptions().dtype(master_dtype_)));
    u->optimizer->load(
        view(*u), [&](const std::string& kind, std::int64_t first, std::int64_t count) { return read(u->name, kind, first, count); },
        [&](Moment k, const at::Tensor& values) { write_state(*u, k == Moment::first ? 1 : 2, values); });
    if (with_ema && ema_decay_ >= 0) u->ema.copy_(read(u->name, "ema", u->plan.owned_offset, u->plan.owned));
    in.finish();
  }
  step_ = steps;
  gather_whole_units();
}

UnitView ZeroOptimizer::view(const Unit& u) {
  return UnitView{u.params, u.offsets, u.sizes, u.shapes, u.plan.owned_offset, u.plan.owned, u.plan.padded};
}

std::int64_t ZeroOptimizer::ema_bytes() const {
  std::int64_t n = 0;
  for (const auto& u : units_) n += tensor_bytes(u->ema);
  return n;
}

}  // namespace zs::zero
