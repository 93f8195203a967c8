#pragma once
// Process and device memory figures for the metrics events.

#include <cstdint>

namespace zs {

/// Resident set size of this process in bytes (0 where /proc is unavailable).
std::int64_t process_rss_bytes();

/// CUDA caching-allocator figures of the current device, all 0 without CUDA.
struct GpuMemory {
  std::int64_t allocated = 0;
  std::int64_t reserved = 0;
  std::int64_t peak = 0;
};
GpuMemory gpu_memory(int device_index);
/// Starts a new peak for gpu_memory(device_index).peak (nothing without CUDA).
void reset_gpu_peak(int device_index);

/// Total memory of CUDA device `device_index` in bytes; 0 without CUDA or such a device.
std::int64_t gpu_total_bytes(int device_index);

/// Physical memory of this machine in bytes (0 where it cannot be read).
std::int64_t physical_memory_bytes();

}  // namespace zs
