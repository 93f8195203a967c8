#pragma once
// Follows a text file that another process appends to (events.jsonl, logs/rank<R>.log): each
// call returns the complete lines added since the last one; a line still being written waits for
// its newline. A file that is replaced or truncated is read again from its start.

#include <cstdint>
#include <string>
#include <vector>

namespace zs::train {

class FileFollower {
 public:
  explicit FileFollower(std::string path);

  /// New complete lines (without the newline), at most about `max_bytes` per call so a huge
  /// file is read in slices. A missing file gives nothing (it may appear later).
  std::vector<std::string> read_lines(std::size_t max_bytes = 8u << 20);
  /// True when the last read_lines() stopped at max_bytes with more to read.
  bool more() const { return more_; }
  /// True when the file was found replaced or truncated (the caller may reset what it built).
  bool take_restarted();
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::uint64_t offset_ = 0;
  std::uint64_t inode_ = 0;
  std::string partial_;
  bool more_ = false;
  bool restarted_ = false;
};

}  // namespace zs::train
