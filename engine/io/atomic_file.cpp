#include "io/atomic_file.h"

#include <fcntl.h>
#include <ftw.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"

namespace zs::io {

namespace fs = std::filesystem;

namespace {
int remove_entry(const char* path, const struct stat*, int, struct FTW*) { return ::remove(path); }

[[noreturn]] void fail_with_errno(const std::string& path, const std::string& what) {
  throw Error(ErrorKind::io, path + ": cannot " + what + ": " + std::strerror(errno));
}
}  // namespace

void write_file_atomic(const std::string& path, const std::string& contents) {
  const fs::path target(path);
  std::error_code ec;
  if (target.has_parent_path()) fs::create_directories(target.parent_path(), ec);
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail_with_errno(path, "write (creating " + tmp + ")");
  size_t done = 0;
  while (done < contents.size()) {
    const ssize_t n = ::write(fd, contents.data() + done, contents.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      ::close(fd);
      ::unlink(tmp.c_str());
      fail_with_errno(path, "write");
    }
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    ::unlink(tmp.c_str());
    fail_with_errno(path, "flush");
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    ::unlink(tmp.c_str());
    fail_with_errno(path, "rename the temporary file onto");
  }
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    errno = errno ? errno : ENOENT;
    fail_with_errno(path, "open");
  }
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

void remove_tree(const fs::path& path, std::error_code& ec) {
  ec.clear();
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) {
    if (errno != ENOENT) ec = std::error_code(errno, std::generic_category());
    return;
  }
  // Depth first (children before their folder), without following links.
  if (::nftw(path.c_str(), remove_entry, 16, FTW_DEPTH | FTW_PHYS) != 0) ec = std::error_code(errno, std::generic_category());
}

}  // namespace zs::io
