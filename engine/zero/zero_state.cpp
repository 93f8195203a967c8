// ZeroOptimizer's step and state: the Adam update on the rank's part (in memory, with fp32
// masters, on the CPU with the fused kernel, or streamed through NVMe files in sub-groups), the
// lean optimizers' (8-bit AdamW, Adafactor: in memory),
// clipping and loss-scale checks, checkpoints' gathers, the EMA and the memory accounting.
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
#include "zero/zero_unit.h"

namespace zs::zero {

namespace {

std::int64_t bytes(const at::Tensor& t) { return t.defined() ? t.numel() * static_cast<std::int64_t>(t.element_size()) : 0; }

}  // namespace

std::int64_t ZeroOptimizer::optimizer_bytes(const Unit& u) const {
  const StateLayout l = u.optimizer->layout(masters_, static_cast<std::int64_t>(c10::elementSize(master_dtype_)));
  return o_.offload_optimizer == ZeroOptions::Offload::nvme ? l.resident_bytes() : l.bytes();
}

void ZeroOptimizer::init_offload() {
  using O = ZeroOptions::Offload;
  if (o_.offload_optimizer != O::nvme && o_.offload_param != O::nvme) return;
  offload_ = std::make_unique<Offload>();
  // Folders of runs that were killed (no chance to clean up) are removed before space is counted.
  for (const auto& path : {o_.optimizer_nvme_path, o_.param_nvme_path}) {
    if (path.empty()) continue;
    for (const auto& stale : NvmeStore::remove_stale(path))
      if (o_.log) o_.log("removed " + stale + ", left behind by a run that was killed");
  }
  const auto say = [&](NvmeStore& store, const char* what) {
    if (!o_.log) return;
    std::string line = std::string("NVMe offload of ") + what + ": " + store.dir() + ", " + store.io().backend() +
                       (store.direct() ? ", O_DIRECT" : ", buffered (no O_DIRECT on this file system)");
    if (!store.io().fallback_reason().empty()) line += "; io_uring not used: " + store.io().fallback_reason();
    o_.log(line);
  };
  if (o_.offload_optimizer == O::nvme && o_.optimizer == OptimizerType::adamw) {
    const std::int64_t elem = static_cast<std::int64_t>(c10::elementSize(master_dtype_));
    std::int64_t need = 0;
    for (const auto& u : units_) need += 3 * round_up(std::max<std::int64_t>(u->plan.owned, 1) * elem, kIoAlignment);
    NvmeStore::check_space(o_.optimizer_nvme_path, need, "zero.offload_optimizer.nvme_path");
    offload_->optimizer_store = std::make_unique<NvmeStore>(o_.optimizer_nvme_path, o_.run_tag + "-optimizer",
                                                            comm_.rank(), o_.aio);
    auto& store = *offload_->optimizer_store;
    for (auto& u : units_) {
      u->region_master = store.add_region("master.swp", u->plan.owned, master_dtype_);
      u->region_exp_avg = store.add_region("exp_avg.swp", u->plan.owned, master_dtype_);
      u->region_exp_avg_sq = store.add_region("exp_avg_sq.swp", u->plan.owned, master_dtype_);
      write_state(*u, 0, u->init_master);
      const at::Tensor zeros = at::zeros({u->plan.owned}, at::TensorOptions().dtype(master_dtype_));
      write_state(*u, 1, zeros);
      write_state(*u, 2, zeros);
      u->init_master = at::Tensor();
    }
    // The sub-group plan: pieces of at most sub_group_size elements, starting on I/O blocks,
    // grouped in unit order until a group holds sub_group_size elements.
    const std::int64_t block = kIoAlignment / elem;
    const std::int64_t group = std::max(block, o_.sub_group_size / block * block);
    std::vector<Offload::Piece> current;
    std::int64_t in_group = 0, buffer_elems = 0;
    auto close = [&] {
      if (current.empty()) return;
      const auto& last = current.back();
      buffer_elems = std::max(buffer_elems, last.buffer_offset + round_up(last.count, block));
      offload_->sub_groups.push_back(std::move(current));
      current.clear();
      in_group = 0;
    };
    for (auto& u : units_) {
      for (std::int64_t first = 0; first < u->plan.owned; first += group) {
        const std::int64_t count = std::min(group, u->plan.owned - first);
        if (in_group > 0 && in_group + count > group) close();
        const std::int64_t offset = current.empty() ? 0 : round_up(current.back().buffer_offset + current.back().count, block);
        current.push_back({u.get(), first, count, offset});
        in_group += count;
      }
    }
    close();
    const std::size_t slots = std::min<std::size_t>(std::max(o_.buffer_count, 3), std::max<std::size_t>(offload_->sub_groups.size(), 1));
    for (std::size_t i = 0; i < slots; ++i)
      offload_->buffers.push_back({aligned_buffer(buffer_elems, master_dtype_), aligned_buffer(buffer_elems, master_dtype_),
                                   aligned_buffer(buffer_elems, master_dtype_)});
    say(store, "optimizer states");
  } else if (o_.offload_optimizer == O::nvme) {
    // Adafactor and 8-bit AdamW: each unit's state goes to files whole (Adafactor's row and column
    // statistics, small, stay in memory) and comes back for the unit's step (step()).
    std::int64_t need = 0;
    const auto fields = [&](Unit& u) {
      std::vector<std::pair<const char*, at::Tensor*>> f = {{"master.swp", &u.master}};
      for (const auto& field : u.optimizer->swappable()) f.push_back(field);
      std::erase_if(f, [](const auto& x) { return !x.second->defined() || x.second->numel() == 0; });
      return f;
    };
    for (auto& u : units_)
      for (const auto& [file, t] : fields(*u)) need += round_up(t->numel() * static_cast<std::int64_t>(t->element_size()), kIoAlignment);
    NvmeStore::check_space(o_.optimizer_nvme_path, need, "zero.offload_optimizer.nvme_path");
    offload_->optimizer_store = std::make_unique<NvmeStore>(o_.optimizer_nvme_path, o_.run_tag + "-optimizer",
                                                            comm_.rank(), o_.aio);
    auto& store = *offload_->optimizer_store;
    for (auto& u : units_) {
      // Each field in an aligned buffer (what the transfers need), then written out like any step's.
      for (const auto& [file, t] : fields(*u)) {
        u->swapped.push_back({t, store.add_region(file, t->numel(), t->scalar_type()), t->numel(), t->scalar_type()});
        at::Tensor buf = aligned_buffer(t->numel(), t->scalar_type());
        buf.copy_(t->reshape({-1}));
        *t = buf;
      }
      swap_out(*u, /*write=*/true);
    }
    say(store, "optimizer states (each unit's whole, in memory for its step)");
  }
  if (o_.offload_param == O::nvme) {
    const std::int64_t elem = static_cast<std::int64_t>(compute_opts_.dtype().itemsize());
    std::int64_t need = 0;
    for (const Unit* u : by_index_)
      if (u->plan.sharded) need += round_up(std::max<std::int64_t>(u->plan.shard, 1) * elem, kIoAlignment);
    NvmeStore::check_space(o_.param_nvme_path, need, "zero.offload_param.nvme_path");
    offload_->param_store = std::make_unique<NvmeStore>(o_.param_nvme_path, o_.run_tag + "-params", comm_.rank(), o_.aio);
    auto& store = *offload_->param_store;
    for (Unit* u : by_index_) {  // frozen shards too
      if (!u->plan.sharded) continue;
      u->region_param = store.add_region("params.swp", u->plan.shard, compute_opts_.dtype().toScalarType());
      u->param_staging = aligned_buffer(u->plan.shard, compute_opts_.dtype().toScalarType());
      u->param_staging.copy_(u->shard_param);
      store.wait(store.write(u->region_param, 0, u->plan.shard, u->param_staging.data_ptr()));
      u->shard_param = at::Tensor();  // from now on the shard lives in the file
    }
    say(store, "parameters");
  }
}

std::vector<std::string> ZeroOptimizer::nvme_dirs() const {
  std::vector<std::string> out;
  if (!offload_) return out;
  if (offload_->optimizer_store) out.push_back(offload_->optimizer_store->dir());
  if (offload_->param_store) out.push_back(offload_->param_store->dir());
  return out;
}

void ZeroOptimizer::begin_swap_in(Unit& u) {
  if (u.swapped.empty() || u.resident || !u.swap_reads.empty()) return;
  auto& store = *offload_->optimizer_store;
  for (const auto& sw : u.swapped) {
    *sw.field = aligned_buffer(sw.numel, sw.dtype);
    u.swap_reads.push_back(store.read(sw.region, 0, sw.numel, sw.field->data_ptr()));
  }
}

void ZeroOptimizer::finish_swap_in(Unit& u) {
  if (u.swapped.empty() || u.resident) return;
  begin_swap_in(u);
  auto& store = *offload_->optimizer_store;
  for (auto t : u.swap_reads) store.wait(t);
  u.swap_reads.clear();
  u.resident = true;
}

void ZeroOptimizer::swap_out(Unit& u, bool write) {
  if (u.swapped.empty() || !u.resident) return;
  if (write) {
    auto& store = *offload_->optimizer_store;
    std::vector<NvmeStore::Ticket> tickets;
    for (const auto& sw : u.swapped) tickets.push_back(store.write(sw.region, 0, sw.numel, sw.field->data_ptr()));
    for (auto t : tickets) store.wait(t);
  }
  for (const auto& sw : u.swapped) *sw.field = at::Tensor();
  u.resident = false;
}

at::Tensor ZeroOptimizer::read_state(Unit& u, int kind) {
  const SwapGuard in(*this, u, /*write=*/false);  // (returned tensors keep their storage)
  const int region = kind == 0 ? u.region_master : kind == 1 ? u.region_exp_avg : u.region_exp_avg_sq;
  if (region < 0) {
    if (kind > 0) return u.optimizer->moment(kind == 1 ? Moment::first : Moment::second);
    return masters_ ? u.master : owned_params(u);
  }
  auto& store = *offload_->optimizer_store;
  at::Tensor buf = aligned_buffer(u.plan.owned, master_dtype_);
  store.wait(store.read(region, 0, u.plan.owned, buf.data_ptr()));
  return buf;
}

void ZeroOptimizer::write_state(Unit& u, int kind, const at::Tensor& values) {
  const int region = kind == 0 ? u.region_master : kind == 1 ? u.region_exp_avg : u.region_exp_avg_sq;
  c10::NoGradGuard no_grad;
  if (region < 0) {
    SwapGuard in(*this, u, /*write=*/true);
    write_state_in_memory(u, kind, values);
    in.finish();
    return;
  }
  auto& store = *offload_->optimizer_store;
  at::Tensor buf = aligned_buffer(u.plan.owned, master_dtype_);
  buf.copy_(values.reshape({-1}));
  store.wait(store.write(region, 0, u.plan.owned, buf.data_ptr()));
}

void ZeroOptimizer::write_state_in_memory(Unit& u, int kind, const at::Tensor& values) {
  if (kind > 0) {
    u.optimizer->set_moment(kind == 1 ? Moment::first : Moment::second, values);
    return;
  }
  (masters_ ? u.master : owned_params(u)).copy_(values);
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

at::Tensor ZeroOptimizer::owned_params(Unit& u) {
  if (!u.plan.sharded) return u.flat_param.narrow(0, u.plan.owned_offset, u.plan.owned);
  if (u.region_param < 0) return u.shard_param;
  auto& store = *offload_->param_store;
  if (u.param_read == 0) u.param_read = store.read(u.region_param, 0, u.plan.shard, u.param_staging.data_ptr());
  store.wait(u.param_read);
  u.param_read = 0;
  return u.param_staging;
}

void ZeroOptimizer::store_owned_params(Unit& u, const at::Tensor& values) {
  if (u.region_param < 0) return;
  if (values.data_ptr() != u.param_staging.data_ptr()) u.param_staging.copy_(values);
  auto& store = *offload_->param_store;
  store.wait(store.write(u.region_param, 0, u.plan.shard, u.param_staging.data_ptr()));
}

at::Tensor ZeroOptimizer::owned_weights(Unit& u) {
  if (masters_ && u.master.defined()) return u.master;
  return owned_params(u);
}

std::size_t ZeroOptimizer::units_stepped() const {
  return static_cast<std::size_t>(std::count_if(units_.begin(), units_.end(), [](const auto& u) { return u->stepped; }));
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

double ZeroOptimizer::clip_grad_norm(double max_norm) {
  c10::NoGradGuard no_grad;
  if (o_.fused_backward) {
    if (norm_known_) return current_norm_;
    // The stepped units' squares were summed as they stepped; the rest are added now.
    double local = fused_norm_sq_;
    for (auto& u : units_)
      if (!u->stepped) local += grad_square_sum(*u).item<double>();
    at::Tensor t = at::full({1}, local, at::kDouble);
    if (!plan_.replicated) comm_.all_reduce(t);
    current_norm_ = std::sqrt(t.item<double>());
    norm_known_ = true;
    (void)max_norm;  // prepare_fused_step's, applied unit by unit
    return current_norm_;
  }
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

void ZeroOptimizer::step_nvme(double lr) {
  // Sub-group k: read (master, m, v) into a slot, update, write back. With at least three slots
  // the read of k+1, the update of k and the write of k-1 run at the same time.
  auto& store = *offload_->optimizer_store;
  auto& groups = offload_->sub_groups;
  const std::size_t slots = offload_->buffers.size(), n = groups.size();
  std::vector<std::vector<NvmeStore::Ticket>> reads(n), writes(n);
  auto transfer = [&](std::size_t k, bool write) {
    std::vector<NvmeStore::Ticket> tickets;
    auto& buf = offload_->buffers[k % slots];
    for (const auto& piece : groups[k]) {
      const int regions[3] = {piece.unit->region_master, piece.unit->region_exp_avg, piece.unit->region_exp_avg_sq};
      for (int kind = 0; kind < 3; ++kind) {
        auto* ptr = static_cast<char*>(buf[kind].data_ptr()) + piece.buffer_offset * buf[kind].element_size();
        tickets.push_back(write ? store.write(regions[kind], piece.first, piece.count, ptr)
                                : store.read(regions[kind], piece.first, piece.count, ptr));
      }
    }
    return tickets;
  };
  auto wait_all = [&](std::vector<NvmeStore::Ticket>& tickets) {
    for (auto t : tickets) store.wait(t);
    tickets.clear();
  };
  std::vector<Unit*> touched_params;
  if (n > 0) reads[0] = transfer(0, false);
  for (std::size_t k = 0; k < n; ++k) {
    if (k + 1 < n) {
      if (k + 1 >= slots) wait_all(writes[k + 1 - slots]);  // that slot's last write
      reads[k + 1] = transfer(k + 1, false);
    }
    wait_all(reads[k]);
    auto& buf = offload_->buffers[k % slots];
    for (const auto& piece : groups[k]) {
      Unit& u = *piece.unit;
      // Stage 3 NVMe shards: read once per step, written back after the loop.
      const bool seen = std::find(touched_params.begin(), touched_params.end(), &u) != touched_params.end();
      at::Tensor p = seen ? u.param_staging : owned_params(u);
      if (u.region_param >= 0 && !seen) touched_params.push_back(&u);
      adam_master(buf[0].narrow(0, piece.buffer_offset, piece.count), buf[1].narrow(0, piece.buffer_offset, piece.count),
                  buf[2].narrow(0, piece.buffer_offset, piece.count), step_grad(u).narrow(0, piece.first, piece.count),
                  adam_, lr * u.lr_scale, step_, p.narrow(0, piece.first, piece.count));
    }
    writes[k] = transfer(k, true);
  }
  for (auto& w : writes) wait_all(w);
  for (Unit* u : touched_params) store_owned_params(*u, u->param_staging);
}

void ZeroOptimizer::step(double lr) {
  if (!grads_reduced_) reduce_gradients();
  c10::NoGradGuard no_grad;
  finish_gathers();  // (normally done by the forward hooks already)
  if (o_.fused_backward) {
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
    return;
  }
  ++step_;
  if (o_.delayed_update && step_ > o_.delayed_update_warmup) {
    // The update computed while this step's forward and backward ran goes into the weights (the
    // next forward uses them: the masters of step t−1); this step's gradients move aside and
    // their update is computed on a host thread while the device runs the next step.
    join_delayed();
    write_delayed();
    for (auto& u : units_) {
      u->delayed_held = u->grad_held;
      if (u->grad_held) {
        // A held bf16 gradient moves aside as it is (its buffer swapped for a second one of the
        // same kind); the float32 copy stays clean.
        if (!u->delayed_host.defined())
          u->delayed_host = at::empty({u->plan.owned}, u->grad_host.options().pinned_memory(u->grad_host.is_pinned()));
        std::swap(u->grad_host, u->delayed_host);
        u->delayed_scale = u->held_scale;
        u->grad_held = false;
        continue;
      }
      if (u->shard_grad.defined() && u->shard_grad.is_cpu()) {
        if (!u->delayed_grad.defined()) u->delayed_grad = at::zeros_like(u->shard_grad);
        std::swap(u->shard_grad, u->delayed_grad);  // (zero_grad clears the other for the next step)
      } else {
        if (!u->delayed_grad.defined()) u->delayed_grad = at::empty({u->plan.owned}, state_opts_);
        u->delayed_grad.copy_(step_grad(*u));
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
    return;
  }
  if (o_.offload_optimizer == ZeroOptions::Offload::nvme && o_.optimizer == OptimizerType::adamw) {
    step_nvme(lr);  // AdamW: sub-groups streamed through the staging buffers
  } else {
    // In memory; lean optimizers on NVMe bring each unit's state in for its step, the next
    // unit's reads under way while this one steps.
    for (std::size_t k = 0; k < units_.size(); ++k) {
      Unit& u = *units_[k];
      finish_swap_in(u);
      if (k + 1 < units_.size()) begin_swap_in(*units_[k + 1]);
      step_in_memory(u, lr);
      swap_out(u, /*write=*/true);
    }
  }
  copies_->join();  // the new weights on their way up, before anything computes with them
  gather_whole_units(plan_.overlap_comm);
  grads_reduced_ = false;  // (the reduced gradients are cleared by the next zero_grad)
}

void ZeroOptimizer::compute_delayed(Unit& u, double lr, std::int64_t step) {
  const double unit_lr = lr * u.lr_scale;
  // (8-bit AdamW's large units ignore the scale: only AdamW holds bf16 gradients.)
  if (u.delayed_held) u.optimizer->step({u.master, u.delayed_host, unit_lr, step, u.delayed_scale});
  else u.optimizer->step({u.master, u.delayed_grad, unit_lr, step});
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
    b.parameters += u->plan.sharded ? (o_.offload_param == ZeroOptions::Offload::none ? bytes(u->shard_param) : 0)
                               : bytes(u->flat_param);
  for (const auto& u : units_) {
    // The full buffer backward accumulates into (units whose hook does not take the gradients;
    // at stages 2-3 it is freed after each reduction and comes back at zero_grad, so it counts),
    // then the rank's reduced part when it lives on the device.
    if (!u->plan.hook_grads) b.gradients += u->plan.padded * static_cast<std::int64_t>(c10::elementSize(compute_opts_.dtype().toScalarType()));
    if (on_device && u->shard_grad.defined()) b.gradients += bytes(u->shard_grad);
    if (on_device) b.optimizer_states += optimizer_bytes(*u);
  }
  return b;
}

OffloadedBytes ZeroOptimizer::offloaded() const {
  OffloadedBytes b;
  if (o_.offload_optimizer != ZeroOptions::Offload::none)
    for (const auto& u : units_) {
      b.gradients += bytes(u->shard_grad);
      // Held bf16 gradients: the buffer they land in (made by the first deposit).
      if (hold_bf16_grads_ && u->grad_copy && u->plan.reduce_scatter)
        b.gradients += u->grad_host.defined() ? bytes(u->grad_host) : 2 * u->plan.owned;
      b.optimizer_states += optimizer_bytes(*u);
    }
  if (o_.offload_param == ZeroOptions::Offload::cpu)
    for (const Unit* u : by_index_) b.parameters += u->plan.sharded ? bytes(u->shard_param) : 0;
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
    u->ema.lerp_((delayed_pending_ ? owned_params(*u) : owned_weights(*u)).detach().to(at::kCPU, at::kFloat), 1.0 - ema_decay_);
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
    if (delayed_pending_) out.emplace_back(u->name + "/lagged", owned_params(*u).to(at::kCPU).to(opts).contiguous().clone());
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
  join_delayed();
  c10::NoGradGuard no_grad;
  delayed_pending_ = with_lagged;  // the next step writes the saved masters into the weights
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
  for (const auto& u : units_) n += bytes(u->ema);
  return n;
}

}  // namespace zs::zero
