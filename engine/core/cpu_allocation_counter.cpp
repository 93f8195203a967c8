#include "core/cpu_allocation_counter.h"

#include <cstring>
#include <mutex>
#include <unordered_map>

#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>

#include "core/error.h"
#include "core/torch_compat.h"

namespace zs {

namespace {
// Above LibTorch's own registrations, so ours wins while installed.
constexpr std::uint8_t kPriority = 200;

// Some kernels (oneDNN) need data pointer == context and a raw deleter, so blocks are tracked
// by address. The table outlives every counter: blocks may be freed after it is gone.
struct Table {
  std::mutex mutex;
  std::unordered_map<void*, std::size_t> sizes;
  c10::DeleterFnPtr inner_delete = nullptr;
  std::atomic<std::int64_t> current{0}, peak{0};
};
Table& table() {
  static Table* t = new Table();  // never destroyed: deleters may run during static destruction
  return *t;
}

void counted_delete(void* ptr) {
  Table& t = table();
  std::size_t n = 0;
  {
    std::lock_guard<std::mutex> lock(t.mutex);
    auto it = t.sizes.find(ptr);
    if (it != t.sizes.end()) {
      n = it->second;
      t.sizes.erase(it);
    }
  }
  t.current.fetch_sub(static_cast<std::int64_t>(n));
  t.inner_delete(ptr);
}

}  // namespace

struct CpuAllocationCounter::Impl final : public c10::Allocator {
  c10::Allocator* inner = nullptr;

  c10::DataPtr allocate(std::size_t n) ZS_ALLOCATOR_ALLOCATE_CONST override {
    Table& t = table();
    c10::DataPtr d = inner->allocate(n);
    void* data = d.release_context();  // the default allocator's context is the pointer itself
    const std::int64_t now = t.current.fetch_add(static_cast<std::int64_t>(n)) + static_cast<std::int64_t>(n);
    for (std::int64_t p = t.peak.load(); now > p && !t.peak.compare_exchange_weak(p, now);) {
    }
    {
      std::lock_guard<std::mutex> lock(t.mutex);
      t.sizes[data] = n;
    }
    return {data, data, &counted_delete, d.device()};
  }

  c10::DeleterFnPtr raw_deleter() const override { return &counted_delete; }

  // LibTorch >= 2.3 declares this pure virtual; older ones do not have it.
  void copy_data(void* dest, const void* src, std::size_t count) const { std::memcpy(dest, src, count); }
};

CpuAllocationCounter::CpuAllocationCounter() : impl_(std::make_unique<Impl>()) {
  impl_->inner = c10::GetCPUAllocator();
  if (impl_->inner->raw_deleter() == nullptr)
    throw Error(ErrorKind::io, "cannot count CPU allocations: the installed CPU allocator has no raw deleter");
  table().inner_delete = impl_->inner->raw_deleter();
  table().peak.store(table().current.load());
  c10::SetCPUAllocator(impl_.get(), kPriority);
  if (c10::GetCPUAllocator() != impl_.get())
    throw Error(ErrorKind::io, "could not install the counting CPU allocator (another one has a higher priority)");
}

CpuAllocationCounter::~CpuAllocationCounter() { c10::SetCPUAllocator(impl_->inner, kPriority); }

std::int64_t CpuAllocationCounter::current() const { return table().current.load(); }
std::int64_t CpuAllocationCounter::peak() const { return table().peak.load(); }
void CpuAllocationCounter::reset_peak() { table().peak.store(table().current.load()); }

}  // namespace zs
