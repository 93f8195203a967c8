// ZeroOptimizer with NVMe offload: the files (one store for the optimizer state, one for stage-3
// parameter shards), AdamW's sub-group pipeline (reads, updates and writes of consecutive
// sub-groups in flight together), the lean optimizers' whole-unit swaps around their step, and
// the state and parameter reads and writes that go to files or memory.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <map>
#include <utility>

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include "core/copy_stream.h"
#include "core/error.h"
#include "zero/zero_schedules.h"

namespace zs::zero {

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
      NvmeUnit& n = nvme_state(*u);
      n.region_master = store.add_region("master.swp", u->plan.owned, master_dtype_);
      n.region_exp_avg = store.add_region("exp_avg.swp", u->plan.owned, master_dtype_);
      n.region_exp_avg_sq = store.add_region("exp_avg_sq.swp", u->plan.owned, master_dtype_);
      write_state(*u, 0, n.init_master);
      const at::Tensor zeros = at::zeros({u->plan.owned}, at::TensorOptions().dtype(master_dtype_));
      write_state(*u, 1, zeros);
      write_state(*u, 2, zeros);
      n.init_master = at::Tensor();
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
        nvme_state(*u).swapped.push_back({t, store.add_region(file, t->numel(), t->scalar_type()), t->numel(), t->scalar_type()});
        at::Tensor buf = aligned_buffer(t->numel(), t->scalar_type());
        buf.copy_(t->reshape({-1}));
        *t = buf;
      }
      swap_out(*u, /*write=*/true);
    }
    say(store, "optimizer states (each unit's whole, in memory for its step)");
  }
  if (o_.offload_param == O::nvme) {
    std::int64_t need = 0;
    for (const Unit* u : by_index_)
      if (u->plan.sharded)
        need += round_up(std::max<std::int64_t>(u->plan.shard, 1) * static_cast<std::int64_t>(u->flat_opts.dtype().itemsize()),
                         kIoAlignment);
    NvmeStore::check_space(o_.param_nvme_path, need, "zero.offload_param.nvme_path");
    offload_->param_store = std::make_unique<NvmeStore>(o_.param_nvme_path, o_.run_tag + "-params", comm_.rank(), o_.aio);
    auto& store = *offload_->param_store;
    for (Unit* u : by_index_) {  // frozen shards too
      if (!u->plan.sharded) continue;
      NvmeUnit& n = nvme_state(*u);
      n.region_param = store.add_region("params.swp", u->plan.shard, u->flat_opts.dtype().toScalarType());
      store_owned_params(*u, u->shard_param);
      u->shard_param = at::Tensor();  // from now on the shard lives in the file
    }
    say(store, "parameters");
  }
}

ZeroOptimizer::NvmeUnit& ZeroOptimizer::nvme_state(Unit& u) {
  if (!u.nvme) u.nvme = std::make_unique<NvmeUnit>();
  return *u.nvme;
}

int ZeroOptimizer::state_region(const Unit& u, int kind) {
  if (!u.nvme) return -1;
  return kind == 0 ? u.nvme->region_master : kind == 1 ? u.nvme->region_exp_avg : u.nvme->region_exp_avg_sq;
}

std::vector<std::string> ZeroOptimizer::nvme_dirs() const {
  std::vector<std::string> out;
  if (!offload_) return out;
  if (offload_->optimizer_store) out.push_back(offload_->optimizer_store->dir());
  if (offload_->param_store) out.push_back(offload_->param_store->dir());
  return out;
}

void ZeroOptimizer::begin_swap_in(Unit& u) {
  if (!u.nvme || u.nvme->swapped.empty() || u.nvme->resident || !u.nvme->swap_reads.empty()) return;
  NvmeUnit& n = *u.nvme;
  auto& store = *offload_->optimizer_store;
  for (const auto& sw : n.swapped) {
    *sw.field = aligned_buffer(sw.numel, sw.dtype);
    n.swap_reads.push_back(store.read(sw.region, 0, sw.numel, sw.field->data_ptr()));
  }
}

void ZeroOptimizer::finish_swap_in(Unit& u) {
  if (!u.nvme || u.nvme->swapped.empty() || u.nvme->resident) return;
  begin_swap_in(u);
  NvmeUnit& n = *u.nvme;
  auto& store = *offload_->optimizer_store;
  for (auto t : n.swap_reads) store.wait(t);
  n.swap_reads.clear();
  n.resident = true;
}

void ZeroOptimizer::swap_out(Unit& u, bool write) {
  if (!u.nvme || u.nvme->swapped.empty() || !u.nvme->resident) return;
  NvmeUnit& n = *u.nvme;
  if (write) {
    auto& store = *offload_->optimizer_store;
    std::vector<NvmeStore::Ticket> tickets;
    for (const auto& sw : n.swapped) tickets.push_back(store.write(sw.region, 0, sw.numel, sw.field->data_ptr()));
    for (auto t : tickets) store.wait(t);
  }
  for (const auto& sw : n.swapped) *sw.field = at::Tensor();
  n.resident = false;
}

