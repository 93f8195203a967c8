#include "doctor/system_facts.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <regex>
#include <sstream>

#include <ATen/ATen.h>
#include <c10/core/CPUAllocator.h>

#include "comm/communicator.h"
#include "core/build_info.h"
#include "io/async_file_io.h"

#ifdef ZS_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

namespace zs::doctor {

#ifndef ZS_RUNTIME_TORCH
#error "CMakeLists.txt passes scripts/zs-runtime's pin (ZS_RUNTIME_TORCH, ZS_RUNTIME_CUDA_TAG)"
#endif

const GpuRuntime& gpu_runtime() {
  static const GpuRuntime runtime = [] {
    GpuRuntime r;
    r.torch = ZS_RUNTIME_TORCH;
    r.cuda_tag = ZS_RUNTIME_CUDA_TAG;  // "cu130" -> "13.0"
    const std::string digits = r.cuda_tag.substr(2);
    r.cuda = digits.substr(0, digits.size() - 1) + "." + digits.substr(digits.size() - 1);
    r.min_driver = min_driver_for_cuda(r.cuda);
    r.older_runtime = "torch " + r.torch + "+cu126 (compute capability 5.0 to 9.0, driver >= 525.60.13)";
    return r;
  }();
  return runtime;
}

std::string min_driver_for_cuda(const std::string& cuda) {
  // NVIDIA's CUDA compatibility guide, minor version compatibility on Linux: any driver at or
  // above the major version's minimum runs every runtime of that major version.
  const int major = std::atoi(cuda.c_str());
  if (major == 11) return "450.80.02";
  if (major == 12) return "525.60.13";
  if (major == 13) return "580.65.06";
  return "";
}

bool version_less(const std::string& a, const std::string& b) {
  std::istringstream x(a), y(b);
  std::string p, q;
  while (true) {
    const bool more_a = static_cast<bool>(std::getline(x, p, '.')), more_b = static_cast<bool>(std::getline(y, q, '.'));
    if (!more_a && !more_b) return false;
    const long u = more_a ? std::atol(p.c_str()) : 0, v = more_b ? std::atol(q.c_str()) : 0;
    if (u != v) return u < v;
  }
}

DriverProbe DriverProbe::from_env() {
  DriverProbe p;
  if (const char* proc = std::getenv("ZEROSTUDIO_NVIDIA_PROC")) p.proc_version = proc;
  if (const char* smi = std::getenv("ZEROSTUDIO_NVIDIA_SMI")) p.nvidia_smi = smi;
  return p;
}

namespace {

/// `program args` through the shell, stdout only; empty when it cannot run.
std::string command_output(const std::string& program, const std::string& args, int& status) {
  std::string quoted = "'";
  for (const char c : program) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  quoted += "'";
  const std::string line = quoted + " " + args + " 2>/dev/null";
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen(line.c_str(), "r"), pclose);
  status = -1;
  if (!pipe) return "";
  std::string out;
  char buf[4096];
  for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, pipe.get())) > 0;) out.append(buf, n);
  status = pclose(pipe.release());
  return out;
}

std::string trim(std::string s) {
  const auto first = s.find_first_not_of(" \t\r\n");
  if (first == std::string::npos) return "";
  return s.substr(first, s.find_last_not_of(" \t\r\n") - first + 1);
}

/// A whole file, or empty when it cannot be read (an absent file is a fact here, not an error:
/// io::read_file throws).
std::string read_if_present(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream s;
  s << in.rdbuf();
  return in ? s.str() : std::string();
}

/// A "Key:   123 kB" line of /proc/meminfo in bytes (-1: absent).
std::int64_t meminfo(const std::string& text, const std::string& key) {
  const auto at = text.find(key + ":");
  if (at == std::string::npos) return -1;
  return std::atoll(text.c_str() + at + key.size() + 1) * 1024;
}

std::int64_t cgroup_memory_limit() {
  // cgroup v2: the process's own group (0::/path), else the root's; v1: memory.limit_in_bytes.
  std::string group = "/";
  std::istringstream lines(read_if_present("/proc/self/cgroup"));
  for (std::string line; std::getline(lines, line);)
    if (line.rfind("0::", 0) == 0) group = line.substr(3);
  for (const std::string& file : {"/sys/fs/cgroup" + group + "/memory.max", std::string("/sys/fs/cgroup/memory.max"),
                                  std::string("/sys/fs/cgroup/memory/memory.limit_in_bytes")}) {
    const std::string v = trim(read_if_present(file));
    if (v.empty()) continue;
    if (v == "max") return -1;
    const std::int64_t bytes = std::atoll(v.c_str());
    return bytes <= 0 || bytes >= (std::int64_t{1} << 60) ? -1 : bytes;  // v1's "unlimited" is 2^63 rounded down
  }
  return -1;
}

