#pragma once
// Counts the bytes LibTorch allocates on the CPU (it keeps no CPU statistics of its own), by
// wrapping the CPU allocator through c10::SetCPUAllocator while an instance is alive. Used to
// measure activation memory (activation checkpointing tests, the estimator's calibration).

#include <atomic>
#include <cstdint>
#include <memory>

namespace zs {

class CpuAllocationCounter {
 public:
  /// Installs the counting allocator; tensors allocated from now on are counted until freed.
  CpuAllocationCounter();
  /// Puts the previous allocator back (tensors it counted stay valid and are freed correctly).
  ~CpuAllocationCounter();
  CpuAllocationCounter(const CpuAllocationCounter&) = delete;
  CpuAllocationCounter& operator=(const CpuAllocationCounter&) = delete;

  /// Bytes counted and not yet freed.
  std::int64_t current() const;
  /// Highest current() since construction or the last reset_peak().
  std::int64_t peak() const;
  /// Restarts the peak at current().
  void reset_peak();

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace zs
