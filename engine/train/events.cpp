#include "train/events.h"

#include <cerrno>
#include <chrono>
#include <cstring>
#include <iostream>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error.h"

namespace zs::train {

double unix_time() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

namespace {

std::int64_t size_of(int fd) {
  struct stat st{};
  return ::fstat(fd, &st) == 0 ? static_cast<std::int64_t>(st.st_size) : -1;
}

}  // namespace

EventLog::EventLog(const std::string& path, Listener listener) : path_(path), listener_(std::move(listener)) {
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd_ < 0) throw Error(ErrorKind::io, path + ": cannot open the event log for writing: " + std::strerror(errno));
  // A process killed in the middle of a line left it unfinished: the next event starts a line.
  const std::int64_t size = size_of(fd_);
  char last = '\n';
  if (size > 0 && ::pread(fd_, &last, 1, size - 1) == 1 && last != '\n') append("\n");
  reserve(size_of(fd_));
}

EventLog::~EventLog() {
  if (fd_ >= 0) ::close(fd_);
}

void EventLog::reserve(std::int64_t size) {
  // Blocks allocated past the end (the size stays): the appends that fill them need no new
  // space, so a full disk still takes the run's last events (a failed save, run_end). Several
  // processes append to one log (rank 0, the launcher): each reserves ahead of the end it sees.
  if (size >= 0 && ::fallocate(fd_, FALLOC_FL_KEEP_SIZE, size, kReserveBytes) == 0) reserved_to_ = size + kReserveBytes;
}

void EventLog::append(const std::string& text) {
  const std::int64_t before = size_of(fd_);
  std::size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd_, text.data() + done, text.size() - done);  // O_APPEND: at the end
    if (n > 0) {
      done += static_cast<std::size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    const int err = n < 0 ? errno : ENOSPC;
    // Never half a line: what went in of this one comes out again (unless another writer has
    // appended since, whose line then follows the fragment on a line of its own).
    if (done > 0) {
      if (before >= 0 && size_of(fd_) == before + static_cast<std::int64_t>(done)) {
        if (::ftruncate(fd_, before) != 0) (void)!::write(fd_, "\n", 1);
      } else {
        (void)!::write(fd_, "\n", 1);
      }
    }
    if (lost_++ == 0)
      std::cerr << "warning: " << path_ << ": cannot write the event log (" << std::strerror(err)
                << "); events that cannot be written follow here\n";
    std::cerr << "event: " << text << std::flush;
    return;
  }
  const std::int64_t size = before + static_cast<std::int64_t>(text.size());
  if (reserved_to_ - size < kReserveBytes / 2) reserve(size_of(fd_));
}

nlohmann::json EventLog::write(const std::string& type, std::int64_t step, const nlohmann::json& fields) {
  nlohmann::json e = {{"type", type}, {"time", unix_time()}, {"step", step}};
  for (const auto& [k, v] : fields.items()) e[k] = v;
  const std::string line = e.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  {
    std::lock_guard<std::mutex> lock(mutex_);
    append(line);
  }
  if (listener_) listener_(e);
  return e;
}

std::int64_t EventLog::lost() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return lost_;
}

}  // namespace zs::train
