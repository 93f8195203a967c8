#pragma once
// Where a Stable Diffusion model's components come from: a diffusers pipeline folder
// (models/sd/diffusers_pipeline.h) or a single-file checkpoint in the original layout
// (models/sd/single_file_model.h). DiffusionModel::load_pipeline reads either through this.

#include <memory>
#include <string>

#include "diffusion/noise_schedule.h"
#include "models/autoencoder_kl.h"
#include "models/clip_text_model.h"
#include "models/clip_tokenizer.h"
#include "models/sd/unet_2d_condition.h"
#include "models/weights.h"

namespace zs::models {

class ModelSource {
 public:
  virtual ~ModelSource() = default;
  /// The folder or file, as given.
  virtual const std::string& root() const = 0;
  /// "unet", "vae", "text_encoder", "text_encoder_2", "tokenizer", "tokenizer_2", "scheduler".
  virtual bool has(const std::string& component) const = 0;
  virtual UNetConfig unet_config() const = 0;
  /// The UNet's tensors by diffusers name (an undefined tensor when absent), read when asked for.
  virtual TensorLookup unet_weights() const = 0;
  /// Builds the UNet and loads its weights. With `on_unit`, each unit is loaded as soon as it is
  /// built and then handed to `on_unit` (ZeRO-3's sharded init), so the whole UNet never exists
  /// at once; what was handed over is not loaded again.
  virtual UNet2DConditionModel load_unet(const UnitBuilt& on_unit = {}) const;
  virtual AutoencoderKL load_vae() const = 0;
  virtual ClipTextModel load_text_encoder(const std::string& component) const = 0;
  virtual ClipTokenizer load_tokenizer(const std::string& component) const = 0;
  virtual diffusion::ScheduleConfig load_scheduler() const = 0;
};

/// A diffusers folder (model_index.json) or a `.safetensors` single file; `config_path` is the
/// single file's companion folder (tokenizers, optional configs; see SingleFileModel). Throws
/// zs::Error naming `path` when it is neither.
std::unique_ptr<ModelSource> open_model_source(const std::string& path, const std::string& config_path = "");

/// True when `path` names a single-file checkpoint rather than a folder.
bool is_single_file(const std::string& path);

}  // namespace zs::models
