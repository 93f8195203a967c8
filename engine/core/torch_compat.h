#pragma once
// What differs between the LibTorch versions ZeroStudio builds against, in one place: Debian's
// LibTorch 1.13 (`make test`, CPU only) and the LibTorch inside PyTorch 2.x's wheels
// (`make test-torch2` and every GPU user, with CUDA). Code elsewhere asks these names and never
// tests TORCH_VERSION_* itself (tests/source_rules.cmake fails the build's tests where it does).
//
// Differences that need no wrapper, because the code is written to the part both versions share:
// - c10d: ProcessGroupGloo/ProcessGroupNCCL derive from ProcessGroup in 1.13 and from Backend in
//   2.x; comm/communicator.cpp holds them through a template over the group class and calls only
//   the collectives both have (allreduce, allgather, send, recv, barrier, ...).
// - The CUDA caching allocator's DeviceStats moved to c10::CachingDeviceAllocator in 2.x; the CUDA
//   namespace still re-exports getDeviceStats, and core/memory.cpp reads its result through `auto`.

#include <cstdlib>
#include <cstring>
#include <stdexcept>

#include <ATen/Context.h>
#include <ATen/core/Tensor.h>
#include <torch/version.h>

/// True when the LibTorch being compiled against is at least major.minor.
#define ZS_TORCH_AT_LEAST(major, minor) \
  (TORCH_VERSION_MAJOR > (major) || (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR >= (minor)))

/// LibTorch 2.3 made c10::Allocator::allocate non-const (and added copy_data): an allocator that
/// overrides allocate writes `allocate(std::size_t n) ZS_ALLOCATOR_ALLOCATE_CONST override`.
#if ZS_TORCH_AT_LEAST(2, 3)
#define ZS_ALLOCATOR_ALLOCATE_CONST
#else
#define ZS_ALLOCATOR_ALLOCATE_CONST const
#endif

#if ZS_TORCH_AT_LEAST(2, 0)
#include <ATen/ops/scaled_dot_product_attention.h>
#endif

namespace zs::compat {

/// LibTorch 2.0 added at::scaled_dot_product_attention (fused flash/memory-efficient kernels on CUDA).
inline constexpr bool kHasFusedAttention = ZS_TORCH_AT_LEAST(2, 0);

/// Keeps at::scaled_dot_product_attention off cuDNN's attention kernels for this process (it then
/// picks flash or memory-efficient attention, as before PyTorch preferred cuDNN on Hopper).
/// Issue 58, H200, PyTorch 2.11.0+cu130: Flux.1's joint attention (24 heads of 128, 4,608 tokens,
/// bf16) failed in cuDNN's attention backward with an illegal memory access, and compute-sanitizer
/// reported out-of-bounds accesses inside it at one block of each kind. ZEROSTUDIO_CUDNN_ATTENTION=1
/// leaves PyTorch's choice alone (to check a newer PyTorch or cuDNN).
inline void avoid_cudnn_attention() {
#if ZS_TORCH_AT_LEAST(2, 3)
  static const bool done = [] {
    const char* allow = std::getenv("ZEROSTUDIO_CUDNN_ATTENTION");
    if (!allow || std::strcmp(allow, "1") != 0) at::globalContext().setSDPUseCuDNN(false);
    return true;
  }();
  (void)done;
#endif
}

/// Whether at::scaled_dot_product_attention may still choose cuDNN's kernels in this process
/// (LibTorch before 2.3 has none to choose).
inline bool cudnn_attention_allowed() {
#if ZS_TORCH_AT_LEAST(2, 3)
  return at::globalContext().userEnabledCuDNNSDP();
#else
  return false;
#endif
}

/// softmax(q kᵀ / √d + mask) v over [B, H, N, d] tensors; `mask` may be undefined (no mask).
/// Only callable where kHasFusedAttention (1.13 throws std::logic_error). On CUDA never cuDNN's
/// kernels (avoid_cudnn_attention).
inline at::Tensor scaled_dot_product_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                               const at::Tensor& mask) {
#if ZS_TORCH_AT_LEAST(2, 0)
  if (q.is_cuda()) avoid_cudnn_attention();
  return mask.defined() ? at::scaled_dot_product_attention(q, k, v, mask) : at::scaled_dot_product_attention(q, k, v);
#else
  (void)q, (void)k, (void)v, (void)mask;
  throw std::logic_error("scaled_dot_product_attention needs LibTorch 2.0 or newer (this build has " TORCH_VERSION ")");
#endif
}

}  // namespace zs::compat
