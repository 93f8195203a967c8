#pragma once
// The Trainer's state and the named steps Trainer::run is made of: setup (trainer_setup.cpp)
// and the loop's steps (trainer_steps.cpp). Not a public header.

#include <chrono>
#include <exception>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include <ATen/core/Generator.h>
#include <c10/core/Device.h>
#include <nlohmann/json.hpp>

#include "checkpoint/checkpoint.h"
#include "data/dataset.h"
#include "data/latent_cache.h"
#include "diffusion/objective.h"
#include "models/trainable_model.h"
#include "train/control_file.h"
#include "train/run_length.h"
#include "train/event_types.h"
#include "train/events.h"
#include "train/loss_scaler.h"
#include "train/loss_smoother.h"
#include "train/lr_schedule.h"
#include "train/tensorboard.h"
#include "train/trainer.h"
#include "zero/sharded_init.h"
#include "zero/zero_optimizer.h"

namespace zs::train {

using nlohmann::json;

/// What the ranks agreed to do before a step (UI commands, signals, timers).
struct Requests {
  bool stop = false, paused = false, sample = false, save = false, timed_save = false, validate = false;
  bool retry_save = false, give_up_save = false;  ///< a failed save's retry timer, its deadline
};

/// Why the newest save failed (the figures of the first rank that failed).
struct SaveFailure {
  std::string tag, message, folder;
  std::int64_t needed_bytes = 0, free_bytes = -1;
  int rank = 0;
};

/// One optimizer step's outcome.
struct StepResult {
  double loss = 0;       ///< mean over micro-batches and ranks
  double grad_norm = 0;  ///< before clipping (0 when skipped)
  bool skipped = false;  ///< an inf/NaN gradient under loss scaling
  double lr = 0;
  double seconds = 0;    ///< wall time of the step
};

/// Losses, norms and time since the last metrics event.
struct MetricsInterval {
  std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
  double loss = 0, norm = 0;
  std::int64_t steps = 0, good_steps = 0;  // steps, and those not skipped by an overflow
};

struct Trainer::State {
  config::TrainerConfig cfg;
  TrainerOptions opt;
  std::string run_dir;
  std::unique_ptr<EventLog> events;  // rank 0 only
  std::unique_ptr<TensorBoardLog> tensorboard;  // rank 0, logging.tensorboard
  std::shared_ptr<comm::Communicator> comm;
  int rank = 0, world = 1;
  bool main_rank() const { return rank == 0; }
  std::ofstream rank_log;
  at::Device device{at::kCPU};
  std::unique_ptr<models::TrainableModel> model;  ///< built by the config's family
  models::TrainedParts trained;  ///< what the config trains (models::resolve_trained_parts)
  std::unique_ptr<diffusion::Objective> objective;  ///< the model's (DDPM ε/v, flow matching)
  std::unique_ptr<zero::ZeroOptimizer> optimizer;
  std::unique_ptr<zero::ShardedInit> sharded_init;  ///< zero3_init_flag: the denoiser's units built into shards
  at::ScalarType compute = at::kFloat;  // the dtype the model computes in
  std::unique_ptr<LossScaler> scaler;   // fp16 (or when asked for)
  std::unique_ptr<data::DataLoader> loader;
  RunLength run;  ///< the run's length (training.epochs resolved into cfg.training.max_steps)
  json base_model;  ///< rank 0: the base a LoRA run's checkpoints refer to (train/lora_setup.h); null otherwise
  std::vector<data::DataItem> validation_items;  // validation.path's, or held out by validation.fraction
  std::optional<double> last_val_loss;           // the newest validation loss (checkpoints carry it)
  std::int64_t last_val_step = -1;
  std::unique_ptr<data::LatentCache> latent_cache;  // pipelines with data.cache_latents
  std::unique_ptr<data::LatentCache> text_cache;    // pipelines with data.cache_text_embeddings
  std::unique_ptr<LrSchedule> lr;
  std::int64_t step = 0;              // optimizer steps done
  std::int64_t batches_consumed = 0;  // micro batches taken from the loader
  std::int64_t n_params = 0;          // the model's parameters (run_start)
  double last_loss = 0;
  LossSmoother smoothed;              // of the step losses: the events', TensorBoard's and keep_best's
  // The loop's bookkeeping.
  MetricsInterval interval;
  std::chrono::steady_clock::time_point last_save = std::chrono::steady_clock::now();  // every_n_minutes
  std::int64_t steps_done_here = 0;          // steps of this process (not counting a resumed part)
  std::unique_ptr<ControlFilePoller> control;  // rank 0: the run's control.json
  bool was_paused = false;
  TrainerCommands* commands = nullptr;  // the UI's and signals' requests (run's argument)
  // checkpointing.on_save_failure: the newest failure, and while waiting (pause) when the save is
  // retried and when waiting ends.
  std::optional<SaveFailure> save_failure;
  std::optional<std::chrono::steady_clock::time_point> retry_at, give_up_at;
  int injected_save_failures = 0;  // tests: TrainerOptions::fail_save so far

  std::string samples_dir() const { return run_dir + "/samples"; }
  std::string checkpoints_dir() const { return run_dir + "/checkpoints"; }
  void emit(const std::string& type, const json& fields = json::object());
  void log(const std::string& message) { emit(event::log, {{event::message, message}}); }
  void warn(const std::string& message) { emit(event::warning, {{event::message, message}}); }

