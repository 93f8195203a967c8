#include "comm/communicator.h"

#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <string_view>
#include <functional>
#include <future>
#include <thread>
#include <vector>

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/FileStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#ifdef ZS_WITH_CUDA
#include <c10/cuda/CUDAFunctions.h>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include "core/error.h"
#include "comm/ring_collectives.h"

namespace zs::comm {

namespace {

/// How every collective's and long phase's failure message ends (GroupCommunicator's fail()).
constexpr std::string_view kCollectiveFailureEnd = "; see logs/rank*.log of the run and the launcher's report.";

int env_int(const char* name, int fallback, bool* present = nullptr) {
  const char* v = std::getenv(name);
  if (present) *present = v != nullptr && *v != '\0';
  if (!v || !*v) return fallback;
  char* end = nullptr;
  const long n = std::strtol(v, &end, 10);
  if (*end != '\0' || n < 0 || n > 1000000)
    throw Error(ErrorKind::distributed, std::string("environment variable ") + name + "=" + v +
                                            " is not a non-negative whole number");
  return static_cast<int>(n);
}

class DonePending final : public PendingCollective {
 public:
  void wait() override {}
};

class SingleCommunicator final : public Communicator {
 public:
  SingleCommunicator() : Communicator(0, 1, std::chrono::milliseconds(0)) {}
  std::string backend() const override { return "single"; }
  bool native_reduce_scatter() const override { return true; }
  void all_reduce(at::Tensor&) override {}
  void all_gather(const at::Tensor& shard, at::Tensor& flat) override { flat.copy_(shard); }
  void reduce_scatter(const at::Tensor& flat, at::Tensor& shard) override { shard.copy_(flat); }
  std::unique_ptr<PendingCollective> all_reduce_async(at::Tensor&) override { return std::make_unique<DonePending>(); }
  std::unique_ptr<PendingCollective> reduce_scatter_async(const at::Tensor& flat, at::Tensor& shard) override {
    shard.copy_(flat);
    return std::make_unique<DonePending>();
  }
  std::unique_ptr<PendingCollective> all_gather_async(const at::Tensor& shard, at::Tensor& flat) override {
    flat.copy_(shard);
    return std::make_unique<DonePending>();
  }
  void broadcast(at::Tensor&, int) override {}
  void barrier() override {}
};

/// One implementation for Gloo and NCCL: both process-group classes have the same collective
/// methods, in LibTorch 1.13 (derived from ProcessGroup) and 2.x (derived from Backend).
template <class Group>
class GroupCommunicator final : public Communicator {
 public:
  /// `device`: NCCL's CUDA device (collectives on other tensors run on copies there).
  GroupCommunicator(c10::intrusive_ptr<Group> group, c10::intrusive_ptr<c10d::Store> store, std::string name,
                    bool native_rs, const RendezvousInfo& info, std::chrono::milliseconds timeout,
                    std::optional<at::Device> device = std::nullopt)
      : Communicator(info.rank, info.world_size, timeout, info.local_rank), group_(std::move(group)),
        store_(std::move(store)), name_(std::move(name)), native_rs_(native_rs), device_(device) {
    if (!native_rs_)
      ring_ = std::make_unique<RingCollectives>(
          rank_, world_size_,
          [group = group_, timeout](const at::Tensor& send, int to, at::Tensor& recv, int from, int tag) {
            std::vector<at::Tensor> out{send}, in{recv};
            auto sent = group->send(out, to, tag);
            auto received = group->recv(in, from, tag);
            if (!sent->wait(timeout) || !received->wait(timeout)) throw std::runtime_error("timed out");
          });
  }

  std::string backend() const override { return name_; }
  bool native_reduce_scatter() const override { return native_rs_; }

  // The blocking collectives are the asynchronous ones waited for: one place for each
  // collective's layout, its bf16 conversion, its timeout and its error message.
  void all_reduce(at::Tensor& t) override { all_reduce_async(t)->wait(); }

