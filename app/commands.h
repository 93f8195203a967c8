#pragma once
// zerostudio's subcommands. Each returns the exit code; user errors are thrown as
// zs::Error (exit 1) and usage errors as cli::UsageError (exit 2), and main() prints them.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <c10/core/ScalarType.h>

namespace zs::cli {

/// `zerostudio config {validate,import,export,schema}`.
int run_config_command(const std::vector<std::string>& args);

/// `zerostudio config init [-o OUT] [--from FILE]` (called by run_config_command).
int run_config_init(const std::vector<std::string>& args);

/// `zerostudio train FILE [--set ...] [--run-dir DIR] [--resume latest|PATH]`.
int run_train_command(const std::vector<std::string>& args);

/// RANK:VALUE from the environment variable `name`, when set: the test hooks that act on one rank
/// (ZEROSTUDIO_FAIL_AT=RANK:STEP, ZEROSTUDIO_FAIL_SAVE, ZEROSTUDIO_EXIT_DELAY=RANK:MS).
std::optional<std::pair<int, std::int64_t>> rank_and_step(const char* name);

/// `zerostudio launch [--num_processes N ...] FILE [train options]`.
int run_launch_command(const std::vector<std::string>& args);

/// `zerostudio make-dataset shapes --out DIR ...`.
int run_make_dataset_command(const std::vector<std::string>& args);

/// `zerostudio checkpoints RUN_DIR [--verify] [--json]`.
int run_checkpoints_command(const std::vector<std::string>& args);

/// `zerostudio export CHECKPOINT --format diffusers|safetensors [--dtype] [--ema] -o OUT`.
int run_export_command(const std::vector<std::string>& args);

/// `zerostudio estimate FILE [--num_processes N] [--gpu-memory SIZE] [--json]`.
int run_estimate_command(const std::vector<std::string>& args);

/// `zerostudio doctor [CONFIG] [--json]` (doctor_command.cpp).
int run_doctor_command(const std::vector<std::string>& args);
int run_runtime_command(const std::vector<std::string>& args);

/// `zerostudio tensorboard RUN_DIR [-o DIR]`.
int run_tensorboard_command(const std::vector<std::string>& args);

/// `zerostudio cache FILE [--num_processes N] [--run-dir DIR] [--set ...]`.
int run_cache_command(const std::vector<std::string>& args);

/// `zerostudio model {info,eval,convert}`: diffusers folders and single files.
int run_model_command(const std::vector<std::string>& args);

/// `zerostudio queue {add,list,remove,move,stop,retry,pause,unpause,run}` (queue_command.cpp).
int run_queue_command(const std::vector<std::string>& args);

/// `zerostudio completion bash|--commands` and `zerostudio manpage` (shell_docs.cpp).
int run_completion_command(const std::vector<std::string>& args);
int run_manpage_command(const std::vector<std::string>& args);
/// What `zerostudio --help` prints (main.cpp).
const char* top_level_help();

/// --dtype fp16|bf16|fp32 (default fp32) as an export dtype; throws UsageError for others.
std::optional<c10::ScalarType> export_dtype(const std::string& dtype);
/// Prints "exporting: done/total tensors" to stderr at every tenth.
std::function<void(std::size_t, std::size_t)> export_progress(const std::string& verb);

/// Prints warnings to stderr as "warning: ...".
void print_warnings(const std::vector<std::string>& warnings);

}  // namespace zs::cli
