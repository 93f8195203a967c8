#include "core/meta_tensors.h"

#include <c10/core/impl/LocalDispatchKeySet.h>

namespace zs {

MetaTensorScope::MetaTensorScope()
    : saved_(std::make_unique<c10::impl::ForceDispatchKeyGuard>(c10::impl::tls_local_dispatch_key_set())) {
  c10::impl::tls_set_dispatch_key_included(c10::DispatchKey::Meta, true);
  // Factory functions (empty, zeros…) pass BackendSelect first, which picks the kernel from the
  // options' device (CPU): with Meta merely included, every new tensor was a CPU tensor with
  // untouched memory reserved for it (19 GB for T5-XXL's skeleton), whose later operations ran
  // as Meta kernels. Without BackendSelect the included Meta key picks the kernel: meta tensors.
  c10::impl::tls_set_dispatch_key_excluded(c10::DispatchKey::BackendSelect, true);
}

MetaTensorScope::~MetaTensorScope() = default;  // the saved guard puts the thread's keys back

}  // namespace zs
