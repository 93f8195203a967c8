#include "train/file_follower.h"

#include <algorithm>
#include <cstdio>

#include <sys/stat.h>

namespace zs::train {

FileFollower::FileFollower(std::string path) : path_(std::move(path)) {}

bool FileFollower::take_restarted() {
  const bool r = restarted_;
  restarted_ = false;
  return r;
}

std::vector<std::string> FileFollower::read_lines(std::size_t max_bytes) {
  std::vector<std::string> lines;
  more_ = false;
  struct stat st {};
  if (::stat(path_.c_str(), &st) != 0) return lines;
  const auto size = static_cast<std::uint64_t>(st.st_size);
  if ((inode_ != 0 && st.st_ino != inode_) || size < offset_) {  // replaced or truncated
    offset_ = 0;
    partial_.clear();
    restarted_ = true;
  }
  inode_ = st.st_ino;
  if (size == offset_) return lines;
  std::FILE* f = std::fopen(path_.c_str(), "rb");
  if (!f) return lines;
  std::fseek(f, static_cast<long>(offset_), SEEK_SET);
  const std::uint64_t want = std::min<std::uint64_t>(size - offset_, max_bytes);
  std::string chunk(want, '\0');
  const std::size_t got = std::fread(chunk.data(), 1, want, f);
  std::fclose(f);
  chunk.resize(got);
  offset_ += got;
  more_ = offset_ < size;
  std::size_t start = 0;
  for (std::size_t i = 0; i < chunk.size(); ++i) {
    if (chunk[i] != '\n') continue;
    partial_.append(chunk, start, i - start);
    if (!partial_.empty() && partial_.back() == '\r') partial_.pop_back();
    lines.push_back(std::move(partial_));
    partial_.clear();
    start = i + 1;
  }
  partial_.append(chunk, start, std::string::npos);
  return lines;
}

}  // namespace zs::train
