#include "core/file_lock.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <utility>

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include "core/error.h"

namespace zs {

FileLock::FileLock(const std::string& path, Wait wait) {
  std::error_code ec;
  const auto parent = std::filesystem::path(path).parent_path();
  if (!parent.empty()) std::filesystem::create_directories(parent, ec);
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) throw Error(ErrorKind::io, path + ": cannot open the lock file: " + std::strerror(errno));
  int rc;
  do rc = ::flock(fd, LOCK_EX | (wait == Wait::no ? LOCK_NB : 0));
  while (rc != 0 && errno == EINTR);
  if (rc != 0) {
    const int err = errno;
    ::close(fd);
    if (err == EWOULDBLOCK) return;
    throw Error(ErrorKind::io, path + ": cannot lock: " + std::strerror(err));
  }
  fd_ = fd;
}

FileLock::~FileLock() { release(); }

FileLock::FileLock(FileLock&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}

FileLock& FileLock::operator=(FileLock&& other) noexcept {
  if (this != &other) {
    release();
    fd_ = std::exchange(other.fd_, -1);
  }
  return *this;
}

void FileLock::release() {
  if (fd_ < 0) return;
  // Only close: LOCK_UN would also free the lock of a child that inherited this open file, and
  // the lock goes when the last descriptor of it closes.
  ::close(fd_);
  fd_ = -1;
}

bool FileLock::is_held(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) return false;
  const bool free = ::flock(fd, LOCK_EX | LOCK_NB) == 0;
  if (free) ::flock(fd, LOCK_UN);
  ::close(fd);
  return !free;
}

}  // namespace zs
