#include "doctor/system_check.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <sstream>

#include <nlohmann/json.hpp>

#include "config/config_loader.h"
#include "core/install_paths.h"
#include "core/text.h"
#include "estimate/fastest_fitting.h"
#include "estimate/memory_estimator.h"
#include "models/model_shape.h"

namespace fs = std::filesystem;

namespace zs::doctor {

const char* to_string(Level level) {
  switch (level) {
    case Level::ok: return "ok";
    case Level::note: return "note";
    case Level::warning: return "warning";
    case Level::problem: return "problem";
  }
  return "note";
}

std::int64_t SystemReport::host_budget() const {
  std::int64_t budget = host.ram_available > 0 ? host.ram_available : host.ram_total;
  if (host.cgroup_limit > 0) budget = budget > 0 ? std::min(budget, host.cgroup_limit) : host.cgroup_limit;
  return budget;
}

namespace {

/// A model counts as full size from here (SD 1.5's 1.07 G parameters with its encoders and VAE
/// and up; every tiny preset and test fixture is far below).
constexpr std::int64_t kFullSizeParameters = 500'000'000;
/// Below this, /dev/shm is a container's default (64 MiB) rather than a machine's.
constexpr std::int64_t kShmEnough = std::int64_t{1} << 30;

std::string cc_text(int cc) { return std::to_string(cc / 10) + "." + std::to_string(cc % 10); }

std::int64_t smallest_gpu(const DriverFacts& d) {
  std::int64_t m = 0;
  for (const auto& g : d.gpus)
    if (g.memory_bytes > 0 && (m == 0 || g.memory_bytes < m)) m = g.memory_bytes;
  return m;
}

bool uses_nvme(const config::TrainerConfig& c) {
  return c.zero.offload_optimizer.device == "nvme" || c.zero.offload_param.device == "nvme";
}

std::string nvme_folder(const config::TrainerConfig& c) {
  if (c.zero.offload_optimizer.device == "nvme") return c.zero.offload_optimizer.nvme_path;
  if (c.zero.offload_param.device == "nvme") return c.zero.offload_param.nvme_path;
  return "";
}

std::string default_configs_dir() {
  const InstallPaths& paths = install_paths();
  if (paths.installed) return paths.data_dir + "/configs";
#ifdef ZS_SOURCE_CONFIGS
  return ZS_SOURCE_CONFIGS;
#else
  return "";
#endif
}

/// What `cfg` needs here, through the estimator with this machine's smallest GPU.
ConfigNeed need_of(const std::string& file, const config::TrainerConfig& cfg, std::int64_t gpu_memory,
                   std::int64_t host_budget) {
  ConfigNeed n;
  n.file = file;
  n.model = cfg.model.preset.empty() ? cfg.model.path : cfg.model.preset;
  n.uses_gpu = !cfg.launch.use_cpu;
  const auto shape = models::model_shape(cfg);
  estimate::EstimateOptions o = estimate::options_from_config(cfg);
  o.gpu_memory = n.uses_gpu ? gpu_memory : 0;
  const estimate::MemoryEstimate e = estimate::estimate_memory(shape, o);
  n.processes = std::max(o.processes_per_machine, 1);
  n.parameters = e.parameters + e.frozen_base_parameters + e.frozen_parameters - e.adapter_parameters;
  n.gpu_bytes = n.uses_gpu ? e.gpu.total() : 0;
  n.host_bytes = estimate::host_memory_needed(e) + (n.uses_gpu ? 0 : e.gpu.total() * n.processes);
  n.nvme_bytes = e.nvme * n.processes;
  n.fits_gpu = !n.uses_gpu || gpu_memory <= 0 || n.gpu_bytes <= gpu_memory;
  n.fits_host = host_budget <= 0 || n.host_bytes <= host_budget;
  return n;
}

void add(SystemReport& r, Level level, std::string topic, std::string message, std::string fix = "") {
  r.findings.push_back({level, std::move(topic), std::move(message), std::move(fix)});
}

/// Why a run would not use a GPU here, or empty when it would.
std::string why_no_gpu(const SystemReport& r) {
  if (!r.build.cuda_build) return "this is the CPU build (LibTorch " + r.build.torch + " without CUDA)";
  if (!r.driver.present) return "there is no NVIDIA driver";
  if (!r.build.cuda_usable) return "LibTorch sees no CUDA device";
  return "";
}

std::string gpu_build_fix() {
  return "use the GPU build: `make run` on this machine builds it (its CUDA LibTorch comes from the pinned "
         "PyTorch " + gpu_runtime().torch + " wheel), or install the zerostudio-cuda package";
}

}  // namespace

std::string DevicePlan::text() const { return gpu ? device : "CPU (" + why_cpu + ")"; }

std::string DevicePlan::consent_message(const std::string& file, const std::string& how) const {
  return file + " trains " + model + ", a full-size model (" + std::to_string(parameters / 1'000'000) +
         " M parameters in its denoiser), on the CPU because " + why_cpu + ": that takes hours to days a GPU does in minutes. " +
         (fix.empty() ? "" : "To use a GPU: " + fix + ". ") + "To train on the CPU anyway: " + how + ".";
}

DevicePlan where_it_trains(const config::TrainerConfig& cfg, int processes, const DriverProbe& probe) {
  DevicePlan p;
  p.model = cfg.model.preset.empty() ? cfg.model.path : cfg.model.preset;
  if (cfg.launch.use_cpu) {
    p.why_cpu = "the config sets launch.use_cpu: true";
    p.fix = "set launch.use_cpu: false";
    p.device = "CPU";
    return p;
  }
  const BuildFacts build = build_facts();
  if (!build.cuda_build) {
    p.why_cpu = "this is the CPU build (LibTorch " + build.torch + " without CUDA)";
    p.fix = gpu_build_fix();
  } else if (!build.cuda_usable) {
    const DriverFacts driver = probe_driver(probe);
    p.why_cpu = !driver.present ? "there is no NVIDIA driver" : "LibTorch sees no CUDA device (`zerostudio doctor` says why)";
    p.fix = !driver.present ? "install NVIDIA's driver " + gpu_runtime().min_driver + " or newer" : "see `zerostudio doctor`";
  }
  if (!p.why_cpu.empty()) {
    p.device = "CPU";
    return p;
  }
  p.gpu = true;
  const DriverFacts driver = probe_driver(probe);
  const int used = std::max(1, std::min(processes, std::max(build.devices, 1)));
  std::string names;
  for (int i = 0; i < used && i < static_cast<int>(driver.gpus.size()); ++i) {
    const std::string one = driver.gpus[static_cast<std::size_t>(i)].name + " (" +
                            format_bytes(driver.gpus[static_cast<std::size_t>(i)].memory_bytes) + ")";
    if (names.find(one) == std::string::npos) names += (names.empty() ? "" : ", ") + one;
  }
  p.device = (used == 1 ? "GPU 0" : "GPUs 0-" + std::to_string(used - 1)) + (names.empty() ? "" : ": " + names);
  return p;
}

DevicePlan plan_device(const config::TrainerConfig& cfg, int processes, const DriverProbe& probe) {
  DevicePlan p = where_it_trains(cfg, processes, probe);
  if (p.gpu) return p;  // the size decides nothing on a GPU
  // The size of what trains: the model files when they are there (a preset beside a path only
  // names the architecture the estimate assumes; tests point ready configs at tiny fixtures),
  // else the preset's.
  std::error_code ec;
  const bool files = !cfg.model.path.empty() && fs::exists(cfg.model.path, ec);
  config::TrainerConfig from_files = cfg;
  if (files) from_files.model.preset.clear();
  for (const config::TrainerConfig* c : std::initializer_list<const config::TrainerConfig*>{&from_files, &cfg}) {
    try {
      // The denoiser's own weights (UNet or transformer): frozen encoders a family counts from
      // the architecture alone (Qwen-Image's 7 B language model) say nothing of a test fixture.
      const models::ModelShape shape = models::model_shape(*c);
      p.parameters = 0;
      for (const auto& unit : shape.units) p.parameters += unit.parameters;
      break;
    } catch (const std::exception&) {
      p.parameters = 0;  // not estimable (the run itself names the problem): never refused for size
    }
  }
  // A full-size preset without model.path cannot train at all: the trainer says so, not this.
  p.full_size = p.parameters >= kFullSizeParameters && !cfg.model.path.empty();
  return p;
}

void judge(SystemReport& r) {
  r.findings.clear();
  const GpuRuntime& rt = gpu_runtime();
  r.runtime_cuda = r.build.cuda_build && !r.build.cuda.empty() ? r.build.cuda : rt.cuda;
  r.runtime_min_driver = min_driver_for_cuda(r.runtime_cuda);
  r.driver_ok = r.driver.present && !r.runtime_min_driver.empty() && !version_less(r.driver.version, r.runtime_min_driver);
  r.unsupported_gpus.clear();
  for (const auto& g : r.driver.gpus)
    if (g.cc > 0 && g.cc < rt.oldest_cc) r.unsupported_gpus.push_back(g.index);
  const std::string gpu_build_fix = doctor::gpu_build_fix();

  // The build, its runtime and the driver.
  if (!r.runtime.problem.empty())
    add(r, Level::problem, "runtime", r.runtime.problem);
  else if (r.runtime.runtime_build)
    add(r, Level::ok, "runtime", "torch " + r.runtime.found + " in " + r.runtime.folder +
        " (`zerostudio runtime remove` frees its space)");
  if (!r.build.cuda_build) {
    if (r.driver.present && !r.driver.gpus.empty())
      add(r, Level::warning, "build", "this is the CPU build (LibTorch " + r.build.torch + "): runs train on the CPU although "
          "this machine has " + std::to_string(r.driver.gpus.size()) + " NVIDIA GPU(s)", gpu_build_fix);
    else
      add(r, Level::note, "build", "this is the CPU build (LibTorch " + r.build.torch + "): runs train on the CPU");
  } else {
    add(r, Level::ok, "build", "GPU build: LibTorch " + r.build.torch + ", CUDA " + (r.build.cuda.empty() ? "?" : r.build.cuda) +
        (r.build.nccl.empty() ? "" : ", NCCL " + r.build.nccl));
  }
  if (!r.driver.present) {
    add(r, r.build.cuda_build ? Level::problem : Level::note, "driver", r.driver.note,
        "install NVIDIA's driver " + r.runtime_min_driver + " or newer (Debian 12: the nvidia-driver package from "
        "bookworm-backports or NVIDIA's repository), then reboot; in a container, start it with the GPUs (docker run --gpus all)");
  } else {
    add(r, Level::ok, "driver", "NVIDIA driver " + r.driver.version + (r.driver.cuda.empty() ? "" : " (CUDA " + r.driver.cuda + ")"));
    if (!r.runtime_min_driver.empty() && !r.driver.version.empty() && !r.driver_ok)
      add(r, Level::problem, "driver", "driver " + r.driver.version + " is older than CUDA " + r.runtime_cuda +
          " needs (" + r.runtime_min_driver + " or newer): the GPU runtime cannot start on it",
          "update the NVIDIA driver to " + r.runtime_min_driver + " or newer; or keep this driver and use a runtime "
          "for an older CUDA (" + rt.older_runtime + ")");
    for (const auto& g : r.driver.gpus)
      if (std::count(r.unsupported_gpus.begin(), r.unsupported_gpus.end(), g.index))
        add(r, Level::problem, "gpu", "GPU " + std::to_string(g.index) + " (" + g.name + ", compute capability " + cc_text(g.cc) +
            ") is older than the runtime's oldest (" + cc_text(rt.oldest_cc) + "): CUDA " + r.runtime_cuda +
            " has no kernels for it", "use " + rt.older_runtime + ", or a newer GPU");
    if (r.build.cuda_build && !r.build.cuda_usable && !r.driver.gpus.empty())
      add(r, Level::problem, "gpu", "the driver lists " + std::to_string(r.driver.gpus.size()) +
          " GPU(s) but LibTorch sees none", "check CUDA_VISIBLE_DEVICES, that /dev/nvidia* can be opened by this user, "
          "and the driver's version above");
  }

  // Host memory.
  const std::int64_t budget = r.host_budget();
  if (r.host.cgroup_limit > 0 && r.host.cgroup_limit < r.host.ram_total)
    add(r, Level::note, "host memory", "this process's cgroup may use " + format_bytes(r.host.cgroup_limit) + " of the " +
        format_bytes(r.host.ram_total) + " installed: runs have that");
  if (!r.ready_configs.empty()) {
    std::string too_big;
    int count = 0;
    for (const auto& c : r.ready_configs)
      if (c.error.empty() && !c.fits_host) {
        too_big += (count++ ? ", " : "") + c.file + " (" + format_bytes(c.host_bytes) + ")";
      }
    if (count == 0)
      add(r, Level::ok, "host memory", "every ready config fits the " + format_bytes(budget) + " of host memory available");
    else
      add(r, Level::warning, "host memory", std::to_string(count) + " of " + std::to_string(r.ready_configs.size()) +
          " ready configs need more host memory than the " + format_bytes(budget) + " available: " + too_big,
          "close other programs, or choose a setting with less CPU offload (`zerostudio estimate` shows each setting's host need)");
  }
  if (r.host.memlock_limit >= 0 && r.host.memlock_limit < (std::int64_t{64} << 20))
    add(r, Level::note, "pinned memory", "ulimit -l is " + format_bytes(r.host.memlock_limit) +
        ": CUDA's pinned buffers are not bound by it, but NCCL over InfiniBand/RDMA is",
        "for several machines over InfiniBand: `ulimit -l unlimited` (containers: --ulimit memlock=-1)");
  if (r.host.pinned_checked && !r.host.pinned_ok)
    add(r, Level::problem, "pinned memory", "a " + format_bytes(r.host.pinned_bytes) + " pinned host buffer could not be allocated: " +
        r.host.pinned_note, "set zero.offload_optimizer.pin_memory and zero.offload_param.pin_memory to false, or raise the limits above");
  if (r.host.shm_total < 0)
    add(r, Level::warning, "/dev/shm", "/dev/shm is absent: several processes on one GPU machine (NCCL) need it",
        "mount a tmpfs there (containers: --ipc=host or --shm-size=8g)");
  else if (r.host.shm_total < kShmEnough)
    add(r, Level::warning, "/dev/shm", "/dev/shm holds only " + format_bytes(r.host.shm_total) +
        ": NCCL's buffers between processes on one machine need more", "containers: --ipc=host or --shm-size=8g");

  // The NVMe offload folder.
  const FolderFacts& f = r.offload;
  if (!f.exists || !f.writable)
    add(r, Level::note, "offload folder", f.io_note.empty() ? f.path + " cannot be used" : f.io_note);
  else if (!f.io_uring)
    add(r, Level::note, "offload folder", f.path + " (" + f.filesystem + "): NVMe offload runs without io_uring there (" +
        f.io_note + ")", "for faster offload: a kernel with io_uring allowed (containers: a seccomp profile that permits it)");
  if (f.exists && f.filesystem == "tmpfs")
    add(r, Level::note, "offload folder", f.path + " is tmpfs (RAM): offloading to it saves no host memory",
        "point zero.offload_*.nvme_path at a folder on an SSD");

  // The chosen config.
  r.chosen_runs = true;
  if (!r.chosen) return;
  ConfigNeed& c = *r.chosen;
  auto cannot = [&](std::string message, std::string fix) {
    add(r, Level::problem, "config", std::move(message), std::move(fix));
    r.chosen_runs = false;
  };
  if (!c.error.empty()) {
    cannot(c.file + ": " + c.error, "fix the config (`zerostudio config validate` lists every problem)");
    return;
  }
  const std::string no_gpu = why_no_gpu(r);
  if (c.uses_gpu && !no_gpu.empty()) {
    const std::string fix = !r.build.cuda_build ? gpu_build_fix
                            : !r.driver.present ? "install the NVIDIA driver (see the driver finding)"
                                                : "see the GPU findings above";
    if (c.parameters >= kFullSizeParameters)
      cannot(c.file + " trains a full-size model (" + std::to_string(c.parameters / 1'000'000) + " M parameters) on a GPU, but " +
             no_gpu, fix + "; or set launch.use_cpu: true to train on the CPU on purpose");
    else
      add(r, Level::warning, "config", c.file + " asks for a GPU, but " + no_gpu + ": it trains on the CPU", fix);
  }
  const bool gpu = c.uses_gpu && no_gpu.empty();
  if (gpu && c.processes > static_cast<int>(r.driver.gpus.size()) && !r.driver.gpus.empty())
    cannot(c.file + " starts " + std::to_string(c.processes) + " processes on this machine, which has " +
           std::to_string(r.driver.gpus.size()) + " GPU(s): NCCL needs one GPU per process",
           "set launch.num_processes to " + std::to_string(r.driver.gpus.size()));
  if (gpu && !c.fits_gpu)
    cannot(c.file + " needs " + format_bytes(c.gpu_bytes) + " per GPU; the smallest GPU here has " +
           format_bytes(smallest_gpu(r.driver)), "`zerostudio estimate " + c.file + "` shows the lowest ZeRO setting that fits");
  if (!c.fits_host)
    cannot(c.file + " needs " + format_bytes(c.host_bytes) + " of host memory; " + format_bytes(budget) + " is available",
           "less CPU offload (NVMe offload for the optimizer), fewer processes, or close other programs");
  if (gpu && c.processes > 1 && r.host.shm_total < kShmEnough)
    add(r, Level::warning, "config", c.file + " runs " + std::to_string(c.processes) + " processes on one machine with a small /dev/shm",
        "see the /dev/shm finding");
  if (c.nvme_bytes > 0) {
    if (!f.exists || !f.writable) cannot(c.file + " offloads to NVMe in " + f.path + ", which " +
                                         (f.exists ? "is not writable" : "does not exist"), "create the folder or point nvme_path elsewhere");
    else if (f.free_bytes >= 0 && f.free_bytes < c.nvme_bytes)
      cannot(c.file + " writes " + format_bytes(c.nvme_bytes) + " to " + f.path + ", which has " + format_bytes(f.free_bytes) + " free",
             "free space there or point nvme_path at a larger drive");
  }
  if (r.chosen_runs) add(r, Level::ok, "config", c.file + " can run here" + (gpu ? " on the GPU" : " on the CPU"));
}

SystemReport check_system(const CheckOptions& options) {
  SystemReport r;
  r.build = build_facts();
  r.runtime = runtime_facts();
  r.driver = probe_driver(options.probe);
  r.host = host_facts(r.build.cuda_usable);
  const std::int64_t gpu_memory = smallest_gpu(r.driver);
  std::optional<config::LoadedConfig> loaded;
  std::string config_error;
  if (!options.config.empty()) {
    try {
      loaded = config::load_config_file(options.config, options.sets);
    } catch (const std::exception& e) {
      config_error = e.what();
    }
  }
  std::string folder = options.offload_dir;
  if (folder.empty() && loaded && uses_nvme(loaded->config)) folder = nvme_folder(loaded->config);
  if (folder.empty()) folder = std::getenv("TMPDIR") && *std::getenv("TMPDIR") ? std::getenv("TMPDIR") : "/tmp";
  r.offload = folder_facts(folder);
  const std::string dir = options.configs_dir.empty() ? default_configs_dir() : options.configs_dir;
  std::vector<std::string> files;
  std::error_code ec;
  if (!dir.empty())
    for (const auto& entry : fs::directory_iterator(dir, ec))
      if (entry.path().extension() == ".yaml") files.push_back(entry.path().string());
  std::sort(files.begin(), files.end());
  for (const auto& file : files) {
    ConfigNeed n;
    try {
      n = need_of(fs::path(file).filename().string(), config::load_config_file(file).config, gpu_memory, r.host_budget());
    } catch (const std::exception& e) {
      n.file = fs::path(file).filename().string();
      n.error = e.what();
    }
    r.ready_configs.push_back(std::move(n));
  }
  if (!options.config.empty()) {
    if (loaded) {
      try {
        r.chosen = need_of(options.config, loaded->config, gpu_memory, r.host_budget());
      } catch (const std::exception& e) {
        config_error = e.what();
      }
    }
    if (!r.chosen) {
      r.chosen = ConfigNeed{};
      r.chosen->file = options.config;
      r.chosen->error = config_error;
    }
  }
  judge(r);
  return r;
}

nlohmann::json to_json(const SystemReport& r) {
  using nlohmann::json;
  json gpus = json::array();
  for (const auto& g : r.driver.gpus)
    gpus.push_back({{"index", g.index}, {"name", g.name}, {"memory_bytes", g.memory_bytes},
                    {"compute_capability", g.cc > 0 ? json(cc_text(g.cc)) : json(nullptr)}});
  auto need = [](const ConfigNeed& c) {
    return json{{"file", c.file},          {"model", c.model},           {"parameters", c.parameters},
                {"processes", c.processes}, {"uses_gpu", c.uses_gpu},    {"gpu_bytes", c.gpu_bytes},
                {"host_bytes", c.host_bytes}, {"nvme_bytes", c.nvme_bytes}, {"fits_gpu", c.fits_gpu},
                {"fits_host", c.fits_host}, {"error", c.error.empty() ? json(nullptr) : json(c.error)}};
  };
  json ready = json::array();
  for (const auto& c : r.ready_configs) ready.push_back(need(c));
  json findings = json::array();
  for (const auto& f : r.findings)
    findings.push_back({{"level", to_string(f.level)}, {"topic", f.topic}, {"message", f.message}, {"fix", f.fix}});
  const GpuRuntime& rt = gpu_runtime();
  return json{
      {"build", {{"zerostudio", r.build.zerostudio}, {"torch", r.build.torch}, {"cuda_build", r.build.cuda_build},
                 {"cuda", r.build.cuda}, {"nccl", r.build.nccl}, {"cuda_usable", r.build.cuda_usable},
                 {"devices", r.build.devices}}},
      {"driver", {{"present", r.driver.present}, {"version", r.driver.version}, {"cuda", r.driver.cuda}, {"note", r.driver.note}}},
      {"gpus", gpus},
      {"runtime", {{"torch", rt.torch}, {"cuda", r.runtime_cuda}, {"min_driver", r.runtime_min_driver},
                   {"driver_ok", r.driver_ok},
                   {"oldest_compute_capability", cc_text(rt.oldest_cc)}, {"unsupported_gpus", r.unsupported_gpus},
                   {"older_runtime", rt.older_runtime}, {"pin", rt.pin()},
                   {"runtime_build", r.runtime.runtime_build}, {"folder", r.runtime.folder},
                   {"found", r.runtime.found}, {"problem", r.runtime.problem}}},
      {"host", {{"ram_total", r.host.ram_total}, {"ram_available", r.host.ram_available},
                {"cgroup_limit", r.host.cgroup_limit}, {"memlock_limit", r.host.memlock_limit}, {"budget", r.host_budget()},
                {"pinned", {{"checked", r.host.pinned_checked}, {"ok", r.host.pinned_ok}, {"bytes", r.host.pinned_bytes},
                            {"note", r.host.pinned_note}}}}},
      {"shm", {{"total", r.host.shm_total}, {"free", r.host.shm_free}}},
      {"offload", {{"path", r.offload.path}, {"exists", r.offload.exists}, {"writable", r.offload.writable},
                   {"filesystem", r.offload.filesystem}, {"free_bytes", r.offload.free_bytes},
                   {"io_uring", r.offload.io_uring}, {"note", r.offload.io_note}}},
      {"ready_configs", ready},
      {"config", r.chosen ? need(*r.chosen) : json(nullptr)},
      {"runs", r.chosen_runs},
      {"findings", findings}};
}

std::string to_text(const SystemReport& r) {
  std::ostringstream out;
  const GpuRuntime& rt = gpu_runtime();
  out << "ZeroStudio " << r.build.zerostudio << " system check\n\n";
  out << "Build       LibTorch " << r.build.torch
      << (r.build.cuda_build ? ", CUDA " + (r.build.cuda.empty() ? std::string("?") : r.build.cuda) +
                                   (r.build.nccl.empty() ? "" : ", NCCL " + r.build.nccl) +
                                   ", devices usable: " + std::to_string(r.build.devices)
                             : std::string(", CPU only"))
      << "\n";
  out << "Driver      " << (r.driver.present ? r.driver.version + (r.driver.cuda.empty() ? "" : " (CUDA " + r.driver.cuda + ")") : "none")
      << "\n";
  if (r.driver.gpus.empty()) out << "GPUs        none\n";
  for (const auto& g : r.driver.gpus)
    out << "GPU " << g.index << "       " << g.name << ", " << format_bytes(g.memory_bytes) << ", compute capability "
        << (g.cc > 0 ? cc_text(g.cc) : "?") << "\n";
  out << "Runtime     CUDA " << r.runtime_cuda << " (torch " << rt.torch << "): driver " << r.runtime_min_driver
      << " or newer, GPUs of compute capability " << cc_text(rt.oldest_cc) << " or newer\n";
  if (!r.runtime.folder.empty())
    out << "LibTorch    " << (r.runtime.found.empty() ? std::string("") : "torch " + r.runtime.found + " in ") << r.runtime.folder
        << (r.runtime.runtime_build ? " (the runtime of `zerostudio runtime`)" : "") << "\n";
  out << "Host memory " << format_bytes(r.host.ram_available) << " available of " << format_bytes(r.host.ram_total)
      << (r.host.cgroup_limit > 0 ? ", cgroup limit " + format_bytes(r.host.cgroup_limit) : "") << ", ulimit -l "
      << (r.host.memlock_limit < 0 ? std::string("unlimited") : format_bytes(r.host.memlock_limit)) << "\n";
  out << "Pinned      " << (r.host.pinned_checked ? (r.host.pinned_ok ? format_bytes(r.host.pinned_bytes) + " allocated" : "failed: " + r.host.pinned_note)
                                                  : r.host.pinned_note)
      << "\n";
  out << "/dev/shm    " << (r.host.shm_total < 0 ? std::string("absent") : format_bytes(r.host.shm_free) + " free of " + format_bytes(r.host.shm_total))
      << "\n";
  out << "Offload     " << r.offload.path;
  if (r.offload.exists)
    out << ": " << r.offload.filesystem << ", " << format_bytes(r.offload.free_bytes) << " free, " << r.offload.io_note;
  else
    out << ": " << r.offload.io_note;
  out << "\n";
  if (!r.ready_configs.empty()) {
    out << "\nReady configs (device per process, host for the machine):\n";
    for (const auto& c : r.ready_configs) {
      out << "  " << c.file;
      for (std::size_t i = c.file.size(); i < 40; ++i) out << ' ';
      if (!c.error.empty()) {
        out << "cannot estimate: " << c.error << "\n";
        continue;
      }
      out << (c.uses_gpu ? "GPU " + format_bytes(c.gpu_bytes) : std::string("CPU")) << ", host " << format_bytes(c.host_bytes)
          << (c.fits_host ? "" : " (more than available)") << (c.fits_gpu ? "" : " (more than the GPU has)") << "\n";
    }
  }
  out << "\n";
  for (const auto& f : r.findings) {
    if (f.level == Level::ok) continue;
    out << to_string(f.level) << ": " << f.topic << ": " << f.message << "\n";
    if (!f.fix.empty()) out << "  what to do: " << f.fix << "\n";
  }
  if (r.chosen) out << (r.chosen_runs ? "\n" + r.chosen->file + " can run here.\n" : "\n" + r.chosen->file + " cannot run here (see above).\n");
  return out.str();
}

}  // namespace zs::doctor
