#pragma once
// What `training.method` and `training.train_text_encoder` make of a model: which text encoders
// train and how, the LoRA adapters, and — when a checkpoint holds only part of the model (LoRA,
// or a preset model's frozen text encoder) — the reference to the base it was trained on (path
// and content hash, in the checkpoint's meta.json; resume refuses a changed base).

#include <cstddef>
#include <string>

#include <nlohmann/json.hpp>

#include "models/lora.h"
#include "models/trainable_model.h"
#include "settings/trainer_config.h"

namespace zs::train {


/// The adapters' options from the `lora` section (alpha null: rank).
models::LoraOptions lora_options(const config::LoraConfig& c);

/// Attaches the config's adapters (`trained`: models::resolve_trained_parts of it): on the
/// denoiser under method lora, on every text encoder under
/// train_text_encoder lora (each part from its own seed derived from training.seed, so every rank
/// draws the same). Call after the model's frozen parts went to their device and dtype; the
/// adapters start in float32 there (the optimizer casts them to the compute dtype and keeps
/// fp32 masters). Returns the adapted layers.
std::size_t attach_adapters(const config::TrainerConfig& cfg, const models::TrainedParts& trained,
                            models::TrainableModel& model);

/// True when a checkpoint of this run holds only adapters on top of weights it does not carry,
/// so it must name the base they come from: method lora, text-encoder LoRA, or a preset model's
/// frozen text encoder. (A pipeline's frozen encoders under full training are not checked, as
/// before.)
bool checkpoint_needs_base(const models::TrainedParts& trained, const models::TrainableModel& model);

/// A preset model (no pipeline) whose checkpoints need a base: its seeded weights are written into
/// the run's model folder (unet/diffusion_pytorch_model.safetensors,
/// text_encoder/model.safetensors), which the family's load_folder reads back on resume.
void save_preset_base(const models::TrainableModel& model, const std::string& model_dir);

/// {"path": the pipeline (or, for a preset, the run's model folder), "hash": the content hash of
/// its weight files, "files": how many}. Reads every weight file once (zlib's CRC-32, ~1 GB/s).
nlohmann::json base_model_reference(const models::TrainableModel& model, const std::string& model_dir);

/// Throws zs::Error(checkpoint) naming the base when `now` is not the base `saved` refers to.
void check_base_model(const nlohmann::json& saved, const nlohmann::json& now, const std::string& checkpoint);

}  // namespace zs::train
