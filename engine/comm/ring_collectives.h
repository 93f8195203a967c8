#pragma once
// Reduce-scatter and all-gather as rings of point-to-point exchanges, for process groups whose
// own are missing or copy too much (Gloo in LibTorch 1.13: no reduce-scatter; its all-gather
// copies the input into a flat buffer of N × its size and back out). Each of the N−1 rounds
// sends one chunk to the next rank and receives one from the previous, straight from and into
// the caller's buffer: N−1 chunks move per rank and nothing else is copied.

#include <functional>
#include <future>
#include <memory>

#include <ATen/core/Tensor.h>

namespace zs::comm {

class RingCollectives {
 public:
  /// Sends `send` to rank `to` and receives `recv` from rank `from` under `tag`; returns once both
  /// are done and throws on a failure or timeout.
  using Exchange = std::function<void(const at::Tensor& send, int to, at::Tensor& recv, int from, int tag)>;

  RingCollectives(int rank, int world_size, Exchange exchange);
  /// Stops the worker; a collective still waiting for a peer is left to its exchange's timeout.
  ~RingCollectives();
  RingCollectives(const RingCollectives&) = delete;
  RingCollectives& operator=(const RingCollectives&) = delete;

  // Collectives run one at a time, in the order they were started, on a thread of their own, so
  // every rank must start them in the same order. Tensors: contiguous, CPU, same dtype, alive
  // and untouched until the future is ready.

  /// Once ready, shard [n] holds the sum over ranks of their flat [N·n] chunk number `rank`;
  /// flat's other chunks were used as scratch (their contents are then unspecified).
  std::shared_future<void> start_reduce_scatter(const at::Tensor& flat, const at::Tensor& shard);
  /// Once ready, flat [N·n] holds every rank's shard [n] in rank order. `shard` may be flat's own
  /// chunk number `rank` (then nothing is copied at all).
  std::shared_future<void> start_all_gather(const at::Tensor& shard, const at::Tensor& flat);

 private:
  std::shared_future<void> enqueue(bool gather, const at::Tensor& flat, const at::Tensor& shard);
  struct State;
  std::shared_ptr<State> state_;
};

}  // namespace zs::comm
