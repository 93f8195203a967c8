#include "zero/nvme_store.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include <ATen/ATen.h>

#include "core/error.h"
#include "io/atomic_file.h"

namespace zs::zero {

namespace fs = std::filesystem;

namespace {

std::string sanitized(const std::string& s) {
  std::string out;
  for (char c : s) out += (std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_') ? c : '_';
  return out.empty() ? "run" : out;
}

}  // namespace

at::Tensor aligned_buffer(std::int64_t numel, at::ScalarType dtype) {
  const std::int64_t bytes = round_up(std::max<std::int64_t>(numel, 1) * static_cast<std::int64_t>(c10::elementSize(dtype)),
                                      kIoAlignment);
  void* p = nullptr;
  if (posix_memalign(&p, kIoAlignment, static_cast<std::size_t>(bytes)) != 0)
    throw Error(ErrorKind::io, "out of memory for a " + std::to_string(bytes) + "-byte NVMe staging buffer");
  std::memset(p, 0, static_cast<std::size_t>(bytes));
  return at::from_blob(p, {numel}, [](void* q) { std::free(q); }, at::TensorOptions().dtype(dtype));
}

NvmeStore::NvmeStore(const std::string& nvme_path, const std::string& run_tag, int rank, io::AsyncIoOptions aio)
    : io_(std::move(aio)) {
  char host[256] = {0};
  gethostname(host, sizeof host - 1);
  dir_ = (fs::path(nvme_path) / ("zerostudio-" + sanitized(run_tag) + "-rank" + std::to_string(rank) + "-" +
                                 sanitized(host) + "-" + std::to_string(getpid())))
             .string();
  std::error_code ec;
  fs::create_directories(dir_, ec);
  if (ec) throw Error(ErrorKind::io, dir_ + ": cannot create the NVMe offload folder: " + ec.message());
}

NvmeStore::~NvmeStore() {
  try {
    io_.wait_all();
  } catch (...) {
    // the files are removed below anyway
  }
  for (auto& f : files_)
    if (f.fd >= 0) ::close(f.fd);
  std::error_code ec;
  io::remove_tree(dir_, ec);
}

std::size_t NvmeStore::file_index(const std::string& name) {
  for (std::size_t i = 0; i < files_.size(); ++i)
    if (fs::path(files_[i].path).filename() == name) return i;
  File f;
  f.path = (fs::path(dir_) / name).string();
  int flags = O_RDWR | O_CREAT | O_TRUNC;
  if (direct_) {
    f.fd = ::open(f.path.c_str(), flags | O_DIRECT, 0600);
    if (f.fd < 0 && errno == EINVAL) direct_ = false;  // tmpfs and some others: buffered I/O
  }
  if (f.fd < 0) f.fd = ::open(f.path.c_str(), flags, 0600);
  if (f.fd < 0) throw Error(ErrorKind::io, f.path + ": cannot create: " + std::strerror(errno));
  files_.push_back(std::move(f));
  return files_.size() - 1;
}

int NvmeStore::add_region(const std::string& file, std::int64_t numel, at::ScalarType dtype) {
  const std::size_t fi = file_index(file);
  File& f = files_[fi];
  Region r{fi, f.size, numel, static_cast<std::int64_t>(c10::elementSize(dtype))};
  const std::int64_t bytes = round_up(std::max<std::int64_t>(numel, 1) * r.elem, kIoAlignment);
  const int rc = posix_fallocate(f.fd, f.size, bytes);
  if (rc != 0)
    throw Error(ErrorKind::io, f.path + ": cannot reserve " + std::to_string(bytes) + " bytes: " + std::strerror(rc) +
                                   "; free space on the NVMe disk or choose another nvme_path");
  f.size += bytes;
  regions_.push_back(r);
  return static_cast<int>(regions_.size() - 1);
}

std::int64_t NvmeStore::block_elements(int region) const { return kIoAlignment / regions_.at(region).elem; }

NvmeStore::Ticket NvmeStore::read(int region, std::int64_t first, std::int64_t count, void* buf) {
  const Region& r = regions_.at(static_cast<std::size_t>(region));
  const std::int64_t bytes = round_up(count * r.elem, kIoAlignment);
  return io_.read(files_[r.file].fd, buf, static_cast<std::size_t>(bytes), r.offset + first * r.elem, files_[r.file].path);
}

NvmeStore::Ticket NvmeStore::write(int region, std::int64_t first, std::int64_t count, const void* buf) {
  const Region& r = regions_.at(static_cast<std::size_t>(region));
  const std::int64_t bytes = round_up(count * r.elem, kIoAlignment);
  return io_.write(files_[r.file].fd, buf, static_cast<std::size_t>(bytes), r.offset + first * r.elem, files_[r.file].path);
}

std::int64_t NvmeStore::bytes() const {
  std::int64_t n = 0;
  for (const auto& f : files_) n += f.size;
  return n;
}

std::vector<std::string> NvmeStore::remove_stale(const std::string& nvme_path) {
  std::vector<std::string> removed;
  char host[256] = {0};
  gethostname(host, sizeof host - 1);
  // Appended piece by piece: GCC 12 warns falsely (-Warray-bounds) on "-" + std::string + "-" here.
  std::string marker = "-";
  marker += sanitized(host);
  marker += '-';
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(nvme_path, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("zerostudio-", 0) != 0 || !entry.is_directory()) continue;
    const auto dash = name.rfind('-');
    if (dash == std::string::npos || dash < marker.size() ||
        name.compare(dash - marker.size() + 1, marker.size(), marker) != 0)
      continue;  // another machine's folder (a shared disk): not ours to judge
    const std::string pid_text = name.substr(dash + 1);
    if (pid_text.empty() || pid_text.find_first_not_of("0123456789") != std::string::npos) continue;
    const pid_t pid = static_cast<pid_t>(std::stol(pid_text));
    if (pid == getpid() || ::kill(pid, 0) == 0 || errno != ESRCH) continue;
    io::remove_tree(entry.path(), ec);
    if (!ec) removed.push_back(entry.path().string());
  }
  return removed;
}

void NvmeStore::check_space(const std::string& path, std::int64_t bytes, const std::string& key) {
  struct statvfs st {};
  if (statvfs(path.c_str(), &st) != 0)
    throw Error(ErrorKind::io, key + ": " + path + ": cannot read the free space: " + std::strerror(errno));
  const auto free = static_cast<std::int64_t>(st.f_bavail) * static_cast<std::int64_t>(st.f_frsize);
  if (free < bytes)
    throw Error(ErrorKind::io, key + ": " + path + " has " + std::to_string(free / (1 << 20)) + " MiB free, NVMe offload needs " +
                                   std::to_string((bytes + (1 << 20) - 1) / (1 << 20)) +
                                   " MiB; free space there or choose another folder");
}

}  // namespace zs::zero
