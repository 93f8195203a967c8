// `zerostudio estimate`: memory per process for a trainer config, and the lowest stage and
// offload that fit a device.
#include <iostream>

#include <nlohmann/json.hpp>

#include "arg_parser.h"
#include "commands.h"
#include "config/config_loader.h"
#include "core/memory.h"
#include "estimate/memory_estimator.h"

namespace zs::cli {
namespace {

const CommandSpec kEstimate{
    "estimate", "FILE [--num_processes N] [--gpu-memory 24GiB] [--json] [--set KEY=VALUE ...]",
    "Memory per process for a trainer config: parameters, gradients, optimizer states, activations\n"
    "and buffers on the compute device and in CPU memory, NVMe bytes, and the lowest ZeRO stage and\n"
    "offload that fit the device.",
    "Needs the config and the model's architecture (model.preset, or model.path's unet/config.json),\n"
    "not the dataset. The device is the GPU (its memory is detected when CUDA is present) or, in a\n"
    "CPU-only run, the CPU. Sizes are bytes per process; --json prints one object with the keys\n"
    "parameters, world_size, stage, precision, gpu{parameters,gradients,optimizer_states,\n"
    "activations,buffers,total}, cpu{same}, nvme{total}, gpu_memory, fits, suggestion.",
    {{"num_processes", "N", "Processes in all (default: launch.num_processes)"},
     {"gpu_memory", "SIZE", "Device memory to fit, e.g. 24GiB, 80GB (default: the detected GPU)"},
     {"json", "", "Print one JSON object instead of the table"},
     {"set", "KEY=VALUE", "Override one key, validated by the schema (repeatable)", true}},
    1, 1};

const RegisterCommands kRegisterEstimateCommand{{&kEstimate}};

}  // namespace

int run_estimate_command(const std::vector<std::string>& args) {
  const ParsedArgs a = parse_args(kEstimate, args);
  if (a.help) {
    std::cout << kEstimate.help();
    return 0;
  }
  std::vector<std::string> sets = a.all("set");
  if (a.has("num_processes")) sets.push_back("launch.num_processes=" + std::to_string(a.get_int("num_processes", 1, 1)));
  const config::LoadedConfig loaded = config::load_config_file(a.positional()[0], sets);
  print_warnings(loaded.warnings);
  const auto model = models::model_shape(loaded.config);
  estimate::EstimateOptions o = estimate::options_from_config(loaded.config);
  o.gpu_memory = a.has("gpu_memory") ? estimate::parse_bytes(a.get("gpu_memory"))
                                     : (loaded.config.launch.use_cpu ? 0 : gpu_total_bytes(0));
  o.cpu_memory = physical_memory_bytes();
  const auto e = estimate::estimate_memory(model, o);
  if (a.has("json")) std::cout << estimate::to_json(e).dump(2) << "\n";
  else std::cout << estimate::to_table(e, model);
  return 0;
}

}  // namespace zs::cli
