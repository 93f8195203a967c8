// `zerostudio doctor`: what this machine and build offer a training run, what keeps it off the
// GPU, and whether a chosen config can run here (engine/doctor/system_check.h).
#include <iostream>

#include <nlohmann/json.hpp>

#include "arg_parser.h"
#include "commands.h"
#include "doctor/system_check.h"

namespace zs::cli {
namespace {

const CommandSpec kDoctor{
    "doctor", "[CONFIG.yaml] [--json] [--nvme-dir DIR] [--set KEY=VALUE ...]",
    "What this machine and build offer a training run, and what to do about each problem.",
    "Lists the build (LibTorch, CUDA, NCCL), the NVIDIA driver and each GPU (name, memory, compute\n"
    "capability), the driver and GPUs the GPU runtime needs, host memory (with cgroup limits and\n"
    "ulimit -l), whether pinned host memory can be allocated, /dev/shm, and the NVMe offload\n"
    "folder's filesystem, free space and io_uring; then what each ready config needs in host memory\n"
    "and on the GPU here. With CONFIG it also judges that config: the exit code is 1 when it cannot\n"
    "run on this machine (no GPU for a full-size model, too little GPU or host memory, more\n"
    "processes than GPUs, an unusable NVMe folder), 0 otherwise. --json prints one object with the\n"
    "keys build, driver, gpus, runtime, host, shm, offload, ready_configs, config, runs, findings.",
    {{"json", "", "Print one JSON object instead of the report"},
     {"nvme_dir", "DIR", "The folder to check for NVMe offload (default: the config's, else $TMPDIR or /tmp)"},
     {"set", "KEY=VALUE", "Override one key of CONFIG, validated by the schema (repeatable)", true}},
    0, 1};

const RegisterCommands kRegisterDoctorCommand{{&kDoctor}};

}  // namespace

int run_doctor_command(const std::vector<std::string>& args) {
  const ParsedArgs a = parse_args(kDoctor, args);
  if (a.help) {
    std::cout << kDoctor.help();
    return 0;
  }
  doctor::CheckOptions o;
  if (!a.positional().empty()) o.config = a.positional()[0];
  o.sets = a.all("set");
  o.offload_dir = a.get("nvme_dir");
  if (!o.sets.empty() && o.config.empty()) throw UsageError("--set needs a CONFIG to apply to");
  const doctor::SystemReport report = doctor::check_system(o);
  if (a.has("json")) std::cout << doctor::to_json(report).dump(2) << "\n";
  else std::cout << doctor::to_text(report);
  return report.chosen_runs ? 0 : 1;
}

}  // namespace zs::cli
