#pragma once
// Collectives between ranks over a c10d process group: Gloo for CPU tensors, NCCL for CUDA
// tensors (builds with CUDA). Every call waits at most the communicator's timeout and then
// throws zs::Error(distributed) naming this rank and the operation, so no rank ever hangs.
// Tensors may live on the CPU or the device whatever the backend: where it cannot take them
// (Gloo: bf16; NCCL: CPU tensors, such as the trainer's flags, losses and random states) the
// collective runs on a copy that it can take.

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include <ATen/core/Tensor.h>

namespace zs::comm {

/// Where this process sits, as torchrun describes it in the environment.
struct RendezvousInfo {
  std::string master_addr = "127.0.0.1";  ///< MASTER_ADDR: host of rank 0's TCPStore
  int master_port = 29500;                ///< MASTER_PORT
  int rank = 0;                           ///< RANK: global rank
  int world_size = 1;                     ///< WORLD_SIZE
  int local_rank = 0;                     ///< LOCAL_RANK: rank on this machine
  int local_world_size = 1;               ///< LOCAL_WORLD_SIZE: ranks on this machine
  /// ZEROSTUDIO_STORE_FILE: meet through a c10d FileStore at this path instead of rank 0's
  /// TCPStore, so a one-machine run opens no port (`zerostudio launch` sets it in a private
  /// folder). Empty: the TCPStore at MASTER_ADDR:MASTER_PORT.
  std::string store_file;
};

/// Reads MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE and
/// ZEROSTUDIO_STORE_FILE. nullopt when
/// RANK and WORLD_SIZE are not both set; throws zs::Error(distributed) naming a malformed variable.
std::optional<RendezvousInfo> rendezvous_from_env();

/// Whether an error message is a collective's failure as the Communicator reports it: this rank
/// failed because another stopped, died or hung (its message names that rank), not on its own.
/// The launcher tells the two apart when it decides which rank's failure ended a run.
bool is_collective_failure(const std::string& message);

/// NCCL's version in this build ("2.28.9"); empty without NCCL (CPU builds).
std::string nccl_version();

/// A collective started in the background; wait() finishes it (or throws like the blocking call).
class PendingCollective {
 public:
  virtual ~PendingCollective() = default;
  virtual void wait() = 0;
};

class Communicator {
 public:
  /// A world of one: every collective is a no-op (or a copy).
  static std::unique_ptr<Communicator> single();
  /// Meets the other ranks through a c10d TCPStore hosted by rank 0 (or the FileStore at
  /// info.store_file) and builds the process group
  /// (NCCL when `cuda`, on CUDA device LOCAL_RANK mod the devices, which becomes the current
  /// one; else Gloo). Throws zs::Error(distributed) within `timeout` when a rank is missing or the
  /// store cannot be reached, saying which. A world of one gets single() unless `always_group`
  /// (tests: a real one-rank NCCL or Gloo group).
  static std::unique_ptr<Communicator> connect(const RendezvousInfo& info, std::chrono::milliseconds timeout,
                                               bool cuda = false, bool always_group = false);
  virtual ~Communicator();

  int rank() const { return rank_; }
  int world_size() const { return world_size_; }
  /// The rank on this machine (LOCAL_RANK): which CUDA device this rank uses.
  int local_rank() const { return local_rank_; }
  std::chrono::milliseconds timeout() const { return timeout_; }
  /// "gloo", "nccl" or "single".
  virtual std::string backend() const = 0;
  /// True when reduce_scatter runs as the backend's own collective (NCCL), false for the fallback.
  virtual bool native_reduce_scatter() const = 0;

  /// Sums `t` over all ranks, in place.
  virtual void all_reduce(at::Tensor& t) = 0;
  /// flat [world_size · n] = every rank's `shard` [n] in rank order. Both contiguous, same dtype.
  virtual void all_gather(const at::Tensor& shard, at::Tensor& flat) = 0;
  /// shard [n] = sum over ranks of their `flat` [world_size · n] chunk number rank(). The other
  /// chunks of `flat` may serve as scratch: their contents are unspecified afterwards (Gloo's ring
  /// sums in place; NCCL leaves them).
  virtual void reduce_scatter(const at::Tensor& flat, at::Tensor& shard) = 0;
  /// all_reduce / reduce_scatter started in the background (Gloo runs them on its own threads, so
  /// backward can go on). The tensors must stay alive and untouched until wait() returns.
  virtual std::unique_ptr<PendingCollective> all_reduce_async(at::Tensor& t) = 0;
  virtual std::unique_ptr<PendingCollective> reduce_scatter_async(const at::Tensor& flat, at::Tensor& shard) = 0;
  virtual std::unique_ptr<PendingCollective> all_gather_async(const at::Tensor& shard, at::Tensor& flat) = 0;
  /// Copies rank `root`'s `t` to every rank.
  virtual void broadcast(at::Tensor& t, int root) = 0;
  virtual void barrier() = 0;

  /// Runs `work` on every rank as a phase that no collective timeout cuts short: the local work
  /// of unknown length that one rank does while the others wait (rendering samples, writing a
  /// checkpoint, generating demo data, loading a model). Each rank beats a heartbeat into the
  /// rendezvous store while it works; a rank that is done waits for the others and gives up only
  /// when one's heartbeat stops for the timeout (it died or hangs). `work` may use collectives if
  /// every rank's does. An exception from a rank's own `work` is rethrown on that rank (after the
  /// others heard of it); the others throw zs::Error(distributed) naming it and `what`. Every rank
  /// must run the same phases in the same order. With one rank: just `work()`.
  virtual void long_phase(const std::string& /*what*/, const std::function<void()>& work) { work(); }

 protected:
  Communicator(int rank, int world_size, std::chrono::milliseconds timeout, int local_rank = 0)
      : rank_(rank), world_size_(world_size), local_rank_(local_rank), timeout_(timeout) {}
  int rank_;
  int world_size_;
  int local_rank_;
  std::chrono::milliseconds timeout_;
};

}  // namespace zs::comm
