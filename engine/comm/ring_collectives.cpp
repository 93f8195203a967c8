#include "comm/ring_collectives.h"

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <thread>

#include <ATen/ATen.h>

namespace zs::comm {

struct RingCollectives::State {
  int rank = 0, world = 1;
  Exchange exchange;
  std::mutex mutex;
  std::condition_variable wake;
  struct Task {
    bool gather = false;  // all-gather, else reduce-scatter
    at::Tensor flat, shard;
    int tag = 0;
    std::promise<void> done;
  };
  std::deque<std::unique_ptr<Task>> queue;
  bool stopping = false, busy = false;
  std::uint64_t started = 0;  // collectives queued so far: gives each its own tags
  at::Tensor scratch;         // one chunk; collectives run one at a time

  void run(Task& t) {
    if (t.gather) gather(t);
    else reduce_scatter(t);
  }

  void reduce_scatter(Task& t) {
    const std::int64_t n = t.shard.numel();
    if (!scratch.defined() || scratch.numel() < n || scratch.scalar_type() != t.flat.scalar_type())
      scratch = at::empty({n}, t.flat.options());
    at::Tensor in = scratch.narrow(0, 0, n);
    const int next = (rank + 1) % world, prev = (rank + world - 1) % world;
    auto chunk = [&](int index) { return t.flat.narrow(0, static_cast<std::int64_t>(index) * n, n); };
    // Round s: send the chunk that has gathered s + 1 contributions on its way to its owner,
    // receive the next one from the previous rank and add this rank's contribution to it. After
    // N − 1 rounds the chunk received last is this rank's own, summed over every rank.
    for (int s = 0; s + 1 < world; ++s) {
      const int send_index = ((rank - s - 1) % world + world) % world;
      const int recv_index = ((rank - s - 2) % world + world) % world;
      exchange(chunk(send_index), next, in, prev, t.tag + s);
      chunk(recv_index).add_(in);
    }
    t.shard.copy_(chunk(rank));
  }

  void gather(Task& t) {
    const std::int64_t n = t.shard.numel();
    const int next = (rank + 1) % world, prev = (rank + world - 1) % world;
    auto chunk = [&](int index) { return t.flat.narrow(0, static_cast<std::int64_t>(index) * n, n); };
    at::Tensor own = chunk(rank);
    if (t.shard.data_ptr() != own.data_ptr()) own.copy_(t.shard);
    // Round s: pass on the chunk received in the round before (first, this rank's own) and
    // receive the previous rank's into its place.
    for (int s = 0; s + 1 < world; ++s) {
      at::Tensor into = chunk(((rank - s - 1) % world + world) % world);
      exchange(chunk(((rank - s) % world + world) % world), next, into, prev, t.tag + s);
    }
  }

  void loop() {
    std::unique_lock<std::mutex> lock(mutex);
    for (;;) {
      wake.wait(lock, [&] { return stopping || !queue.empty(); });
      if (queue.empty()) return;
      std::unique_ptr<Task> t = std::move(queue.front());
      queue.pop_front();
      busy = true;
      lock.unlock();
      try {
        run(*t);
        t->done.set_value();
      } catch (...) {
        t->done.set_exception(std::current_exception());
      }
      lock.lock();
      busy = false;
    }
  }
};

RingCollectives::RingCollectives(int rank, int world_size, Exchange exchange) : state_(std::make_shared<State>()) {
  state_->rank = rank;
  state_->world = world_size;
  state_->exchange = std::move(exchange);
  // The thread shares the state, so it may outlive this object (see the destructor).
  std::thread([s = state_] { s->loop(); }).detach();
}

RingCollectives::~RingCollectives() {
  std::lock_guard<std::mutex> lock(state_->mutex);
  state_->stopping = true;
  // Queued collectives are not run: their futures report a broken promise to whoever still waits.
  state_->queue.clear();
  state_->wake.notify_all();
}

std::shared_future<void> RingCollectives::enqueue(bool gather, const at::Tensor& flat, const at::Tensor& shard) {
  State& state = *state_;
  auto t = std::make_unique<State::Task>();
  t->gather = gather;
  t->flat = flat;
  t->shard = shard;
  std::shared_future<void> done = t->done.get_future().share();
  std::lock_guard<std::mutex> lock(state.mutex);
  // Tags: 64 per collective (a ring of up to 65 ranks), wrapping far beyond any collective in flight.
  t->tag = static_cast<int>((state.started++ % 1'000'000) * 64);
  state.queue.push_back(std::move(t));
  state.wake.notify_all();
  return done;
}

std::shared_future<void> RingCollectives::start_reduce_scatter(const at::Tensor& flat, const at::Tensor& shard) {
  return enqueue(false, flat, shard);
}

std::shared_future<void> RingCollectives::start_all_gather(const at::Tensor& shard, const at::Tensor& flat) {
  return enqueue(true, flat, shard);
}

}  // namespace zs::comm