  /// Where a collective on `t` must run when the backend cannot take `t` itself: Gloo has no
  /// bf16 (float32 copies; sums in fp32 are better anyway), NCCL takes CUDA tensors only.
  std::optional<at::TensorOptions> staged(const at::Tensor& t) const {
    if (name_ == "gloo" && t.scalar_type() == at::kBFloat16) return t.options().dtype(at::kFloat);
    if (device_ && t.device() != *device_) return t.options().device(*device_);
    return std::nullopt;
  }

  /// An asynchronous collective on staged copies, copied back when it is waited for.
  class ConvertedPending final : public PendingCollective {
   public:
    ConvertedPending(std::unique_ptr<PendingCollective> inner, std::function<void()> after)
        : inner_(std::move(inner)), after_(std::move(after)) {}
    void wait() override {
      inner_->wait();
      after_();
    }

   private:
    std::unique_ptr<PendingCollective> inner_;
    std::function<void()> after_;
  };

  /// A started Work plus what to do once it is done.
  class Pending final : public PendingCollective {
   public:
    Pending(GroupCommunicator& owner, const char* op, c10::intrusive_ptr<c10d::Work> work, std::function<void()> finish,
            std::vector<at::Tensor> keep)
        : owner_(owner), op_(op), work_(std::move(work)), finish_(std::move(finish)), keep_(std::move(keep)) {}
    void wait() override {
      owner_.run(op_, [&] { return work_; }, true, false);
      if (finish_) finish_();
    }

   private:
    GroupCommunicator& owner_;
    const char* op_;
    c10::intrusive_ptr<c10d::Work> work_;
    std::function<void()> finish_;
    std::vector<at::Tensor> keep_;  // buffers the work reads and writes
  };

  /// A ring collective under way (RingCollectives' worker runs it).
  class RingPending final : public PendingCollective {
   public:
    RingPending(GroupCommunicator& owner, const char* op, std::shared_future<void> done, std::uint64_t seq)
        : owner_(owner), op_(op), done_(std::move(done)), seq_(seq) {}
    void wait() override {
      try {
        done_.get();
      } catch (const std::exception& e) {
        owner_.fail(op_, e.what(), seq_);
      }
    }

   private:
    GroupCommunicator& owner_;
    const char* op_;
    std::shared_future<void> done_;
    std::uint64_t seq_;
  };

  std::unique_ptr<PendingCollective> all_reduce_async(at::Tensor& t) override {
    if (const auto o = staged(t)) {
      at::Tensor f = t.to(*o), out = t;
      auto inner = all_reduce_async(f);
      return std::make_unique<ConvertedPending>(std::move(inner), [f, out]() mutable { out.copy_(f); });
    }
    std::vector<at::Tensor> v{t};
    c10::intrusive_ptr<c10d::Work> work;
    run("all_reduce", [&] { return work = group_->allreduce(v); }, /*wait=*/false);
    return std::make_unique<Pending>(*this, "all_reduce", work, nullptr, v);
  }

  std::unique_ptr<PendingCollective> all_gather_async(const at::Tensor& shard, at::Tensor& flat) override {
    check_sizes("all_gather", shard, flat);
    auto o = staged(shard);
    if (!o) o = staged(flat);
    if (o) {
      at::Tensor fs = shard.to(*o), ff = at::empty(flat.sizes(), *o), out = flat;
      auto inner = all_gather_async(fs, ff);
      return std::make_unique<ConvertedPending>(std::move(inner), [fs, ff, out]() mutable { out.copy_(ff); });
    }
    c10::intrusive_ptr<c10d::Work> work;
    if (native_rs_) {
      // NCCL gathers straight into the flat buffer.
      at::Tensor in = shard, out = flat;
      run("all_gather", [&] { return work = group_->_allgather_base(out, in); }, false);
      return std::make_unique<Pending>(*this, "all_gather", work, nullptr, std::vector<at::Tensor>{shard, flat});
    }
    if (ring_ && shard.is_cpu() && flat.is_cpu()) {
      // Gloo's own copies the input into a flat buffer of world × its size and back out; the
      // ring sends and receives in place.
      count();
      return std::make_unique<RingPending>(*this, "all_gather", ring_->start_all_gather(shard, flat), seq_);
    }
    // Gloo on CUDA tensors: its own all-gather.
    std::vector<at::Tensor> in{shard};
    std::vector<std::vector<at::Tensor>> out(1);
    for (const auto& chunk : flat.chunk(world_size_)) out[0].push_back(chunk);
    run("all_gather", [&] { return work = group_->allgather(out, in); }, false);
    std::vector<at::Tensor> keep = out[0];
    keep.push_back(shard);
    keep.push_back(flat);
    return std::make_unique<Pending>(*this, "all_gather", work, nullptr, keep);
  }