at::Tensor ZeroOptimizer::read_state(Unit& u, int kind) {
  const SwapGuard in(*this, u, /*write=*/false);  // (returned tensors keep their storage)
  const int region = state_region(u, kind);
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
  const int region = state_region(u, kind);
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

void ZeroOptimizer::read_owned_params(Unit& u) {
  NvmeUnit& n = *u.nvme;
  if (n.param_read != 0) return;
  // A staging buffer only while a read is under way or its caller holds it: the shards live in
  // the file, so host memory holds the few units in flight, not every shard (which would make
  // NVMe offload no cheaper than CPU offload).
  n.param_staging = aligned_buffer(u.plan.shard, u.flat_opts.dtype().toScalarType());
  n.param_read = offload_->param_store->read(n.region_param, 0, u.plan.shard, n.param_staging.data_ptr());
}

at::Tensor ZeroOptimizer::owned_params(Unit& u) {
  if (!u.plan.sharded) return u.flat_param.narrow(0, u.plan.owned_offset, u.plan.owned);
  if (!u.nvme || u.nvme->region_param < 0) return u.shard_param;
  NvmeUnit& n = *u.nvme;
  read_owned_params(u);
  offload_->param_store->wait(n.param_read);
  n.param_read = 0;
  // The caller holds the only reference: the buffer goes when it drops it. Writing into it changes
  // nothing until store_owned_params.
  at::Tensor out = std::move(n.param_staging);
  n.param_staging = at::Tensor();
  return out;
}

void ZeroOptimizer::store_owned_params(Unit& u, const at::Tensor& values) {
  if (!u.nvme || u.nvme->region_param < 0) return;
  auto& store = *offload_->param_store;
  const at::ScalarType dtype = u.flat_opts.dtype().toScalarType();
  const std::int64_t bytes = u.plan.shard * static_cast<std::int64_t>(c10::elementSize(dtype));
  // A buffer owned_params lent (aligned, whole blocks long) is written as it is; anything else
  // through an aligned copy.
  const bool direct = values.device().is_cpu() && values.scalar_type() == dtype && values.is_contiguous() &&
                      values.numel() == u.plan.shard && reinterpret_cast<std::uintptr_t>(values.data_ptr()) % kIoAlignment == 0 &&
                      static_cast<std::int64_t>(values.storage().nbytes()) -
                              (static_cast<const char*>(values.data_ptr()) - static_cast<const char*>(values.storage().data())) >=
                          (bytes + kIoAlignment - 1) / kIoAlignment * kIoAlignment;
  at::Tensor source = values;
  if (!direct) {
    source = aligned_buffer(u.plan.shard, dtype);
    source.copy_(values.reshape({-1}));
  }
  store.wait(store.write(u.nvme->region_param, 0, u.plan.shard, source.data_ptr()));
}

void ZeroOptimizer::NvmeSchedule::step(double lr) {
  ++z_.step_;
  // Sub-group k: read (master, m, v) into a slot, update, write back. With at least three slots
  // the read of k+1, the update of k and the write of k-1 run at the same time.
  auto& store = *z_.offload_->optimizer_store;
  auto& groups = z_.offload_->sub_groups;
  const std::size_t slots = z_.offload_->buffers.size(), n = groups.size();
  std::vector<std::vector<NvmeStore::Ticket>> reads(n), writes(n);
  auto transfer = [&](std::size_t k, bool write) {
    std::vector<NvmeStore::Ticket> tickets;
    auto& buf = z_.offload_->buffers[k % slots];
    for (const auto& piece : groups[k]) {
      const NvmeUnit& n = *piece.unit->nvme;
      const int regions[3] = {n.region_master, n.region_exp_avg, n.region_exp_avg_sq};
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
  // Stage 3 NVMe shards: read at a unit's first piece, written back after its last one.
  std::map<Unit*, std::size_t> last_group;
  for (std::size_t k = 0; k < n; ++k)
    for (const auto& piece : groups[k])
      if (piece.unit->nvme->region_param >= 0) last_group[piece.unit] = k;
  std::map<Unit*, at::Tensor> touched_params;
  if (n > 0) reads[0] = transfer(0, false);
  for (std::size_t k = 0; k < n; ++k) {
    if (k + 1 < n) {
      if (k + 1 >= slots) wait_all(writes[k + 1 - slots]);  // that slot's last write
      reads[k + 1] = transfer(k + 1, false);
    }
    wait_all(reads[k]);
    auto& buf = z_.offload_->buffers[k % slots];
    for (const auto& piece : groups[k]) {
      Unit& u = *piece.unit;
      at::Tensor p;
      if (u.nvme->region_param < 0) p = z_.owned_params(u);
      else if (auto it = touched_params.find(&u); it != touched_params.end()) p = it->second;
      else p = touched_params[&u] = z_.owned_params(u);
      adam_master(buf[0].narrow(0, piece.buffer_offset, piece.count), buf[1].narrow(0, piece.buffer_offset, piece.count),
                  buf[2].narrow(0, piece.buffer_offset, piece.count), z_.step_grad(u).narrow(0, piece.first, piece.count),
                  z_.adam_, lr * u.lr_scale, z_.step_, p.narrow(0, piece.first, piece.count));
    }
    writes[k] = transfer(k, true);
    for (auto it = touched_params.begin(); it != touched_params.end();) {
      if (last_group.at(it->first) != k) {
        ++it;
        continue;
      }
      z_.store_owned_params(*it->first, it->second);
      it = touched_params.erase(it);
    }
  }
  for (auto& w : writes) wait_all(w);
}

}  // namespace zs::zero
