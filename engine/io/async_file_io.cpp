#include "io/async_file_io.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#ifdef ZS_WITH_IO_URING
#include <liburing.h>
#endif

#include "core/error.h"

namespace zs::io {

struct AsyncFileIo::Request {
  Ticket ticket = 0;
  bool write = false;
  int fd = -1;
  char* buf = nullptr;
  std::size_t bytes = 0;
  std::int64_t offset = 0;
  const std::string* what = nullptr;  // the file's name, kept by the ticket's Transfer
};

struct AsyncFileIo::Uring {
#ifdef ZS_WITH_IO_URING
  io_uring ring{};
#endif
  std::unordered_map<Request*, std::unique_ptr<Request>> in_ring;
};

namespace {

std::string describe(bool write, const std::string& what, std::int64_t offset, const std::string& cause) {
  return what + ": " + (write ? "write" : "read") + " at byte " + std::to_string(offset) + " failed: " + cause +
         (write ? " (is the disk full?)" : "");
}

}  // namespace

AsyncFileIo::AsyncFileIo(AsyncIoOptions options) : o_(std::move(options)), ring_(std::make_unique<Uring>()) {
  o_.block_size = std::max<std::int64_t>(o_.block_size, 4096);
  o_.queue_depth = std::max(o_.queue_depth, 1);
  std::string want = o_.backend;
  if (const char* env = std::getenv("ZS_AIO_BACKEND"); env && *env) want = env;
  if (want != "auto" && want != "io_uring" && want != "threads")
    throw Error(ErrorKind::config, "aio backend '" + want + "' does not exist (auto, io_uring, threads)");
  backend_ = "threads";
  if (want != "threads") {
#ifdef ZS_WITH_IO_URING
    const int rc = io_uring_queue_init(static_cast<unsigned>(o_.queue_depth), &ring_->ring, 0);
    if (rc == 0) backend_ = "io_uring";
    else fallback_reason_ = std::string("io_uring_queue_init failed: ") + std::strerror(-rc) +
                            " (containers often forbid io_uring)";
#else
    fallback_reason_ = "this build has no io_uring (liburing was not found when it was configured)";
#endif
    if (want == "io_uring" && backend_ != "io_uring")
      throw Error(ErrorKind::io, "io_uring was asked for but is not available: " + fallback_reason_);
  }
  if (backend_ == "threads")
    for (int i = 0; i < std::max(o_.threads, 1); ++i) workers_.emplace_back([this] { worker(); });
}

AsyncFileIo::~AsyncFileIo() {
  try {
    wait_all();
  } catch (...) {
    // errors were reported to whoever waited; nothing more to say while shutting down
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  work_.notify_all();
  for (auto& t : workers_) t.join();
#ifdef ZS_WITH_IO_URING
  if (backend_ == "io_uring") io_uring_queue_exit(&ring_->ring);
#endif
}

AsyncFileIo::Ticket AsyncFileIo::read(int fd, void* buf, std::size_t bytes, std::int64_t offset, const std::string& what) {
  return submit(false, fd, static_cast<char*>(buf), bytes, offset, what);
}

AsyncFileIo::Ticket AsyncFileIo::write(int fd, const void* buf, std::size_t bytes, std::int64_t offset,
                                       const std::string& what) {
  return submit(true, fd, const_cast<char*>(static_cast<const char*>(buf)), bytes, offset, what);
}

AsyncFileIo::Ticket AsyncFileIo::submit(bool write, int fd, char* buf, std::size_t bytes, std::int64_t offset,
                                        const std::string& what) {
  std::unique_lock<std::mutex> lock(mutex_);
  const Ticket t = next_++;
  Transfer& tr = transfers_[t];  // map nodes stay put, so requests may point at its name
  tr.what = what;
  const std::string* name = &tr.what;
  const auto block = static_cast<std::size_t>(o_.block_size);
  for (std::size_t done = 0; done < bytes || (bytes == 0 && done == 0); done += block) {
    auto r = std::make_unique<Request>();
    r->ticket = t;
    r->write = write;
    r->fd = fd;
    r->buf = buf + done;
    r->bytes = std::min(block, bytes - done);
    r->offset = offset + static_cast<std::int64_t>(done);
    r->what = name;
    ++tr.remaining;
    queued_.push_back(std::move(r));
    if (bytes == 0) break;
  }
  if (backend_ == "io_uring") pump_locked();
  else work_.notify_all();
  return t;
}

void AsyncFileIo::pump_locked() {
#ifdef ZS_WITH_IO_URING
  int added = 0;
  // Without overlap_events a new batch goes in only once the previous one has completed.
  if (!o_.overlap_events && in_flight_ > 0) return;
  while (!queued_.empty() && in_flight_ < o_.queue_depth) {
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_->ring);
    if (!sqe) break;
    std::unique_ptr<Request> r = std::move(queued_.front());
    queued_.pop_front();
    if (r->write) io_uring_prep_write(sqe, r->fd, r->buf, static_cast<unsigned>(r->bytes), static_cast<__u64>(r->offset));
    else io_uring_prep_read(sqe, r->fd, r->buf, static_cast<unsigned>(r->bytes), static_cast<__u64>(r->offset));
    io_uring_sqe_set_data(sqe, r.get());
    ring_->in_ring.emplace(r.get(), std::move(r));
    ++in_flight_;
    ++added;
    if (o_.single_submit) io_uring_submit(&ring_->ring);
  }
  if (added > 0 && !o_.single_submit) io_uring_submit(&ring_->ring);
#endif
}

void AsyncFileIo::finish_locked(Request& r, const std::string& error) {
  auto it = transfers_.find(r.ticket);
  if (it == transfers_.end()) return;
  if (!error.empty() && it->second.error.empty()) it->second.error = error;
  --it->second.remaining;
}

void AsyncFileIo::reap_one_locked(std::unique_lock<std::mutex>& lock) {
#ifdef ZS_WITH_IO_URING
  (void)lock;
  io_uring_cqe* cqe = nullptr;
  const int rc = io_uring_wait_cqe(&ring_->ring, &cqe);
  if (rc < 0) {
    if (rc == -EINTR) return;
    throw Error(ErrorKind::io, std::string("io_uring_wait_cqe failed: ") + std::strerror(-rc));
  }
  auto* req = static_cast<Request*>(io_uring_cqe_get_data(cqe));
  const int res = cqe->res;
  io_uring_cqe_seen(&ring_->ring, cqe);
  --in_flight_;
  auto owned = std::move(ring_->in_ring.at(req));
  ring_->in_ring.erase(req);
  if (res < 0) {
    finish_locked(*owned, describe(owned->write, *owned->what, owned->offset, std::strerror(-res)));
  } else if (res == 0 && owned->bytes > 0) {
    finish_locked(*owned, describe(owned->write, *owned->what, owned->offset, "the file ended early"));
  } else if (static_cast<std::size_t>(res) < owned->bytes) {
    // A short transfer: the rest goes back to the front of the queue.
    owned->buf += res;
    owned->offset += res;
    owned->bytes -= static_cast<std::size_t>(res);
    queued_.push_front(std::move(owned));
  } else {
    finish_locked(*owned, "");
  }
  pump_locked();
#else
  (void)lock;
#endif
}

void AsyncFileIo::worker() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    work_.wait(lock, [&] { return stopping_ || !queued_.empty(); });
    if (queued_.empty()) return;
    std::unique_ptr<Request> r = std::move(queued_.front());
    queued_.pop_front();
    lock.unlock();
    std::string error;
    std::size_t done = 0;
    while (done < r->bytes) {
      const ssize_t n = r->write ? ::pwrite(r->fd, r->buf + done, r->bytes - done, r->offset + static_cast<off_t>(done))
                                 : ::pread(r->fd, r->buf + done, r->bytes - done, r->offset + static_cast<off_t>(done));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        error = describe(r->write, *r->what, r->offset + static_cast<std::int64_t>(done),
                         n < 0 ? std::strerror(errno) : "the file ended early");
        break;
      }
      done += static_cast<std::size_t>(n);
    }
    lock.lock();
    finish_locked(*r, error);
    done_.notify_all();
  }
}

void AsyncFileIo::wait(Ticket ticket) {
  std::unique_lock<std::mutex> lock(mutex_);
  auto it = transfers_.find(ticket);
  if (it == transfers_.end()) return;
  while (it->second.remaining > 0) {
    if (backend_ == "io_uring") {
      pump_locked();
      reap_one_locked(lock);
    } else {
      done_.wait(lock);
    }
  }
  const std::string error = it->second.error;
  transfers_.erase(it);
  if (!error.empty()) throw Error(ErrorKind::io, error);
}

void AsyncFileIo::wait_all() {
  std::vector<Ticket> all;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const auto& [t, tr] : transfers_) all.push_back(t);
  }
  std::sort(all.begin(), all.end());
  std::string first_error;
  for (Ticket t : all) {
    try {
      wait(t);
    } catch (const Error& e) {
      if (first_error.empty()) first_error = e.what();
    }
  }
  if (!first_error.empty()) throw Error(ErrorKind::io, first_error);
}

}  // namespace zs::io
