#pragma once
// ZeroOptimizer's per-unit bookkeeping, shared by its .cpp files: zero_optimizer.cpp (flattening,
// gathers, hooks), zero_reduce.cpp (gradient reductions), zero_step.cpp (the step in memory),
// the schedules (zero_schedules.h) and zero_checkpoint.cpp (state, checkpoints, EMA). Not a
// public header.

#include <array>
#include <cstdint>
#include <exception>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>

#include "core/copy_stream.h"
#include "comm/communicator.h"
#include "zero/unit_optimizer.h"
#include "zero/nvme_store.h"
#include "zero/zero_optimizer.h"

namespace zs::zero {

/// Bytes a tensor holds (0 when undefined).
inline std::int64_t tensor_bytes(const at::Tensor& t) {
  return t.defined() ? t.numel() * static_cast<std::int64_t>(t.element_size()) : 0;
}

/// NVMe offload's per-unit state (zero_nvme.cpp): its regions in the stores (-1: none), a
/// parameter shard's staging buffer while its read is under way (owned_params() hands it over),
/// and the lean optimizers' swapped state.
struct ZeroOptimizer::NvmeUnit {
  int region_master = -1, region_exp_avg = -1, region_exp_avg_sq = -1, region_param = -1;
  at::Tensor param_staging;
  NvmeStore::Ticket param_read = 0;
  // A lean optimizer's state tensors that live in files between steps (fields of its
  // UnitOptimizer, or the unit's master), their regions, whether they are in memory now, and the
  // reads under way.
  struct Swapped {
    at::Tensor* field;
    int region;
    std::int64_t numel;
    at::ScalarType dtype;
  };
  std::vector<Swapped> swapped;
  bool resident = true;
  std::vector<NvmeStore::Ticket> swap_reads;
  at::Tensor init_master;  // construction only: AdamW's owned weights in master precision, for its file
};

struct ZeroOptimizer::Unit {
  std::string name;
  double lr_scale = 1.0;     // the unit's learning rate relative to step()'s
  bool frozen = false;       // not trained: only laid out, moved, sharded and gathered
  UnitPlan plan;             // how the plan treats it (zero_plan.h): layout, sharding, reductions
  bool hooked = false;             // the model's forward reaches it through a unit hook
  std::unique_ptr<comm::PendingCollective> post_gather;  // its gather after the step, still running
  std::vector<std::pair<std::string, at::Tensor>> params;  // views into flat_param
  std::vector<std::int64_t> offsets;
  std::vector<std::int64_t> sizes;                   // elements per parameter
  std::vector<std::vector<std::int64_t>> shapes;     // shapes (stage 3 empties the tensors)
  // A frozen unit holding quantized weights (ParamUnit::raw) is laid out in bytes: offsets, sizes,
  // numel and the plan count bytes, each parameter in its dtype here (raw ones their own, the
  // rest the compute dtype). Empty: every parameter in flat_opts' dtype.
  std::vector<at::ScalarType> dtypes;
  at::TensorOptions flat_opts;  // flat_param's and shard_param's dtype and device
  std::int64_t numel = 0;    // real elements
  at::Tensor flat_param;     // [padded] compute dtype (stage 3 sharded units: only while gathered)
  at::Tensor shard_param;    // [shard] stage 3 sharded units: this rank's parameters (CPU with
                             // param offload; undefined with NVMe, where they live in a file)
  at::Tensor flat_grad;      // [padded] full gradients, compute dtype (freed after a stage 2 reduction)
  bool grad_copy = false;    // the unit keeps a reduced copy (shard_grad), made by grad_copy() on first use
  at::Tensor shard_grad;     // [owned] the rank's reduced gradients, where the step reads them
                             // (stages 2-3: compute dtype, as ZeRO counts them; with optimizer
                             // offload, every stage: fp32 on the CPU)
  at::Tensor master;         // [owned] fp32 master weights (mixed precision / offload; not NVMe)
  std::unique_ptr<UnitOptimizer> optimizer;  // its state and update (AdamW, 8-bit AdamW, Adafactor)
  std::unique_ptr<comm::PendingCollective> pending;  // a gradient reduction under way
  bool reduced = false;                               // its gradients were reduced in this step
  at::Tensor part;                                    // its reduce-scatter output (stage 2/3)
  at::Tensor ema;                                     // CPU, float32: EMA of the owned slice
  at::Tensor ema_saved;                               // live owned params while the EMA is swapped in
  std::unique_ptr<comm::PendingCollective> gathering; // stage 3: a prefetch under way into flat_param
  at::Tensor gather_source;                           // what that prefetch sends (kept alive)
  std::unique_ptr<NvmeUnit> nvme;        // NVMe offload's state of the unit (none without)
  // Side-stream copies (CUDA): pinned staging buffers and the fences of the copies under way.
  at::Tensor grad_host;           // [owned] a reduced gradient on its way to the CPU shard_grad
  CopyStream::Fence grad_fence;   // its device-to-host copy
  bool grad_pending = false;      // grad_host still has to go into shard_grad
  bool grad_accumulate = false;   // ... added (with grad_scale) or copied
  double grad_scale = 1.0;
  // Offloaded AdamW under bf16 (issue 38's host pipeline): a step's only gradient deposit stays
  // where it landed, bf16 in grad_host, times held_scale, and the fused step reads it there
  // instead of it being added into the float32 shard_grad first (step_grad adds it where a
  // reader needs the float32 buffer).
  bool grad_held = false;
  double held_scale = 1.0;
  bool shard_grad_clean = true;   // shard_grad holds zeros (nothing added since zero_grad)
  at::Tensor param_host;          // [owned] the CPU step's new weights on their way to the device
  CopyStream::Fence param_fence;  // its host-to-device copy
  CopyStream::Fence gather_fence; // stage 3: an offloaded shard's prefetch (copy up and gather)
};

/// A unit's swapped state in memory for a scope (nothing when it has none or is in already);
/// written back at the end when `write`. Errors of the write-back are thrown by finish().
struct ZeroOptimizer::SwapGuard {
  SwapGuard(ZeroOptimizer& opt, Unit& u, bool write) : opt_(opt), u_(u), write_(write) {
    if (!u.nvme || u.nvme->swapped.empty() || u.nvme->resident) return;
    opt.begin_swap_in(u);
    opt.finish_swap_in(u);
    active_ = true;
  }
  /// Writes back (when asked) and frees now.
  void finish() {
    if (!active_) return;
    active_ = false;
    opt_.swap_out(u_, write_);
  }
  ~SwapGuard() {
    if (!active_) return;
    try {
      opt_.swap_out(u_, write_ && std::uncaught_exceptions() == 0);
    } catch (...) {
      // a failed write-back during unwinding: the first error is the one reported
    }
  }
  SwapGuard(const SwapGuard&) = delete;
  SwapGuard& operator=(const SwapGuard&) = delete;

 private:
  ZeroOptimizer& opt_;
  Unit& u_;
  bool write_;
  bool active_ = false;
};

/// The NVMe side: one store per kind of data, the sub-group plan and its staging buffers.
struct ZeroOptimizer::Offload {
  std::unique_ptr<NvmeStore> optimizer_store, param_store;
  struct Piece {
    Unit* unit;
    std::int64_t first, count;  // owned elements [first, first + count) of the unit
    std::int64_t buffer_offset; // where they sit in a staging buffer (aligned)
  };
  std::vector<std::vector<Piece>> sub_groups;
  std::vector<std::array<at::Tensor, 3>> buffers;  // per pipeline slot: master, exp_avg, exp_avg_sq
};

}  // namespace zs::zero
