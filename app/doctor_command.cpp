// `zerostudio doctor`: what this machine and build offer a training run, what keeps it off the
// GPU, and whether a chosen config can run here (engine/doctor/system_check.h).
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>

#include <nlohmann/json.hpp>

#include "arg_parser.h"
#include "commands.h"
#include "core/error.h"
#include "core/install_paths.h"
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

const CommandSpec kRuntime{
    "runtime", "install|remove|status|path|download [--dir DIR] [--from WHEELS]",
    "The GPU build's CUDA runtime: PyTorch's pinned wheel and its CUDA libraries (about 4 GB).",
    "install: fetch it from PyPI once (or from WHEELS, a folder `download WHEELS` filled on a machine\n"
    "that is online) into its folder: /var/lib/zerostudio/runtime-<pin> for the zerostudio-cuda\n"
    "package (run it with sudo), ~/.cache/zerostudio/runtime-<pin> for a build of make run.\n"
    "remove: delete it and free its space. status: whether it is complete (exit 1 when not).\n"
    "The GPU build finds the folder through its RUNPATH and refuses to start on another version.",
    {{"dir", "DIR", "Another runtime folder"}, {"from", "WHEELS", "Install from this folder of wheels, offline"}},
    1, 2};

const RegisterCommands kRegisterDoctorCommand{{&kDoctor, &kRuntime}};

/// scripts/zs-runtime: installed beside the program's modules, else in the source tree.
std::string runtime_script() {
  const InstallPaths& paths = install_paths();
  if (paths.installed) return paths.prefix + "/lib/zerostudio/zs-runtime";
#ifdef ZS_RUNTIME_SCRIPT
  return ZS_RUNTIME_SCRIPT;
#else
  return "";
#endif
}

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

int run_runtime_command(const std::vector<std::string>& args) {
  const ParsedArgs a = parse_args(kRuntime, args);
  if (a.help) {
    std::cout << kRuntime.help();
    return 0;
  }
  const std::string script = runtime_script();
  if (script.empty() || !std::filesystem::exists(script))
    throw Error(ErrorKind::io, "the runtime script (zs-runtime) is not at '" + script + "': reinstall ZeroStudio");
  std::vector<std::string> argv_text{script};
  for (const auto& p : a.positional()) argv_text.push_back(p);
  if (a.has("dir")) argv_text.insert(argv_text.end(), {"--dir", a.get("dir")});
  if (a.has("from")) argv_text.insert(argv_text.end(), {"--from", a.get("from")});
  if (install_paths().installed) setenv("ZS_RUNTIME_SYSTEM", "1", 1);
  std::vector<char*> argv;
  for (auto& t : argv_text) argv.push_back(t.data());
  argv.push_back(nullptr);
  std::cout.flush();
  execv(script.c_str(), argv.data());
  throw Error(ErrorKind::io, script + ": cannot run it: " + std::strerror(errno));
}

}  // namespace zs::cli
