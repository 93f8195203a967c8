#pragma once
// Building a model as shapes only: while a MetaTensorScope lives, new tensors of this thread are
// meta tensors (no memory), so full-size SD 1.5 and SDXL modules can be built to read their
// parameter names and shapes (exports, tests).

#include <memory>

namespace c10::impl {
struct ForceDispatchKeyGuard;
}

namespace zs {

/// New tensors of this thread are meta tensors (device meta, nothing reserved) while alive; on destruction the thread's dispatch
/// keys are restored exactly. (c10's IncludeDispatchKeyGuard does not: removing Meta from a key
/// set clears only its functionality bit — LibTorch 1.13's "Removing keys from DispatchKeySet
/// only affects functionality keys" — so the Meta backend bit stayed and every later CPU
/// operation of the thread dispatched to Meta kernels.)
class MetaTensorScope {
 public:
  MetaTensorScope();
  ~MetaTensorScope();
  MetaTensorScope(const MetaTensorScope&) = delete;
  MetaTensorScope& operator=(const MetaTensorScope&) = delete;

 private:
  std::unique_ptr<c10::impl::ForceDispatchKeyGuard> saved_;
};

}  // namespace zs
