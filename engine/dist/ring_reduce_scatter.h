#pragma once
// Reduce-scatter as a ring of point-to-point exchanges, for process groups without one of their
// own (Gloo in LibTorch 1.13). Each of the N−1 rounds sends one chunk to the next rank, receives
// one from the previous and adds it in: N−1 chunks move per rank, where the all-reduce fallback
// moves about twice that and needs a copy of the whole buffer.

#include <functional>
#include <future>
#include <memory>

#include <ATen/core/Tensor.h>

namespace zs::dist {

class RingReduceScatter {
 public:
  /// Sends `send` to rank `to` and receives `recv` from rank `from` under `tag`; returns once both
  /// are done and throws on a failure or timeout.
  using Exchange = std::function<void(const at::Tensor& send, int to, at::Tensor& recv, int from, int tag)>;

  RingReduceScatter(int rank, int world_size, Exchange exchange);
  /// Stops the worker; a collective still waiting for a peer is left to its exchange's timeout.
  ~RingReduceScatter();
  RingReduceScatter(const RingReduceScatter&) = delete;
  RingReduceScatter& operator=(const RingReduceScatter&) = delete;

  /// Queues a reduce-scatter: once the future is ready, shard [n] holds the sum over ranks of their
  /// flat [N·n] chunk number `rank`; flat's other chunks were used as scratch (their contents are
  /// then unspecified). Collectives run one at a time, in the order they were started, on a thread
  /// of their own, so every rank must start them in the same order. Both tensors: contiguous, CPU,
  /// same dtype, alive and untouched until the future is ready.
  std::shared_future<void> start(const at::Tensor& flat, const at::Tensor& shard);

 private:
  struct State;
  std::shared_ptr<State> state_;
};

}  // namespace zs::dist
