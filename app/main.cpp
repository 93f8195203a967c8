// zerostudio: the GUI by default, subcommands for everything headless.
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "arg_parser.h"
#include "commands.h"
#include "config/problem.h"
#include "core/build_info.h"
#include "core/text.h"
#include "doctor/system_facts.h"

#ifdef ZS_HAVE_GUI
#include "gui_main.h"
#endif

namespace {

const char* kHelp =
    "Usage: zerostudio [CONFIG.yaml | RUN_DIR]  open the GUI (with a trainer config or a run)\n"
    "       zerostudio COMMAND [OPTIONS]        run a command headless\n"
    "\n"
    "ZeroStudio trains diffusion models (Stable Diffusion 1.x, SDXL, Flux.1, Qwen-Image and tiny\n"
    "demo models of each family), full or LoRA, with ZeRO sharding and CPU/NVMe offload.\n"
    "\n"
    "Commands:\n"
    "  train FILE                 train headless (--set, --run-dir, --resume latest|auto|CHECKPOINT)\n"
    "  launch --num_processes N FILE   start this machine's ranks of a multi-process run\n"
    "  make-dataset shapes --out DIR   generate the demo dataset of coloured shapes\n"
    "  checkpoints RUN_DIR        list a run's checkpoints (--verify checks their files)\n"
    "  tensorboard RUN_DIR        write a run's TensorBoard event file from its events\n"
    "  export CHECKPOINT ...      consolidate a checkpoint (diffusers, single-file, safetensors,\n"
    "                             LoRA files for kohya/A1111/ComfyUI and diffusers, --merge)\n"
    "  estimate FILE              memory per process and the lowest ZeRO setting that fits\n"
    "  doctor [FILE]              what this machine offers a run (GPU, driver, memory, NVMe) and\n"
    "                             whether a config can run here\n"
    "  runtime install|remove     the GPU build's CUDA runtime (PyTorch's wheel, about 4 GB)\n"
    "  queue add|list|run ...     the job queue shared with the GUI (remove, move, stop, retry,\n"
    "                             pause, unpause); `queue run` works through it\n"
    "  cache FILE                 fill the latent and text caches (--num_processes N)\n"
    "  model info DIR|FILE        a diffusers folder's or single file's components\n"
    "  model eval ...             run one component of a model on given inputs\n"
    "  model convert DIR -o FILE  a diffusers folder as one single-file checkpoint\n"
    "  config init                the setup questions in the terminal -> trainer config\n"
    "  config validate FILE       check a trainer config, listing every problem\n"
    "  config import ...          accelerate YAML / DeepSpeed JSON -> trainer config\n"
    "  config export FILE ...     trainer config -> accelerate YAML / DeepSpeed JSON\n"
    "  config schema [--markdown] reference of every trainer key\n"
    "  completion bash            the bash completion script\n"
    "  manpage                    the zerostudio(1) man page\n"
    "\n"
    "Options:\n"
    "  -h, --help                 show this help\n"
    "  -V, --version              show versions and whether CUDA is available\n"
    "\n"
    "Run `zerostudio COMMAND --help` for a command's options. Exit codes: 0 success,\n"
    "1 a problem with the input (the message names it), 2 bad usage, 3 (train, launch) the run\n"
    "ended without its newest checkpoint on disk.\n";

}  // namespace

const char* zs::cli::top_level_help() { return kHelp; }