std::string filesystem_name(long magic) {
  static const std::map<long, std::string> names = {
      {0xEF53, "ext4"},       {0x58465342, "xfs"},  {0x9123683E, "btrfs"},  {0x01021994, "tmpfs"},
      {0x794c7630, "overlay"}, {0x6969, "nfs"},      {0x2fc12fc1, "zfs"},    {0xF2F52010, "f2fs"},
      {0x65735546, "fuse"},    {0x5346544e, "ntfs"}, {0x4d44, "vfat"},       {0x73717368, "squashfs"}};
  const auto it = names.find(magic);
  if (it != names.end()) return it->second;
  char hex[32];
  std::snprintf(hex, sizeof hex, "0x%lx", static_cast<unsigned long>(magic));
  return hex;
}

}  // namespace

DriverFacts probe_driver(const DriverProbe& probe) {
  DriverFacts d;
  // "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.65.06  Sun Jul 27 ..."
  static const std::regex version_re(R"((\d+\.\d+(?:\.\d+)?))");
  const std::string proc = read_if_present(probe.proc_version);
  std::smatch m;
  if (const auto at = proc.find("Kernel Module"); at != std::string::npos) {
    const std::string rest = proc.substr(at);
    if (std::regex_search(rest, m, version_re)) d.version = m[1].str();
  }
  d.present = !d.version.empty();
  int status = 0;
  const std::string list = command_output(
      probe.nvidia_smi, "--query-gpu=index,name,memory.total,compute_cap,driver_version --format=csv,noheader,nounits", status);
  std::istringstream rows(list);
  for (std::string row; std::getline(rows, row);) {
    std::vector<std::string> f;
    std::istringstream cells(row);
    for (std::string cell; std::getline(cells, cell, ',');) f.push_back(trim(cell));
    if (f.size() < 5 || f[0].empty()) continue;
    GpuFacts g;
    g.index = std::atoi(f[0].c_str());
    g.name = f[1];
    g.memory_bytes = std::atoll(f[2].c_str()) << 20;  // MiB
    g.cc = static_cast<int>(std::atof(f[3].c_str()) * 10 + 0.5);
    d.gpus.push_back(g);
    if (d.version.empty()) d.version = f[4];
  }
  if (!d.gpus.empty()) {
    d.present = true;
    // nvidia-smi's banner: "... Driver Version: 580.65.06   CUDA Version: 13.0 ..."
    static const std::regex cuda_re(R"(CUDA Version:\s*(\d+\.\d+))");
    const std::string banner = command_output(probe.nvidia_smi, "", status);
    if (std::regex_search(banner, m, cuda_re)) d.cuda = m[1].str();
  }
#ifdef ZS_WITH_CUDA
  if (d.cuda.empty()) {
    int v = 0;
    if (cudaDriverGetVersion(&v) == cudaSuccess && v > 0) d.cuda = std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10);
  }
#endif
  if (!d.present) d.note = "no NVIDIA driver: " + probe.proc_version + " is absent and " + probe.nvidia_smi + " lists no GPU";
  else if (d.gpus.empty()) d.note = "the driver is loaded but " + probe.nvidia_smi + " lists no GPU";
  return d;
}

BuildFacts build_facts() {
  const BuildInfo info = build_info();
  BuildFacts b;
  b.zerostudio = info.zerostudio_version;
  b.torch = info.torch_version;
  b.cuda_build = info.cuda_compiled;
  b.cuda_usable = info.cuda_available;
  b.devices = info.cuda_devices;
#ifdef ZS_WITH_CUDA
  int v = 0;
  if (cudaRuntimeGetVersion(&v) == cudaSuccess && v > 0) b.cuda = std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10);
#endif
  b.nccl = comm::nccl_version();
  return b;
}

RuntimeFacts runtime_facts() {
  RuntimeFacts f;
#ifdef ZS_RUNTIME_BUILD
  f.runtime_build = true;
#endif
  f.expected = gpu_runtime().pin();
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&c10::GetCPUAllocator), &info) == 0 || info.dli_fname == nullptr) return f;
  // .../torch/lib/libc10.so: torch/version.py beside lib/, the runtime's marker beside torch/.
  const std::string lib = info.dli_fname;
  const std::string lib_dir = lib.substr(0, lib.rfind('/'));
  const std::string torch_dir = lib_dir + "/..";
  const std::string version_py = read_if_present(torch_dir + "/version.py");
  std::smatch m;
  static const std::regex version_line(R"(__version__\s*=\s*'([^']+)')");
  if (std::regex_search(version_py, m, version_line)) f.found = m[1];
  const std::string root = torch_dir + "/..";
  const std::string marker = read_if_present(root + "/zerostudio-runtime.txt");
  char resolved[PATH_MAX];
  // The runtime's root; else a wheel's torch/ folder; else (Debian's LibTorch) the library's own.
  const std::string folder = !marker.empty() ? root : !f.found.empty() ? torch_dir : lib_dir;
  f.folder = realpath(folder.c_str(), resolved) != nullptr ? resolved : folder;
  if (!f.runtime_build) return f;
  const std::string wanted = "torch " + f.expected;
  if (marker.compare(0, wanted.size(), wanted) != 0 || f.found != f.expected)
    f.problem = "this program was built for the GPU runtime torch " + f.expected + ", but the LibTorch it loaded (" +
                f.folder + ") is " + (f.found.empty() ? std::string("of an unknown version") : "torch " + f.found) +
                ": run `zerostudio runtime remove` and `zerostudio runtime install` to make the runtime again, "
                "or rebuild the program against the runtime there";
  return f;
}

