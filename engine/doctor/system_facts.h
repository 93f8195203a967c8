#pragma once
// What this machine and this build offer a training run (`zerostudio doctor`, Help > System
// check): the build's LibTorch, CUDA and NCCL; the NVIDIA driver and its GPUs; host memory,
// pinned memory, /dev/shm; the NVMe offload folder's filesystem, free space and io_uring. Facts
// only: system_check.h judges them. Reading them starts no GPU work.

#include <cstdint>
#include <string>
#include <vector>

namespace zs::doctor {

/// The GPU runtime a CUDA build of this version uses: the pinned PyTorch wheel (its pin is
/// scripts/zs-runtime's, which CMake passes in) with its CUDA, NVIDIA's minimum driver for that
/// CUDA, and the oldest compute capability the wheel has kernels for (older GPUs need
/// `older_runtime`).
struct GpuRuntime {
  std::string torch;       ///< "2.11.0"
  std::string cuda_tag;    ///< "cu130"
  std::string cuda;        ///< "13.0"
  std::string min_driver;  ///< "580.65.06": CUDA 13.x on Linux (NVIDIA's compatibility table)
  int oldest_cc = 75;      ///< cu130 wheels: Turing (7.5) and newer
  /// What serves GPUs below oldest_cc: the same PyTorch's cu126 wheel (Maxwell 5.0 to Hopper).
  std::string older_runtime;
  std::string pin() const { return torch + "+" + cuda_tag; }
};
const GpuRuntime& gpu_runtime();

/// NVIDIA's minimum Linux driver for a CUDA major version ("12.8" -> "525.60.13"; empty: unknown).
std::string min_driver_for_cuda(const std::string& cuda);
/// a < b for dotted version numbers ("535.54.03" < "580.65.06"); missing parts count as 0.
bool version_less(const std::string& a, const std::string& b);

struct GpuFacts {
  int index = 0;
  std::string name;
  std::int64_t memory_bytes = 0;
  int cc = 0;  ///< compute capability × 10 (8.9 -> 89; 0: unknown)
};

/// Where the driver facts come from: the kernel module's version file and nvidia-smi. Tests
/// point both elsewhere (ZEROSTUDIO_NVIDIA_PROC, ZEROSTUDIO_NVIDIA_SMI) to play a machine with a
/// driver, an old one, or none.
struct DriverProbe {
  std::string proc_version = "/proc/driver/nvidia/version";
  std::string nvidia_smi = "nvidia-smi";
  static DriverProbe from_env();
};

struct DriverFacts {
  bool present = false;     ///< the kernel module answers (or nvidia-smi lists a GPU)
  std::string version;      ///< "580.65.06"
  std::string cuda;         ///< the newest CUDA it runs, as nvidia-smi says ("13.0")
  std::vector<GpuFacts> gpus;
  std::string note;         ///< what was not found or failed, in words
};
DriverFacts probe_driver(const DriverProbe& probe);

/// Where the GPU build's LibTorch came from: a runtime folder (scripts/zs-runtime, found through
/// the RUNPATH) whose marker and torch/version.py must name the pin the program was built for.
struct RuntimeFacts {
  bool runtime_build = false;  ///< built against a runtime folder (the GPU build of make run, the package)
  std::string expected;        ///< the pin it was built for ("2.11.0+cu130")
  std::string folder;          ///< the folder LibTorch was loaded from (the runtime's root when it is one)
  std::string found;           ///< torch/version.py's __version__ there (empty: none)
  std::string problem;         ///< why this program cannot run on it, with what to do (empty: fine)
};
RuntimeFacts runtime_facts();
/// runtime_facts().problem for a build against a runtime folder; empty at once for any other
/// build (what main() asks on every start).
std::string runtime_problem();

struct BuildFacts {
  std::string zerostudio, torch;
  bool cuda_build = false;  ///< LibTorch with CUDA (the GPU build)
  std::string cuda;         ///< the CUDA runtime this process loaded (CUDA builds; else empty)
  std::string nccl;         ///< NCCL's version (CUDA builds; else empty)
  bool cuda_usable = false; ///< LibTorch sees a CUDA device now
  int devices = 0;
};
BuildFacts build_facts();

struct HostFacts {
  std::int64_t ram_total = 0, ram_available = 0;  ///< /proc/meminfo
  std::int64_t cgroup_limit = -1;   ///< the process's cgroup memory limit (-1: none)
  std::int64_t memlock_limit = -1;  ///< ulimit -l in bytes (-1: unlimited)
  bool pinned_checked = false;      ///< a pinned buffer was tried (needs a usable CUDA device)
  bool pinned_ok = false;
  std::int64_t pinned_bytes = 0;    ///< its size
  std::string pinned_note;
  std::int64_t shm_total = -1, shm_free = -1;  ///< /dev/shm (-1: absent)
};
HostFacts host_facts(bool try_pinned);

struct FolderFacts {
  std::string path;
  bool exists = false, writable = false;
  std::string filesystem;        ///< ext4, xfs, tmpfs, overlay, nfs, ... (or the magic number)
  std::int64_t free_bytes = -1;
  bool io_uring = false;         ///< a write and read back through io_uring worked there
  std::string io_note;           ///< which backend ran and why not io_uring
};
/// `path`'s filesystem and free space, and a 1 MiB file written and read back there through
/// the NVMe offload's I/O (then removed).
FolderFacts folder_facts(const std::string& path);

}  // namespace zs::doctor
