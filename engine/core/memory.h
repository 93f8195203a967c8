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

/// Tells glibc's malloc to keep freed memory for reuse instead of returning it to the system:
/// blocks up to 32 MiB come from the heap (not fresh mmaps) and the heap is not trimmed. A
/// training step frees and reallocates the same buffers every time, and pages handed back fault
/// in again on the next step (11 µs a page on our VMs: ZeRO-2 on 2 ranks spent 1.2 of its 1.85 s
/// backward in page faults). Resident memory then stays at the step's high-water mark. Once per
/// process; a no-op where the C library is not glibc.
void keep_freed_memory();

}  // namespace zs
