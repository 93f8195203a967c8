#pragma once
// The Z-Image family (Z-Image and Z-Image-Turbo): a ZImageTransformer2DModel denoiser (30
// single-stream blocks beside a noise and a context refiner, 6.15 B parameters) on 16-channel
// latents of Flux.1's VAE, conditioned on Qwen3-4B's hidden_states[-2] (each prompt its own length),
// trained by rectified flow with a static shift of 3 (diffusion/flow_matching.h). The model a run
// trains: models/z_image/z_image_model.h (a diffusers Z-Image folder, or the z-image-tiny preset).
//
// Turbo is the distilled variant (8 steps, no guidance). It is trained like the base here; peers
// train LoRAs on it through ostris' de-distillation adapter merged for training and removed for
// sampling, or on the base (musubi-tuner's advice). Sampling a Turbo run takes its 8 steps and
// guidance 0 from sampling.steps / sampling.guidance_scale.

#include <memory>
#include <string>
#include <vector>

#include "models/model_family.h"

namespace zs::models {

class ZImageFamily final : public ModelFamily {
 public:
  std::string name() const override { return "z-image"; }
  std::vector<ModelPreset> presets() const override;
  std::vector<WizardChoice> wizard_choices() const override;
  /// The z-image / z-image-tiny presets, and at model.path a diffusers Z-Image folder
  /// (model_index.json's ZImagePipeline, or transformer/config.json's ZImageTransformer2DModel).
  bool recognizes(const config::TrainerConfig& cfg) const override;
  TextEncoderTraining auto_text_training(const config::TrainerConfig& cfg) const override;
  /// ZImagePipeline's 50 steps and guidance 5.0.
  std::int64_t default_sampling_steps(const config::TrainerConfig& cfg) const override;
  double default_guidance_scale(const config::TrainerConfig& cfg) const override;
  std::vector<std::string> default_lora_targets() const override;
  std::vector<std::string> default_text_encoder_lora_targets() const override;
  models::ModelShape shape(const config::TrainerConfig& cfg) const override;
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

/// The registry's Z-Image family.
const ModelFamily& z_image_family();

/// Whether `path` is a diffusers Z-Image folder. Reads config files only.
bool is_z_image_model(const std::string& path);

}  // namespace zs::models