  std::unique_ptr<PendingCollective> reduce_scatter_async(const at::Tensor& flat, at::Tensor& shard) override {
    check_sizes("reduce_scatter", shard, flat);
    auto o = staged(flat);
    if (!o) o = staged(shard);
    if (o) {
      at::Tensor ff = flat.to(*o), fs = at::empty(shard.sizes(), *o), out = shard;
      auto inner = reduce_scatter_async(ff, fs);
      return std::make_unique<ConvertedPending>(std::move(inner), [ff, fs, out]() mutable { out.copy_(fs); });
    }
    c10::intrusive_ptr<c10d::Work> work;
    if (native_rs_) {
      // NCCL reduces straight out of the flat buffer.
      at::Tensor in = flat, out = shard;
      run("reduce_scatter", [&] { return work = group_->_reduce_scatter_base(out, in); }, false);
      return std::make_unique<Pending>(*this, "reduce_scatter", work, nullptr, std::vector<at::Tensor>{flat, shard});
    }
    if (ring_ && flat.is_cpu() && shard.is_cpu()) {
      count();
      return std::make_unique<RingPending>(*this, "reduce_scatter", ring_->start_reduce_scatter(flat, shard), seq_);
    }
    // Gloo on CUDA tensors: all-reduce a copy and keep this rank's chunk.
    std::vector<at::Tensor> v{flat.clone()};
    run("reduce_scatter", [&] { return work = group_->allreduce(v); }, false);
    at::Tensor full = v[0], out = shard;
    const int rank = rank_, world = world_size_;
    return std::make_unique<Pending>(*this, "reduce_scatter", work,
                                     [full, out, rank, world]() mutable { out.copy_(full.chunk(world)[static_cast<std::size_t>(rank)]); },
                                     v);
  }

  void all_gather(const at::Tensor& shard, at::Tensor& flat) override { all_gather_async(shard, flat)->wait(); }
  void reduce_scatter(const at::Tensor& flat, at::Tensor& shard) override { reduce_scatter_async(flat, shard)->wait(); }

  void broadcast(at::Tensor& t, int root) override {
    if (const auto o = staged(t)) {
      at::Tensor f = t.to(*o);
      broadcast(f, root);
      t.copy_(f);
      return;
    }
    std::vector<at::Tensor> v{t};
    c10d::BroadcastOptions o;
    o.rootRank = root;
    run("broadcast", [&] { return group_->broadcast(v, o); });
  }

  void barrier() override {
    // A barrier is an all-reduce of one number: same timeout and error path as the rest.
    at::Tensor one = at::ones({1});
    all_reduce(one);
  }

 private:
  void check_sizes(const char* op, const at::Tensor& shard, const at::Tensor& flat) const {
    if (flat.numel() != shard.numel() * world_size_ || !flat.is_contiguous() || !shard.is_contiguous())
      throw Error(ErrorKind::distributed, std::string(op) + ": the flat buffer must hold world_size × the shard, "
                                                            "both contiguous (a bug in the caller)");
  }

