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

#include <stdexcept>

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

/// softmax(q kᵀ / √d + mask) v over [B, H, N, d] tensors; `mask` may be undefined (no mask).
/// Only callable where kHasFusedAttention (1.13 throws std::logic_error).
inline at::Tensor scaled_dot_product_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                               const at::Tensor& mask) {
#if ZS_TORCH_AT_LEAST(2, 0)
  return mask.defined() ? at::scaled_dot_product_attention(q, k, v, mask) : at::scaled_dot_product_attention(q, k, v);
#else
  (void)q, (void)k, (void)v, (void)mask;
  throw std::logic_error("scaled_dot_product_attention needs LibTorch 2.0 or newer (this build has " TORCH_VERSION ")");
#endif
}

}  // namespace zs::compat
