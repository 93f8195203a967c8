#pragma once
// The Qwen-Image family: a QwenImageTransformer2DModel denoiser (60 dual-stream MMDiT blocks, 20 B
// parameters) on 2×2-packed 16-channel latents of Wan 2.1's VAE, conditioned on Qwen2.5-VL-7B's
// last hidden states (each prompt its own length, with a mask), trained by rectified flow with
// Qwen-Image's scheduler (diffusion/flow_matching.h); samples with true classifier-free guidance.
// The model a run trains: models/qwen_image/qwen_image_model.h (a diffusers Qwen-Image folder, or
// the qwen-image-tiny preset of quickstart-qwen-image).

#include <memory>
#include <string>
#include <vector>

#include "models/model_family.h"

namespace zs::models {

class QwenImageFamily final : public ModelFamily {
 public:
  std::string name() const override { return "qwen-image"; }
  std::vector<ModelPreset> presets() const override;
  std::vector<WizardChoice> wizard_choices() const override;
  /// The qwen-image / qwen-image-tiny presets, and at model.path a diffusers Qwen-Image folder
  /// (model_index.json's QwenImagePipeline, or transformer/config.json's QwenImageTransformer2DModel).
  bool recognizes(const config::TrainerConfig& cfg) const override;
  /// Qwen2.5-VL stays frozen (its outputs cached); the tiny preset's own encoder trains with it.
  TextEncoderTraining auto_text_training(const config::TrainerConfig& cfg) const override;
  /// QwenImagePipeline's 50 steps and true_cfg_scale 4.0.
  std::int64_t default_sampling_steps(const config::TrainerConfig& cfg) const override;
  double default_guidance_scale(const config::TrainerConfig& cfg) const override;
  std::vector<std::string> default_lora_targets() const override;
  std::vector<std::string> default_text_encoder_lora_targets() const override;
  models::ModelShape shape(const config::TrainerConfig& cfg) const override;
  /// SD's prediction type and min-SNR, and Flux's embedded guidance and companion files.
  std::vector<std::string> keys_not_applying() const override;
  std::vector<FamilyFinding> check(const config::TrainerConfig& cfg) const override;
  std::unique_ptr<TrainableModel> build(const config::TrainerConfig& cfg, const std::vector<std::string>& captions,
                                        const UnitBuilt& on_unit) const override;
  std::unique_ptr<TrainableModel> load_folder(const std::string& dir, const UnitBuilt& on_unit) const override;
  std::unique_ptr<TrainableModel> load_frozen(const config::TrainerConfig& cfg) const override;
  bool is_model_folder(const std::string& dir) const override;
  bool has_saved_base(const std::string& dir) const override;
  checkpoint::ExportResult export_checkpoint(const checkpoint::CheckpointInfo& info, const std::string& out,
                                             const checkpoint::ExportOptions& options) const override;
  void describe(std::ostream& out, const std::string& path, const std::string& config_path) const override;
  void evaluate(const std::string& path, const std::string& config_path, const std::string& component,
                const std::string& inputs, const std::string& output) const override;
};

/// The registry's Qwen-Image family.
const ModelFamily& qwen_image_family();

/// Whether `path` is a diffusers Qwen-Image folder (model_index.json's QwenImagePipeline, or
/// transformer/config.json's QwenImageTransformer2DModel). Reads config files only.
bool is_qwen_image_model(const std::string& path);

}  // namespace zs::models
