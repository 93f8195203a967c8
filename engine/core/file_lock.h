#pragma once
// An advisory lock on a file (flock): held while the object lives, released by the kernel when
// the process dies however it dies (kill -9, a power cut), so a lock that is free tells a live
// holder from a crashed one. Locks are per open file: two FileLocks on one path conflict even
// inside one process.

#include <string>

namespace zs {

class FileLock {
 public:
  enum class Wait { no, yes };

  /// Locks `path` (created when missing, with its folder) exclusively. With Wait::no, returns an
  /// unheld lock (held() false) when another holds it. Throws zs::Error(io) naming the file when
  /// it cannot be opened.
  explicit FileLock(const std::string& path, Wait wait = Wait::yes);
  FileLock() = default;
  ~FileLock();
  FileLock(FileLock&& other) noexcept;
  FileLock& operator=(FileLock&& other) noexcept;
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

  bool held() const { return fd_ >= 0; }
  /// The locked file's descriptor (-1 when not held). A child started after fork() keeps the lock
  /// alive while it lives when this descriptor survives its exec (clear FD_CLOEXEC in the child).
  int fd() const { return fd_; }
  void release();

  /// True when someone holds a lock on `path` now (tries and lets go at once; false when the
  /// file does not exist).
  static bool is_held(const std::string& path);

 private:
  int fd_ = -1;
};

}  // namespace zs
