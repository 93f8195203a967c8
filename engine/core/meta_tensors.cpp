#include "core/meta_tensors.h"

#include <c10/core/impl/LocalDispatchKeySet.h>

namespace zs {

MetaTensorScope::MetaTensorScope()
    : saved_(std::make_unique<c10::impl::ForceDispatchKeyGuard>(c10::impl::tls_local_dispatch_key_set())) {
  c10::impl::tls_set_dispatch_key_included(c10::DispatchKey::Meta, true);
}

MetaTensorScope::~MetaTensorScope() = default;  // the saved guard puts the thread's keys back

}  // namespace zs