namespace {

int run_gui_or_explain(int argc, char** argv, const std::string& config) {
#ifdef ZS_HAVE_GUI
  return zs::ui::run_gui(argc, argv, config);
#else
  (void)argc;
  (void)argv;
  (void)config;
  throw zs::cli::UsageError("this build has no GUI (built with -DZS_BUILD_GUI=OFF); use a command, see --help");
#endif
}

int dispatch(int argc, char** argv) {
  const std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty()) return run_gui_or_explain(argc, argv, "");
  const std::string& first = args[0];
  const std::vector<std::string> rest(args.begin() + 1, args.end());
  if (first == "-h" || first == "--help") {
    std::cout << kHelp;
    return 0;
  }
  if (first == "-V" || first == "--version") {
    std::cout << zs::format_build_info(zs::build_info());
    return 0;
  }
  if (first == "config") return zs::cli::run_config_command(rest);
  if (first == "train") return zs::cli::run_train_command(rest);
  if (first == "launch") return zs::cli::run_launch_command(rest);
  if (first == "make-dataset") return zs::cli::run_make_dataset_command(rest);
  if (first == "checkpoints") return zs::cli::run_checkpoints_command(rest);
  if (first == "export") return zs::cli::run_export_command(rest);
  if (first == "estimate") return zs::cli::run_estimate_command(rest);
  if (first == "doctor") return zs::cli::run_doctor_command(rest);
  if (first == "runtime") return zs::cli::run_runtime_command(rest);
  if (first == "cache") return zs::cli::run_cache_command(rest);
  if (first == "tensorboard") return zs::cli::run_tensorboard_command(rest);
  if (first == "model") return zs::cli::run_model_command(rest);
  if (first == "queue") return zs::cli::run_queue_command(rest);
  if (first == "completion") return zs::cli::run_completion_command(rest);
  if (first == "manpage") return zs::cli::run_manpage_command(rest);
  if (first[0] == '-') throw zs::cli::UsageError("unknown option '" + first + "'");
  const bool looks_like_config = first.ends_with(".yaml") || first.ends_with(".yml");
  if (looks_like_config && args.size() == 1) {
    if (!std::filesystem::exists(first)) throw zs::Error(zs::ErrorKind::io, first + ": no such config file");
    return run_gui_or_explain(argc, argv, first);
  }
  if (args.size() == 1 && std::filesystem::exists(std::filesystem::path(first) / "events.jsonl"))
    return run_gui_or_explain(argc, argv, first);  // a run folder: the GUI opens it
  throw zs::cli::UsageError("unknown command '" + first + "'");
}

/// Tests make one rank slow to end after its error (ZEROSTUDIO_EXIT_DELAY=RANK:MS), as a rank that
/// frees a large model or flushes a slow disk is: the launcher must still name that rank's error.
void linger_for_tests() {
  const auto delay = zs::cli::rank_and_step("ZEROSTUDIO_EXIT_DELAY");
  const char* rank = std::getenv("RANK");
  if (!delay || !rank || delay->first != std::atoi(rank)) return;
  std::cerr.flush();
  std::this_thread::sleep_for(std::chrono::milliseconds(delay->second));
}

}  // namespace

int main(int argc, char** argv) {
  try {
    // The GPU build refuses a runtime folder other than the one it was built for, with what to
    // do, rather than failing inside LibTorch; `zerostudio runtime` still runs, to make it again.
    if (argc < 2 || std::string(argv[1]) != "runtime") {
      const std::string problem = zs::doctor::runtime_problem();
      if (!problem.empty()) {
        std::cerr << "error: " << problem << "\n";
        return 1;
      }
    }
    return dispatch(argc, argv);
  } catch (const zs::cli::UsageError& e) {
    std::cerr << "zerostudio: " << zs::printable(e.what()) << "\nRun 'zerostudio --help' for usage.\n";
    return 2;
  } catch (const zs::config::ConfigError& e) {
    for (const auto& p : e.problems()) std::cerr << "error: " << zs::printable(p.to_string()) << "\n";
    return 1;
  } catch (const zs::Error& e) {
    std::cerr << "error: " << e.what() << "\n";
    linger_for_tests();
    return 1;
  } catch (const std::filesystem::filesystem_error& e) {
    // The system refused a file operation (a name too long, no permission, a full disk): the
    // file and the system's reason are the message (issue 59 item 7), not a bug to report.
    if (e.path1().empty()) std::cerr << "error: " << zs::printable(e.what()) << "\n";
    else
      std::cerr << "error: " << zs::printable(e.path1().string()) << ": " << e.code().message()
                << (e.path2().empty() ? "" : " (with " + zs::printable(e.path2().string()) + ")") << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "error: unexpected failure: " << zs::printable(e.what()) << "\nPlease report this with the command you ran.\n";
    return 1;
  }
}
