#pragma once
// The Trainer's state, shared by trainer.cpp (the step loop, sampling, checkpoints) and
// trainer_setup.cpp (run directory, resume, model and data). Not a public header.

#include <fstream>
#include <memory>
#include <optional>
#include <string>

#include <ATen/core/Generator.h>
#include <c10/core/Device.h>
#include <nlohmann/json.hpp>

#include "checkpoint/checkpoint.h"
#include "data/dataset.h"
#include "data/latent_cache.h"
#include "diffusion/noise_schedule.h"
#include "models/diffusion_model.h"
#include "train/events.h"
#include "train/loss_scaler.h"
#include "train/lr_schedule.h"
#include "train/optimizer.h"
#include "train/trainer.h"
#include "zero/sharded_init.h"
#include "zero/zero_optimizer.h"

namespace zs::train {

using nlohmann::json;

struct Trainer::State {
  config::TrainerConfig cfg;
  TrainerOptions opt;
  std::string run_dir;
  std::unique_ptr<EventLog> events;  // rank 0 only
  std::shared_ptr<dist::Communicator> comm;
  int rank = 0, world = 1;
  std::ofstream rank_log;
  at::Device device{at::kCPU};
  models::DiffusionModel model;
  std::unique_ptr<diffusion::NoiseSchedule> schedule;
  std::unique_ptr<zero::ZeroOptimizer> optimizer;
  std::unique_ptr<zero::ShardedInit> sharded_init;  ///< zero3_init_flag: the UNet's units built into shards
  at::ScalarType compute = at::kFloat;  // the dtype the model computes in
  std::unique_ptr<LossScaler> scaler;   // fp16 (or when asked for)
  std::unique_ptr<data::DataLoader> loader;
  std::unique_ptr<data::LatentCache> latent_cache;  // pipelines with data.cache_latents
  std::unique_ptr<data::LatentCache> text_cache;    // pipelines with data.cache_text_embeddings
  std::unique_ptr<LrSchedule> lr;
  at::Generator gen;
  std::int64_t step = 0;              // optimizer steps done
  std::int64_t batches_consumed = 0;  // micro batches taken from the loader
  double last_loss = 0;
  double smoothed_loss = 0;           // EMA (0.9) of the step losses: checkpointing.keep_best's monitor
  std::string samples_dir() const { return run_dir + "/samples"; }
  std::string checkpoints_dir() const { return run_dir + "/checkpoints"; }
  void emit(const std::string& type, const json& fields = json::object());
  void log(const std::string& message) { emit("log", {{"message", message}}); }
  void warn(const std::string& message) { emit("warning", {{"message", message}}); }

  // Setup steps (trainer_setup.cpp).
  /// Rank 0: creates the run directory, events.jsonl, config.yaml and the demo data.
  void prepare_run_directory(bool resuming);
  /// The checkpoint to resume from (--resume latest|PATH), checked against the config.
  checkpoint::CheckpointInfo open_resume_checkpoint();
  /// Device, precision, loss scaler, dataset, model (restored from `ckpt` when resuming), LR
  /// schedule, noise generator and data loader; writes run_start.
  void build_model_and_data(const std::optional<checkpoint::CheckpointInfo>& ckpt);
};

/// Where the dataset is: data.path, or the run's data/ folder for generated demo data.
std::string resolve_data_path(const config::TrainerConfig& cfg, const std::string& run_dir);

}  // namespace zs::train