  void long_phase(const std::string& what, const std::function<void()>& work) override {
    using Clock = std::chrono::steady_clock;
    const std::string base = "zs_long/" + std::to_string(++phases_) + "/";
    auto key = [&](const char* kind, int r) { return base + kind + "/" + std::to_string(r); };
    // This rank's heartbeat, on a thread of its own while `work` runs.
    std::mutex mutex;
    std::condition_variable wake;
    bool working = true;
    std::thread beat([&] {
      std::unique_lock<std::mutex> lock(mutex);
      while (working) {
        try {
          store_->add(key("beat", rank_), 1);
        } catch (const std::exception&) {
          // the store is gone (rank 0 died): the waiting below will say so
        }
        wake.wait_for(lock, std::chrono::milliseconds(200), [&] { return !working; });
      }
    });
    std::exception_ptr error;
    std::string message = "ok";
    try {
      work();
    } catch (const std::exception& e) {
      error = std::current_exception();
      message = std::string("error: ") + e.what();
    } catch (...) {
      error = std::current_exception();
      message = "error: an unknown exception";
    }
    {
      std::lock_guard<std::mutex> lock(mutex);
      working = false;
    }
    wake.notify_all();
    beat.join();
    auto fail = [&](const std::string& why) {
      throw Error(ErrorKind::distributed, "rank " + std::to_string(rank_) + " of " + std::to_string(world_size_) + ": " +
                                              why + " during " + what + std::string(kCollectiveFailureEnd));
    };
    try {
      store_->set(key("done", rank_), std::vector<uint8_t>(message.begin(), message.end()));
    } catch (const std::exception&) {
      if (error) std::rethrow_exception(error);
      fail("rank 0 is gone (the rendezvous store it hosts does not answer)");
    }
    // Wait for the others: done, or at least beating.
    std::vector<std::int64_t> beats(static_cast<std::size_t>(world_size_), -1);
    std::vector<Clock::time_point> changed(static_cast<std::size_t>(world_size_), Clock::now());
    std::vector<char> done(static_cast<std::size_t>(world_size_), 0);
    done[static_cast<std::size_t>(rank_)] = 1;
    std::string failed;  // the first rank whose work failed or that went silent
    int silent = 0;      // ranks whose heartbeat stopped
    bool store_gone = false;
    for (;;) {
      bool all = true;
      try {
        for (int r = 0; r < world_size_ && failed.empty(); ++r) {
          const auto i = static_cast<std::size_t>(r);
          if (done[i]) continue;
          if (store_->check({key("done", r)})) {
            done[i] = 1;
            const auto bytes = store_->get(key("done", r));
            const std::string text(bytes.begin(), bytes.end());
            if (text != "ok") failed = "rank " + std::to_string(r) + " failed (" + text.substr(7) + ")";
            continue;
          }
          all = false;
          const std::int64_t b = store_->add(key("beat", r), 0);
          if (b != beats[i]) {
            beats[i] = b;
            changed[i] = Clock::now();
          } else if (Clock::now() - changed[i] > timeout_) {
            ++silent;
            failed = "rank " + std::to_string(r) + " went silent (no heartbeat for " +
                     std::to_string(timeout_.count() / 1000) + " s): it died or hangs";
          }
        }
      } catch (const std::exception&) {
        store_gone = true;
      }
      if (all || error || !failed.empty() || store_gone) break;  // a rank whose own work failed does not wait
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    // Rank 0 hosts the store: it stays until the others have read the outcome, or a rank that is
    // done last (the end of the run) could find the store gone before it reads rank 0's "done".
    if (!store_gone) {
      try {
        store_->add(base + "seen", 1);
        const auto until = Clock::now() + timeout_;
        while (rank_ == 0 && store_->add(base + "seen", 0) < world_size_ - silent && Clock::now() < until)
          std::this_thread::sleep_for(std::chrono::milliseconds(5));
      } catch (const std::exception&) {
        store_gone = true;
      }
    }
    if (error) std::rethrow_exception(error);
    if (!failed.empty()) fail(failed);
    if (store_gone) fail("rank 0 is gone (the rendezvous store it hosts does not answer)");
  }

  /// Which ranks are behind: every collective is numbered in the store ("zs_seq/<rank>"), so
  /// after a failure the ranks that never reached this one can be named.
  std::string blame() const {
    std::string behind;
    try {
      for (int r = 0; r < world_size_; ++r) {
        if (r == rank_) continue;
        const std::string key = "zs_seq/" + std::to_string(r);
        if (!store_->check({key})) {
          behind += (behind.empty() ? "" : ", ") + ("rank " + std::to_string(r) + " (never started one)");
          continue;
        }
        const auto bytes = store_->get(key);
        const long long seq = std::stoll(std::string(bytes.begin(), bytes.end()));
        if (seq < static_cast<long long>(seq_))
          behind += (behind.empty() ? "" : ", ") + ("rank " + std::to_string(r) + " (last at #" + std::to_string(seq) + ")");
      }
      if (behind.empty()) return silent_in_failure();
    } catch (const std::exception&) {
      return "rank 0 is gone (the rendezvous store it hosts does not answer)";
    }
    if (behind.empty()) return "";
    return "not reached by " + behind + ": that rank stopped, died or hangs";
  }

  /// Every rank reached this collective, so one died inside it: the living ranks fail too (their
  /// connections break, or at the latest their own timeout expires) and each says so in the
  /// store; the ranks still silent after the timeout and a second (10 s at most) are the ones gone.
  std::string silent_in_failure() const {
    const std::string prefix = "zs_failed/" + std::to_string(seq_) + "/";
    store_->set(prefix + std::to_string(rank_), std::vector<uint8_t>{1});
    std::vector<char> reported(static_cast<std::size_t>(world_size_), 0);
    reported[static_cast<std::size_t>(rank_)] = 1;
    const auto deadline = std::chrono::steady_clock::now() +
                          std::min<std::chrono::milliseconds>(timeout_ + std::chrono::seconds(1), std::chrono::seconds(10));
    try {
      for (;;) {
        bool all = true;
        for (int r = 0; r < world_size_; ++r) {
          char& seen = reported[static_cast<std::size_t>(r)];
          if (!seen) seen = store_->check({prefix + std::to_string(r)}) ? 1 : 0;
          all = all && seen;
        }
        if (all || std::chrono::steady_clock::now() >= deadline) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
    } catch (const std::exception&) {
      // Rank 0 left after its own report (the store went with it): it was alive; judge the rest.
      reported[0] = 1;
    }
    std::string silent;
    for (int r = 0; r < world_size_; ++r)
      if (!reported[static_cast<std::size_t>(r)]) silent += (silent.empty() ? "" : ", ") + ("rank " + std::to_string(r));
    if (silent.empty()) return "";
    return "abandoned by " + silent + " (started it, then went silent): that rank died or hangs";
  }

  /// Numbers a collective this rank starts, in the store too, for blame().
  void count() {
    ++seq_;
    try {
      const std::string v = std::to_string(seq_);
      store_->set("zs_seq/" + std::to_string(rank_), std::vector<uint8_t>(v.begin(), v.end()));
    } catch (const std::exception&) {
      // the store is only for naming a culprit; the collective itself will report the failure
    }
  }

  /// Throws the error for collective #`seq` (`op`) that failed with `what`, naming the culprit.
  [[noreturn]] void fail(const char* op, std::string what, std::uint64_t seq) const {
    if (const auto nl = what.find('\n'); nl != std::string::npos) what.resize(nl);  // drop C++ stack traces
    const std::string culprit = blame();
    throw Error(ErrorKind::distributed,
                "rank " + std::to_string(rank_) + " of " + std::to_string(world_size_) + ": " + op + " #" +
                    std::to_string(seq) + " failed (" + name_ + ", timeout " + std::to_string(timeout_.count() / 1000) +
                    " s): " +
                    (culprit.empty() ? what + ". Another rank has probably stopped or died" : culprit + " [" + what + "]") +
                    std::string(kCollectiveFailureEnd));
  }

  template <class Start>
  void run(const char* op, Start start, bool wait = true, bool counted = true) {
    if (counted) count();
    try {
      auto work = start();
      // NCCL's wait only makes the current stream wait (its watchdog enforces the timeout given
      // to the group); a wait with a timeout would block the host until the GPU is done.
      if (wait && !(device_ ? work->wait() : work->wait(timeout_)))
        throw std::runtime_error("timed out");
    } catch (const Error&) {
      throw;
    } catch (const std::exception& e) {
      fail(op, e.what(), seq_);
    }
  }

  c10::intrusive_ptr<Group> group_;
  c10::intrusive_ptr<c10d::Store> store_;
  std::string name_;
  bool native_rs_;
  std::optional<at::Device> device_;  // NCCL: the rank's CUDA device
  std::uint64_t seq_ = 0;  // collectives started by this rank
  std::uint64_t phases_ = 0;  // long phases started (the same count on every rank)
  std::unique_ptr<RingCollectives> ring_;  // Gloo: reduce-scatter and all-gather of CPU tensors
};

// Every rank waits here until all have built their process group. Without it a rank that fails
// right after its own group was built closes its connections while a slower rank is still making
// its own, and that rank reports "did not all meet" instead of naming the failed rank (seen in
// tst_dist_faults with the machine loaded).
void wait_until_all_connected(c10d::Store& store, int world_size, std::chrono::milliseconds timeout) {
  const std::string key = "connected";
  store.add(key, 1);
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (store.add(key, 0) < world_size) {
    if (std::chrono::steady_clock::now() > deadline) throw std::runtime_error("not every rank finished connecting");
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

}  // namespace

Communicator::~Communicator() = default;

std::string nccl_version() {
#if defined(ZS_WITH_CUDA) && defined(USE_C10D_NCCL)
  return c10d::getNcclVersion();
#else
  return "";
#endif
}

bool is_collective_failure(const std::string& message) { return message.ends_with(kCollectiveFailureEnd); }

std::optional<RendezvousInfo> rendezvous_from_env() {
  bool has_rank = false, has_world = false;
  RendezvousInfo info;
  info.rank = env_int("RANK", 0, &has_rank);
  info.world_size = env_int("WORLD_SIZE", 1, &has_world);
  if (!has_rank || !has_world) return std::nullopt;
  if (info.world_size < 1 || info.rank >= info.world_size)
    throw Error(ErrorKind::distributed, "RANK=" + std::to_string(info.rank) + " is not below WORLD_SIZE=" +
                                            std::to_string(info.world_size));
  if (const char* a = std::getenv("MASTER_ADDR"); a && *a) info.master_addr = a;
  info.master_port = env_int("MASTER_PORT", 29500);
  if (info.master_port < 1 || info.master_port > 65535)
    throw Error(ErrorKind::distributed, "MASTER_PORT=" + std::to_string(info.master_port) + " is not a TCP port");
  if (const char* f = std::getenv("ZEROSTUDIO_STORE_FILE"); f && *f) info.store_file = f;
  info.local_rank = env_int("LOCAL_RANK", info.rank);
  info.local_world_size = env_int("LOCAL_WORLD_SIZE", info.world_size);
  return info;
}

std::unique_ptr<Communicator> Communicator::single() { return std::make_unique<SingleCommunicator>(); }

std::unique_ptr<Communicator> Communicator::connect(const RendezvousInfo& info, std::chrono::milliseconds timeout,
                                                    bool cuda, bool always_group) {
  if (info.world_size == 1 && !always_group) return single();
  const std::string where = info.store_file.empty() ? info.master_addr + ":" + std::to_string(info.master_port)
                                                    : "the store file " + info.store_file;
  c10::intrusive_ptr<c10d::Store> store;
  try {
    if (!info.store_file.empty()) {
      // One machine: the ranks meet in a file of a private folder; nothing listens on the network.
      store = c10::make_intrusive<c10d::FileStore>(info.store_file, info.world_size);
      store->setTimeout(timeout);
    } else {
      c10d::TCPStoreOptions o;
      o.port = static_cast<std::uint16_t>(info.master_port);
      o.isServer = info.rank == 0;
      o.numWorkers = info.world_size;
      o.waitWorkers = false;
      o.timeout = timeout;
      store = c10::make_intrusive<c10d::TCPStore>(info.master_addr, o);
    }
  } catch (const std::exception& e) {
    std::string what = e.what();
    if (const auto nl = what.find('\n'); nl != std::string::npos) what.resize(nl);
    throw Error(ErrorKind::distributed,
                "rank " + std::to_string(info.rank) + ": cannot " + (info.rank == 0 ? "host" : "reach") +
                    " the rendezvous store at " + where + " within " + std::to_string(timeout.count() / 1000) +
                    " s (" + what + "); check MASTER_ADDR/MASTER_PORT (--main_process_ip/--main_process_port) and "
                    "that rank 0 is running");
  }
  auto prefixed = c10::make_intrusive<c10d::PrefixStore>("zerostudio", store);
  try {
#ifdef ZS_WITH_CUDA
    if (cuda) {
      const int devices = static_cast<int>(c10::cuda::device_count());
      if (devices == 0) throw Error(ErrorKind::distributed, "NCCL needs a CUDA device and none is visible");
      if (info.local_world_size > devices)
        throw Error(ErrorKind::distributed,
                    "rank " + std::to_string(info.rank) + ": " + std::to_string(info.local_world_size) +
                        " ranks on this machine but " + std::to_string(devices) +
                        " CUDA device(s): NCCL needs a GPU per rank; lower launch.num_processes (--num_processes) to " +
                        std::to_string(devices) + " or set launch.use_cpu: true");
      const auto index = static_cast<c10::DeviceIndex>(info.local_rank % devices);
      c10::cuda::set_device(index);
      auto opts = c10d::ProcessGroupNCCL::Options::create();
      opts->timeout = timeout;
      auto group = c10::make_intrusive<c10d::ProcessGroupNCCL>(prefixed, info.rank, info.world_size, opts);
      wait_until_all_connected(*prefixed, info.world_size, timeout);
      return std::make_unique<GroupCommunicator<c10d::ProcessGroupNCCL>>(group, store, "nccl", true, info, timeout,
                                                                          at::Device(at::kCUDA, index));
    }
#else
    if (cuda) throw Error(ErrorKind::distributed, "this build has no CUDA; NCCL is not available");
#endif
    auto opts = c10d::ProcessGroupGloo::Options::create(timeout);
    // One machine: loopback. Several: GLOO_SOCKET_IFNAME, else the interface of this host's name.
    if (const char* ifname = std::getenv("GLOO_SOCKET_IFNAME"); ifname && *ifname) {
      opts->devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(ifname));
    } else if (info.local_world_size == info.world_size) {
      opts->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
    } else {
      opts->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
    }
    auto group = c10::make_intrusive<c10d::ProcessGroupGloo>(prefixed, info.rank, info.world_size, opts);
    wait_until_all_connected(*prefixed, info.world_size, timeout);
    return std::make_unique<GroupCommunicator<c10d::ProcessGroupGloo>>(group, store, "gloo", false, info, timeout);
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    std::string what = e.what();
    if (const auto nl = what.find('\n'); nl != std::string::npos) what.resize(nl);
    throw Error(ErrorKind::distributed,
                "rank " + std::to_string(info.rank) + ": the " + std::to_string(info.world_size) +
                    " ranks did not all meet at " + where + " within " + std::to_string(timeout.count() / 1000) +
                    " s (" + what + "); a rank is missing or was started with another WORLD_SIZE/MASTER_PORT");
  }
}

}  // namespace zs::comm