  // Setup (trainer_setup.cpp). Every phase runs as a long phase (comm::Communicator::long_phase):
  // a failure on one rank stops all of them at once, and a rank that takes long (rank 0 making
  // the demo data, a slow disk) is waited for as long as it is alive.
  /// Connects the ranks, prepares the run directory, builds model, data and optimizer and
  /// restores a checkpoint when resuming; writes error and run_end events when that fails.
  void start();
  /// Runs `work` on every rank as one long phase (no collective timeout while ranks are alive);
  /// a failure anywhere fails every rank, the others with a distributed error naming `what`.
  void phase(const char* what, const std::function<void()>& work);
  /// Rank 0: creates the run directory, events.jsonl, config.yaml and the demo data.
  void prepare_run_directory(bool resuming);
  /// The checkpoint to resume from (--resume latest|auto|PATH), checked against the config;
  /// nullopt for auto when the run has no intact checkpoint (it starts afresh in its folder).
  std::optional<checkpoint::CheckpointInfo> open_resume_checkpoint();
  /// The compute device (LOCAL_RANK's GPU, or the CPU), the compute dtype and the loss scaler.
  void choose_device();
  /// How the dataset is scanned (data.metadata's options; warnings become events).
  data::MetadataOptions dataset_scan();
  /// The model: the run's own (model/) when resuming, else what its family builds from the
  /// config (the tiny preset's vocabulary from `items`); trained parts, adapters, attention and
  /// the noise schedule. With zero3_init_flag the units are built straight into shards.
  void build_model(const std::optional<checkpoint::CheckpointInfo>& ckpt, const std::vector<data::DataItem>& items);
  /// LR schedule, noise generator, caches, the validation split and the data loader (not started).
  void build_data(std::vector<data::DataItem> items);
  /// With both caches complete, the frozen parts leave the device (models::TrainableModel::park_frozen).
  void park_frozen_if_cached();
  /// Starts the loader where the run stands (after restore) and writes run_start.
  void start_loader(const std::optional<checkpoint::CheckpointInfo>& ckpt);
  /// Several ranks: everyone takes rank 0's initial weights.
  void share_initial_weights();
  /// The ZeRO optimizer over the model (and its EMA).
  void build_optimizer();
  /// Free space where checkpoints go against what the run will keep there (issue 59 item 13):
  /// refuses to start when one checkpoint cannot fit, warns when the kept ones cannot. A
  /// collective (every rank's shard is counted).
  void check_checkpoint_space();
  /// Everything a resumed run takes from its checkpoint (checkpoint::CheckpointMeta): the loop's
  /// counters, the smoothed loss, the loss scale, then weights, moments, EMA and noise generators
  /// from shards saved at any world size/stage.
  void restore(const checkpoint::CheckpointInfo& ckpt);

  // The loop's steps (trainer_steps.cpp).
  /// Reads the commands (and rank 0 the control file) and agrees them between the ranks, so all
  /// stop, pause, sample or save at the same step.
  Requests agree_on_commands(TrainerCommands& commands);
  /// While paused: serves sample and save requests, then waits a moment.
  void while_paused(const Requests& r);
  /// One optimizer step over gradient_accumulation_steps micro-batches.
  StepResult train_step();
  /// Adds the step to the interval and writes a metrics event when one is due.
  void report_metrics(const StepResult& done);
  /// Samples when requested or due (every_n_steps, and at the last step).
  void sample_if_due(const Requests& r);
  /// Validates when requested or due (validation.every_n_steps, and at the last step).
  void validate_if_due(const Requests& r);
  /// The validation loss (and the EMA's) as a `validation` event; every rank takes part.
  void validate();
  /// The checkpoint meta field keep_best ranks by: checkpointing.monitor resolved.
  std::string monitor_field() const;
  /// Saves when due or requested; true when a checkpoint was written.
  bool save_if_due(const Requests& r);
  /// Rank 0: deletes old checkpoints per keep_last / keep_best.
  void prune_checkpoints();
  /// The sample grid of the current weights (the EMA's when configured).
  void sample();
  /// One sharded checkpoint (every rank takes part); false with a save_failed event (and
  /// save_failure set) when not saved.
  bool save(const std::string& reason);
  /// save(), then checkpointing.on_save_failure when it failed: continue returns false; stop
  /// throws SaveFailed; pause waits (wait_for_save) and returns true once a retry saved it.
  bool save_by_policy(const std::string& reason);
  /// Every rank waits, paused, retrying the save every save_retry_interval and on a save request;
  /// throws SaveFailed on a stop request or after checkpointing.save_retry_minutes.
  void wait_for_save(const std::string& reason);
  /// The newest complete checkpoint's folder ("" when none).
  std::string newest_checkpoint() const;
  /// "the newest saved checkpoint is PATH" (or "none"), for messages about a failed save.
  std::string newest_saved() const;
  /// Every rank's model-state bytes and memory, gathered for the metrics event (a collective).
  json gather_ranks();
  /// After the loop: the last checkpoint, cache statistics and run_end.
  void finish(const std::string& reason);
  /// An error in the loop: error event, on-exception checkpoint when configured, run_end.
  void fail(const std::exception& e);
};

}  // namespace zs::train
