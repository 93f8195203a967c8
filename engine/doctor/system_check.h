#pragma once
// The system check (`zerostudio doctor`, the GUI's Help > System check): the facts of
// system_facts.h judged — what keeps training off the GPU, a driver too old for the runtime,
// GPUs the runtime has no kernels for, host memory against the ready configs, pinned memory,
// /dev/shm, the NVMe folder — each problem with what to do, and whether a chosen config can run
// on this machine (its memory through the estimator).

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "doctor/system_facts.h"

namespace zs::config {
struct TrainerConfig;
}

namespace zs::doctor {

enum class Level { ok, note, warning, problem };
const char* to_string(Level level);

struct Finding {
  Level level = Level::note;
  std::string topic;    ///< "build", "runtime", "driver", "gpu", "host memory", "pinned memory", "/dev/shm", "offload folder", "config"
  std::string message;
  std::string fix;      ///< what to do (empty: nothing to do)
};

/// What a trainer config needs here, from the estimator (bytes).
struct ConfigNeed {
  std::string file;
  std::string model;            ///< model.preset, or model.path
  std::int64_t parameters = 0;  ///< every parameter of the model (trained and frozen)
  int processes = 1;            ///< on this machine
  bool uses_gpu = false;        ///< launch.use_cpu is false
  std::int64_t gpu_bytes = 0;   ///< on the device, per process
  std::int64_t host_bytes = 0;  ///< CPU memory of every process on the machine
  std::int64_t nvme_bytes = 0;  ///< in NVMe files, every process
  bool fits_gpu = true;         ///< gpu_bytes within the smallest GPU (true when there is none to compare)
  bool fits_host = true;        ///< host_bytes within the host memory a run can have
  std::string error;            ///< why it could not be estimated (the rest is then unset)
};

struct CheckOptions {
  std::string config;             ///< a trainer config to judge; empty: none
  std::vector<std::string> sets;  ///< its KEY=VALUE overrides
  std::string offload_dir;        ///< the folder to check for NVMe offload; empty: the config's, else $TMPDIR or /tmp
  std::string configs_dir;        ///< the ready configs; empty: the installed ones, else the source tree's
  DriverProbe probe = DriverProbe::from_env();
};

struct SystemReport {
  BuildFacts build;
  RuntimeFacts runtime;           ///< where the GPU build's LibTorch came from
  DriverFacts driver;
  HostFacts host;
  FolderFacts offload;
  std::string runtime_cuda;       ///< the CUDA the GPU runtime has (this build's, else the pinned wheel's)
  std::string runtime_min_driver; ///< NVIDIA's minimum driver for it
  bool driver_ok = false;         ///< a driver at or above runtime_min_driver is present
  std::vector<int> unsupported_gpus;  ///< indices of the GPUs below the runtime's oldest compute capability
  std::vector<ConfigNeed> ready_configs;
  std::optional<ConfigNeed> chosen;
  bool chosen_runs = true;        ///< the chosen config can run here (true without one)
  std::vector<Finding> findings;
  /// Host memory a run can have: the available RAM, or the cgroup limit when lower.
  std::int64_t host_budget() const;
};

/// Where a run of a config trains on this machine, and why: the trainer's own choice
/// (Trainer::State::choose_device: a GPU when launch.use_cpu is false and CUDA is usable), told
/// before it starts. A full-size model (a denoiser of 500 M parameters and more: SD 1.5's UNet,
/// SDXL, Flux.1, Qwen-Image, presets or folders of that size) on the CPU needs consent: `train`/`launch` refuse it
/// without --allow-cpu and the GUI asks; tiny presets and test fixtures never do.
struct DevicePlan {
  bool gpu = false;
  std::string device;        ///< "GPU 0: NVIDIA H200 (140.4 GiB)", "GPUs 0-1: NVIDIA H200 (…)", or "CPU"
  std::string why_cpu;       ///< on the CPU: why ("launch.use_cpu: true", "this is the CPU build (…)", …)
  std::string fix;           ///< on the CPU: what would put it on a GPU (empty: nothing, it asked for the CPU)
  std::string model;         ///< model.preset, or model.path
  std::int64_t parameters = 0;  ///< the denoiser's (UNet or transformer), not its frozen encoders; CPU runs only
  bool full_size = false;
  /// "GPU 0: NVIDIA H200 (140.4 GiB)" or "CPU (why)".
  std::string text() const;
  bool needs_consent() const { return !gpu && full_size; }
  /// Why a full-size run on the CPU is stopped, what would put it on a GPU, and how to go on anyway
  /// (`how`: "pass --allow-cpu" on the command line).
  std::string consent_message(const std::string& file, const std::string& how) const;
};
/// The plan for `cfg` with `processes` ranks on this machine (reads the build, the driver through
/// `probe`, and the model's size through the estimator's shapes: no model is loaded).
DevicePlan plan_device(const config::TrainerConfig& cfg, int processes, const DriverProbe& probe = DriverProbe::from_env());
/// The device part alone (parameters and full_size stay unset): what the wizard shows on every
/// answer without building the model's shape again.
DevicePlan where_it_trains(const config::TrainerConfig& cfg, int processes, const DriverProbe& probe = DriverProbe::from_env());

/// Reads the facts and judges them (a second or two: it writes and reads 1 MiB in the offload
/// folder and, with CUDA, pins 256 MiB once).
SystemReport check_system(const CheckOptions& options);
/// The findings for `report`'s facts (check_system calls it; tests call it on made-up facts).
void judge(SystemReport& report);

/// One object: build, driver, gpus, runtime, host, shm, offload, ready_configs, config (null
/// without one), findings, runs (the chosen config can run here).
nlohmann::json to_json(const SystemReport& report);
/// The report for a terminal or the GUI's dialog.
std::string to_text(const SystemReport& report);

}  // namespace zs::doctor
