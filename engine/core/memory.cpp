#include "core/memory.h"

#include <climits>
#include <cstdio>
#include <mutex>

#include <unistd.h>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

#ifdef ZS_WITH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <cuda_runtime_api.h>
#endif

namespace zs {

std::int64_t process_rss_bytes() {
  std::FILE* f = std::fopen("/proc/self/statm", "r");
  if (!f) return 0;
  long long size = 0, resident = 0;
  const int n = std::fscanf(f, "%lld %lld", &size, &resident);
  std::fclose(f);
  return n == 2 ? resident * static_cast<std::int64_t>(sysconf(_SC_PAGESIZE)) : 0;
}

GpuMemory gpu_memory(int device_index) {
  GpuMemory m;
#ifdef ZS_WITH_CUDA
  if (device_index >= 0) {
    // LibTorch 2.x moved DeviceStats and StatType to c10::CachingDeviceAllocator (the CUDA
    // namespace re-exports DeviceStats only); index 0 is the aggregate in every version.
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(static_cast<c10::DeviceIndex>(device_index));
    constexpr std::size_t kAggregate = 0;
    m.allocated = stats.allocated_bytes[kAggregate].current;
    m.reserved = stats.reserved_bytes[kAggregate].current;
    m.peak = stats.allocated_bytes[kAggregate].peak;
  }
#else
  (void)device_index;
#endif
  return m;
}

void reset_gpu_peak(int device_index) {
#ifdef ZS_WITH_CUDA
  if (device_index >= 0) c10::cuda::CUDACachingAllocator::resetPeakStats(static_cast<c10::DeviceIndex>(device_index));
#else
  (void)device_index;
#endif
}

std::int64_t gpu_total_bytes(int device_index) {
#ifdef ZS_WITH_CUDA
  if (device_index < 0 || device_index >= static_cast<int>(c10::cuda::device_count())) return 0;
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, device_index) != cudaSuccess) return 0;
  return static_cast<std::int64_t>(prop.totalGlobalMem);
#else
  (void)device_index;
  return 0;
#endif
}

std::int64_t physical_memory_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? static_cast<std::int64_t>(pages) * page : 0;
}

void keep_freed_memory() {
#if defined(__GLIBC__)
  static std::once_flag once;
  std::call_once(once, [] {
    mallopt(M_MMAP_THRESHOLD, 32 << 20);  // glibc's largest; fixing it also ends the dynamic threshold
    mallopt(M_TRIM_THRESHOLD, INT_MAX);
  });
#endif
}

}  // namespace zs