std::string runtime_problem() {
#ifdef ZS_RUNTIME_BUILD
  return runtime_facts().problem;
#else
  return "";
#endif
}

HostFacts host_facts(bool try_pinned) {
  HostFacts h;
  const std::string mem = read_if_present("/proc/meminfo");
  h.ram_total = meminfo(mem, "MemTotal");
  h.ram_available = meminfo(mem, "MemAvailable");
  h.cgroup_limit = cgroup_memory_limit();
  rlimit lock{};
  if (getrlimit(RLIMIT_MEMLOCK, &lock) == 0 && lock.rlim_cur != RLIM_INFINITY) h.memlock_limit = static_cast<std::int64_t>(lock.rlim_cur);
  struct statvfs shm {};
  if (statvfs("/dev/shm", &shm) == 0) {
    h.shm_total = static_cast<std::int64_t>(shm.f_blocks) * static_cast<std::int64_t>(shm.f_frsize);
    h.shm_free = static_cast<std::int64_t>(shm.f_bavail) * static_cast<std::int64_t>(shm.f_frsize);
  }
  if (try_pinned) {
    // What offload's host buffers and the side-stream copies ask for (pin_memory: true).
    h.pinned_checked = true;
    h.pinned_bytes = std::int64_t{256} << 20;
    try {
      const at::Tensor t = at::empty({h.pinned_bytes}, at::TensorOptions().dtype(at::kByte).pinned_memory(true));
      h.pinned_ok = t.is_pinned();
      if (!h.pinned_ok) h.pinned_note = "the buffer came back unpinned";
    } catch (const std::exception& e) {
      h.pinned_note = e.what();
      if (const auto nl = h.pinned_note.find('\n'); nl != std::string::npos) h.pinned_note.resize(nl);
    }
  } else {
    h.pinned_note = "not tried: no usable CUDA device";
  }
  return h;
}

FolderFacts folder_facts(const std::string& path) {
  FolderFacts f;
  f.path = path;
  struct statfs fs {};
  if (statfs(path.c_str(), &fs) != 0) {
    f.io_note = path + ": " + std::strerror(errno);
    return f;
  }
  f.exists = true;
  f.filesystem = filesystem_name(static_cast<long>(fs.f_type));
  f.free_bytes = static_cast<std::int64_t>(fs.f_bavail) * static_cast<std::int64_t>(fs.f_bsize);
  f.writable = access(path.c_str(), W_OK) == 0;
  if (!f.writable) {
    f.io_note = path + " is not writable by this user";
    return f;
  }
  // A 1 MiB file written and read back as NVMe offload does: O_DIRECT where the filesystem
  // takes it, through the I/O backend its runs would choose.
  std::string name = path + "/zerostudio-doctor-XXXXXX";
  const int tmp = mkstemp(name.data());
  if (tmp < 0) {
    f.io_note = "cannot create a file in " + path + ": " + std::strerror(errno);
    return f;
  }
  ::close(tmp);
  int fd = ::open(name.c_str(), O_RDWR | O_DIRECT);
  const bool direct = fd >= 0;
  if (fd < 0) fd = ::open(name.c_str(), O_RDWR);
  constexpr std::size_t kBytes = 1 << 20;
  void* raw = nullptr;
  if (fd < 0 || posix_memalign(&raw, 4096, kBytes * 2) != 0) {
    f.io_note = "cannot open " + name + ": " + std::strerror(errno);
    if (fd >= 0) ::close(fd);
    std::remove(name.c_str());
    return f;
  }
  std::unique_ptr<char, void (*)(void*)> buf(static_cast<char*>(raw), std::free);
  for (std::size_t i = 0; i < kBytes; ++i) buf.get()[i] = static_cast<char>(i * 131 + 7);
  try {
    io::AsyncFileIo aio(io::AsyncIoOptions{});
    aio.wait(aio.write(fd, buf.get(), kBytes, 0, name));
    aio.wait(aio.read(fd, buf.get() + kBytes, kBytes, 0, name));
    const bool same = std::memcmp(buf.get(), buf.get() + kBytes, kBytes) == 0;
    f.io_uring = aio.backend() == "io_uring" && same;
    f.io_note = aio.backend() + (direct ? ", direct I/O" : ", buffered I/O (the filesystem refuses O_DIRECT)");
    if (!aio.fallback_reason().empty()) f.io_note += "; io_uring: " + aio.fallback_reason();
    if (!same) f.io_note += "; the bytes read back differ from those written";
  } catch (const std::exception& e) {
    f.io_note = e.what();
  }
  ::close(fd);
  std::remove(name.c_str());
  return f;
}

}  // namespace zs::doctor
