#pragma once
// Files for NVMe offload: one folder per run and rank under `nvme_path`
// (zerostudio-<run>-rank<R>-<host>-<pid>), so runs and ranks never collide; removed when the
// store goes away, also when training failed. Arrays live in regions of a few files, aligned
// for O_DIRECT (used where the file system allows it), read and written asynchronously.

#include <cstdint>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "io/async_file_io.h"

namespace zs::zero {

/// Bytes every region, transfer and buffer is aligned to (O_DIRECT's requirement).
constexpr std::int64_t kIoAlignment = 4096;

/// `n` rounded up to a multiple of `to`.
constexpr std::int64_t round_up(std::int64_t n, std::int64_t to) { return (n + to - 1) / to * to; }

/// A CPU tensor of `numel` elements whose storage starts on a kIoAlignment boundary and is
/// a whole number of kIoAlignment blocks long (so rounded-up transfers stay inside it).
at::Tensor aligned_buffer(std::int64_t numel, at::ScalarType dtype);

class NvmeStore {
 public:
  using Ticket = io::AsyncFileIo::Ticket;

  /// Creates the folder; throws zs::Error naming `nvme_path` when it cannot.
  NvmeStore(const std::string& nvme_path, const std::string& run_tag, int rank, io::AsyncIoOptions aio);
  /// Waits for transfers in flight, closes the files and removes the folder.
  ~NvmeStore();
  NvmeStore(const NvmeStore&) = delete;
  NvmeStore& operator=(const NvmeStore&) = delete;

  const std::string& dir() const { return dir_; }
  const io::AsyncFileIo& io() const { return io_; }
  /// Whether the files were opened with O_DIRECT (not every file system supports it).
  bool direct() const { return direct_; }

  /// Reserves a region of `numel` elements of `dtype` at the end of file `file` (made on first
  /// use, space allocated at once so a full disk fails here, naming the file). Returns its id.
  int add_region(const std::string& file, std::int64_t numel, at::ScalarType dtype);
  /// Elements per aligned block of a region (transfers start at multiples of this).
  std::int64_t block_elements(int region) const;
  /// Reads elements [first, first + count) of a region into `buf` (an aligned_buffer of at least
  /// count elements rounded up to a block). `first` must be a multiple of block_elements().
  Ticket read(int region, std::int64_t first, std::int64_t count, void* buf);
  Ticket write(int region, std::int64_t first, std::int64_t count, const void* buf);
  void wait(Ticket ticket) { io_.wait(ticket); }
  /// Bytes the files take.
  std::int64_t bytes() const;

  /// Removes folders under `nvme_path` that a killed run of this machine left behind (named
  /// for this host and a process that no longer exists); returns their paths.
  static std::vector<std::string> remove_stale(const std::string& nvme_path);

  /// Throws zs::Error when `bytes` do not fit in the free space of `path`'s file system; `key`
  /// names the config key in the message.
  static void check_space(const std::string& path, std::int64_t bytes, const std::string& key);

 private:
  struct File {
    std::string path;
    int fd = -1;
    std::int64_t size = 0;
  };
  struct Region {
    std::size_t file;
    std::int64_t offset;  // bytes
    std::int64_t numel;
    std::int64_t elem;    // bytes per element
  };
  std::size_t file_index(const std::string& name);
  std::string dir_;
  bool direct_ = true;
  std::vector<File> files_;
  std::vector<Region> regions_;
  io::AsyncFileIo io_;
};

}  // namespace zs::zero
