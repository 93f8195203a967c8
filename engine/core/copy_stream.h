#pragma once
// Host↔device copies on a CUDA side stream, so that ZeRO's offload copies and stage-3
// prefetches overlap the compute queued on the current stream. Where there is no CUDA device
// (CPU builds, CPU runs) the same calls run the work at once, in order: one code path for both.

#include <functional>
#include <memory>
#include <vector>

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

namespace zs {

class CopyStream {
 public:
  /// A point in the side stream's work (what was queued on it up to one run()); an empty fence
  /// is always reached.
  class Fence {
   public:
    Fence() = default;
    explicit operator bool() const { return static_cast<bool>(event_); }

   private:
    friend class CopyStream;
    std::shared_ptr<void> event_;
  };

  /// A side stream on `device` when it is a CUDA device (and this build has CUDA paths); else
  /// the in-order stand-in.
  explicit CopyStream(const at::Device& device);
  ~CopyStream();
  CopyStream(const CopyStream&) = delete;
  CopyStream& operator=(const CopyStream&) = delete;

  /// True with a real side stream.
  bool asynchronous() const;
  /// Runs `work` (tensor operations, copies with non_blocking) with the side stream current,
  /// after everything queued so far on the current stream. `touched`: device tensors made on the
  /// current stream that the work reads or writes; their memory is not handed out again before
  /// the side stream is done with them.
  Fence run(const std::function<void()>& work, const std::vector<at::Tensor>& touched = {});
  /// Makes the current stream wait for `f`; the host goes on.
  void wait_on_device(const Fence& f) const;
  /// Makes the current stream wait for everything queued on the side stream so far.
  void join();
  /// Blocks the host until `f` is reached.
  void wait_on_host(const Fence& f) const;
  /// Whether `f` has been reached; never blocks.
  bool done(const Fence& f) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace zs
