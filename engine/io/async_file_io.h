#pragma once
// Positioned asynchronous reads and writes for NVMe offload: io_uring where the kernel and the
// container allow it, else a pool of threads running pread/pwrite. The backend is chosen when
// the object is made (DeepSpeed's `aio` keys shape both).

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

namespace zs::io {

struct AsyncIoOptions {
  std::int64_t block_size = 1 << 20;  ///< bytes per request: larger transfers are split
  int queue_depth = 8;                ///< requests in flight at once (io_uring entries)
  int threads = 1;                    ///< thread-pool backend: worker threads (intra_op_parallelism)
  bool single_submit = false;         ///< io_uring: submit each request on its own instead of in batches
  bool overlap_events = true;         ///< io_uring: keep submitting while earlier requests complete
  std::string backend = "auto";       ///< auto | io_uring | threads (ZS_AIO_BACKEND overrides)
};

class AsyncFileIo {
 public:
  using Ticket = std::uint64_t;

  explicit AsyncFileIo(AsyncIoOptions options);
  /// Waits for everything in flight.
  ~AsyncFileIo();
  AsyncFileIo(const AsyncFileIo&) = delete;
  AsyncFileIo& operator=(const AsyncFileIo&) = delete;

  /// "io_uring" or "threads".
  const std::string& backend() const { return backend_; }
  /// Why io_uring was not used (empty when it is, or when threads were asked for).
  const std::string& fallback_reason() const { return fallback_reason_; }

  /// Starts reading `bytes` at `offset` of `fd` into `buf`; `what` names the file in errors.
  Ticket read(int fd, void* buf, std::size_t bytes, std::int64_t offset, const std::string& what);
  /// Starts writing `bytes` from `buf` at `offset` of `fd`.
  Ticket write(int fd, const void* buf, std::size_t bytes, std::int64_t offset, const std::string& what);
  /// Waits for one transfer; throws zs::Error (kind io) naming the file, the offset and the cause.
  void wait(Ticket ticket);
  void wait_all();

  struct Request;
  struct Uring;

 private:
  Ticket submit(bool write, int fd, char* buf, std::size_t bytes, std::int64_t offset, const std::string& what);
  void pump_locked();                 // io_uring: move queued requests into the ring
  void reap_one_locked(std::unique_lock<std::mutex>& lock);  // io_uring: handle one completion
  void finish_locked(Request& r, const std::string& error);
  void worker();

  AsyncIoOptions o_;
  std::string backend_, fallback_reason_;
  std::unique_ptr<Uring> ring_;
  std::mutex mutex_;
  std::condition_variable done_, work_;
  struct Transfer {
    int remaining = 0;
    std::string error;
    std::string what;
  };
  std::unordered_map<Ticket, Transfer> transfers_;
  std::deque<std::unique_ptr<Request>> queued_;  // not yet in the ring / not yet taken by a worker
  int in_flight_ = 0;
  Ticket next_ = 1;
  bool stopping_ = false;
  std::vector<std::thread> workers_;
};

}  // namespace zs::io
