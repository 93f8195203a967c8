#pragma once
// The Trainer: one training run in one process (CPU, or CUDA when present and allowed),
// writing the run directory that the GUI and scripts read.

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include <ATen/core/Tensor.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "settings/trainer_config.h"
#include "train/commands.h"

namespace zs::comm {
class Communicator;
}

namespace zs::train {

/// How a run is started.
struct TrainerOptions {
  std::string run_dir;      ///< empty: resolve_run_dir decides (run_directory.h)
  std::string name_hint = "run";  ///< used in the automatic run name (e.g. the config file's stem)
  /// "" (fresh), "latest", "auto" (the newest intact checkpoint when there is one, else a fresh
  /// start in the same folder), or a checkpoint folder.
  std::string resume;
  /// Every event written to events.jsonl, as a value (called on the training thread).
  std::function<void(const nlohmann::json&)> on_event;
  /// Called after every optimizer step: (step, max_steps, loss, seconds per step).
  std::function<void(std::int64_t, std::int64_t, double, double)> on_step;
  /// The ranks of a multi-process run (null: one process). Rank 0 writes the run directory;
  /// every rank writes logs/rank<R>.log. Ranks train with zero::ZeroOptimizer.
  std::shared_ptr<comm::Communicator> comm;
  /// Loss scaling on or off regardless of precision (unset: on for fp16 only, as DeepSpeed).
  /// Tests turn it on for fp32/bf16 runs on the CPU.
  std::optional<bool> loss_scaling;
  /// Called after each micro-batch's backward with (step about to be taken, 1-based; rank; the
  /// model's parameters, whose .grad() hold this rank's gradients), before the gradients are
  /// combined. Tests inject inf/NaN here.
  std::function<void(std::int64_t, int, const std::vector<std::pair<std::string, at::Tensor>>&)> after_backward;
  /// Whether the trainer resets the run's control.json when it starts (so an earlier run's stop or
  /// pause does not carry over). The GUI resets it itself before starting an in-process run and
  /// passes false, so that a Stop or Pause made while the model loads is not lost.
  bool reset_control = true;
  /// Fault injection for tests: this rank's shard write fails at this step ({rank, step}; the
  /// CLI sets it from ZEROSTUDIO_FAIL_SAVE=RANK:STEP[:TIMES]), as a full disk would.
  std::optional<std::pair<int, std::int64_t>> fail_save;
  /// How many times the injected save failure happens at that step (retries included; 0: always).
  int fail_save_times = 0;
  /// Fault injection for tests: this rank fails with an error at this step ({rank, step}; the CLI
  /// sets it from ZEROSTUDIO_FAIL_AT=RANK:STEP), as a rank that runs out of memory would.
  std::optional<std::pair<int, std::int64_t>> fail_at;
  /// Called on every rank as a checkpoint's save starts, with its tag (tests kill ranks inside saves).
  std::function<void(const std::string&)> on_save_start;
  /// How often a failed save is retried under checkpointing.on_save_failure: pause (tests shorten
  /// it; the CLI reads ZEROSTUDIO_SAVE_RETRY_SECONDS).
  std::chrono::milliseconds save_retry_interval{60'000};
};

/// What a finished run reports.
struct RunSummary {
  std::string run_dir;
  std::int64_t step = 0;      ///< optimizer steps done
  std::string reason;         ///< finished | stopped
  double last_loss = 0;
  /// The last save failed (checkpointing.on_save_failure: continue): the newest steps are not on
  /// disk. The CLI then exits with kSaveFailedExit.
  bool last_save_failed = false;
  std::string newest_checkpoint;  ///< the newest complete checkpoint's folder ("" when none)
};

/// The exit code of `zerostudio train` (and so of `launch`) when the run ended without its
/// newest checkpoint on disk: a save failed and the run stopped, gave up waiting or went on.
inline constexpr int kSaveFailedExit = 3;

/// The run ended because a checkpoint could not be saved (checkpointing.on_save_failure: stop, or
/// pause that gave up or was stopped). The message names the checkpoint, why, and the newest
/// saved one.
class SaveFailed : public Error {
 public:
  explicit SaveFailed(const std::string& message) : Error(ErrorKind::checkpoint, message) {}
};

class Trainer {
 public:
  /// Resolves the run directory with resolve_run_dir (does not create it yet); throws
  /// zs::Error(config) for `--resume latest` without a run directory or run name.
  Trainer(config::TrainerConfig config, TrainerOptions options);
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  /// Runs until training.max_steps or a stop request. A config that cannot train here
  /// (config/trainability.h) throws config::ConfigError before anything is created. Errors are
  /// written as an `error` event (with an on-exception checkpoint when configured) and rethrown.
  RunSummary run(TrainerCommands& commands);
  const std::string& run_dir() const;

 private:
  struct State;
  std::unique_ptr<State> s_;
};

/// Keys that must match between a checkpoint's config and the resuming config; returns one
/// line per differing key ("model.preset: checkpoint tiny, config sd15").
std::vector<std::string> resume_mismatches(const config::TrainerConfig& checkpoint, const config::TrainerConfig& now);

}  // namespace zs::train
