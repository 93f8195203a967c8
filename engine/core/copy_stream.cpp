#include "core/copy_stream.h"

#include <optional>

#ifdef ZS_WITH_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace zs {

struct CopyStream::Impl {
#ifdef ZS_WITH_CUDA
  std::optional<c10::cuda::CUDAStream> side;
  at::cuda::CUDAEvent* event(const Fence& f) const { return static_cast<at::cuda::CUDAEvent*>(f.event_.get()); }
  c10::cuda::CUDAStream current() const { return c10::cuda::getCurrentCUDAStream(side->device_index()); }
#endif
};

CopyStream::CopyStream(const at::Device& device) : impl_(std::make_unique<Impl>()) {
#ifdef ZS_WITH_CUDA
  if (device.is_cuda()) impl_->side = c10::cuda::getStreamFromPool(/*isHighPriority=*/false, device.index());
#else
  (void)device;
#endif
}

CopyStream::~CopyStream() = default;

bool CopyStream::asynchronous() const {
#ifdef ZS_WITH_CUDA
  return impl_->side.has_value();
#else
  return false;
#endif
}

CopyStream::Fence CopyStream::run(const std::function<void()>& work, const std::vector<at::Tensor>& touched) {
#ifdef ZS_WITH_CUDA
  if (impl_->side) {
    const c10::cuda::CUDAStream side = *impl_->side;
    at::cuda::CUDAEvent ready;
    ready.record(impl_->current());
    ready.block(side);
    {
      c10::cuda::CUDAStreamGuard guard(side);
      work();
    }
    for (const auto& t : touched)
      if (t.defined() && t.is_cuda()) t.record_stream(side);
    auto reached = std::make_shared<at::cuda::CUDAEvent>();
    reached->record(side);
    Fence f;
    f.event_ = std::move(reached);
    return f;
  }
#else
  (void)touched;
#endif
  work();
  return {};
}

void CopyStream::wait_on_device(const Fence& f) const {
#ifdef ZS_WITH_CUDA
  if (f && impl_->side) impl_->event(f)->block(impl_->current());
#else
  (void)f;
#endif
}

void CopyStream::join() {
  if (asynchronous()) wait_on_device(run([] {}));
}

void CopyStream::wait_on_host(const Fence& f) const {
#ifdef ZS_WITH_CUDA
  if (f) impl_->event(f)->synchronize();
#else
  (void)f;
#endif
}

bool CopyStream::done(const Fence& f) const {
#ifdef ZS_WITH_CUDA
  return !f || impl_->event(f)->query();
#else
  (void)f;
  return true;
#endif
}

}  // namespace zs
