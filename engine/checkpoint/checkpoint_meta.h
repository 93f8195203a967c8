#pragma once
// A checkpoint's meta.json as the trainer writes it and resumes from it: one typed struct, so
// save and restore cannot disagree on a key. Readers that only list checkpoints (the GUI's
// browser, `zerostudio checkpoints`) may keep reading CheckpointInfo::meta; the keys are these.

#include <cstdint>
#include <optional>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

namespace zs::checkpoint {

/// The `lora` object: how the adapters a checkpoint holds were made.
struct LoraMeta {
  std::int64_t rank = 0;
  double alpha = 0;
  bool denoiser = false;       ///< adapters on the denoiser (training.method lora; meta.json says "unet",
                               ///< the key version-2 checkpoints have always written)
  bool text_encoders = false;  ///< adapters on the text encoders (train_text_encoder lora)
  double dropout = 0;
};

/// The `loss_scaler` object (fp16): train::LossScaler's state.
struct LossScalerMeta {
  double scale = 0;
  std::int64_t iter = 0;
  std::int64_t last_overflow = -1;
  int hysteresis = 1;
  std::int64_t skipped = 0;
};

struct CheckpointMeta {
  std::int64_t step = 0;              ///< optimizer steps of the schedule done
  std::int64_t optimizer_steps = 0;   ///< steps the optimizer took (skipped overflow steps not counted)
  std::int64_t batches_consumed = 0;  ///< micro-batches this run's loader handed out (per rank)
  std::optional<std::int64_t> samples_seen;  ///< images over all ranks (absent in old checkpoints)
  double epoch = 0;
  double loss = 0;                    ///< the last step's loss
  double smoothed_loss = 0;           ///< train::LossSmoother's value
  /// The smoother's state (last value, count); absent in old checkpoints (their value, settled).
  std::optional<std::pair<double, std::int64_t>> smoothed_state;
  std::optional<double> val_loss;     ///< the newest validation loss
  /// optimizer.fused_backward: the last step's global gradient norm, which clips the next step.
  std::optional<double> previous_grad_norm;
  std::int64_t val_loss_step = -1;
  double lr = 0;
  double time = 0;                    ///< Unix seconds
  std::string reason;                 ///< periodic, timed, final, stopped, requested, overwrite, on_exception
  int world_size = 1;
  int stage = 0;
  std::string precision;
  std::string config_hash;
  std::string config;                 ///< the run's config as YAML
  nlohmann::json sharding;            ///< checkpoint::sharding_json: the shard layout (null: version 1)
  nlohmann::json base_model;          ///< the base adapters refer to (train/lora_setup.h); null when none
  std::optional<LoraMeta> lora;
  std::optional<LossScalerMeta> loss_scaler;

  /// The meta.json object (save_checkpoint adds format, version, tag and files).
  nlohmann::json to_json() const;
  /// From a meta.json object; keys older checkpoints lack take their defaults. Throws
  /// zs::Error(checkpoint) naming `where` and the key when a value has the wrong type.
  static CheckpointMeta from_json(const nlohmann::json& j, const std::string& where);
};

}  // namespace zs::checkpoint
