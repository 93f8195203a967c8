#include "core/memory.h"

#include <cstdio>

#include <unistd.h>

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
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device_index);
    const auto agg = static_cast<std::size_t>(c10::cuda::CUDACachingAllocator::StatType::AGGREGATE);
    m.allocated = stats.allocated_bytes[agg].current;
    m.reserved = stats.reserved_bytes[agg].current;
    m.peak = stats.allocated_bytes[agg].peak;
  }
#else
  (void)device_index;
#endif
  return m;
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

}  // namespace zs
