#pragma once
// The Flux.1 family ([dev] and [schnell]): a FluxTransformer2DModel denoiser on 2×2-packed 16-channel
// VAE latents, conditioned on T5 v1.1 XXL's hidden states and CLIP-L's pooled output, trained by
// rectified flow (diffusion/flow_matching.h). The model a run trains: models/flux/flux_model.h
// (a diffusers Flux folder, or the flux-tiny preset of quickstart-flux). Exports, `model info`
// and `model eval` are not there yet and say so.

#include <memory>
#include <string>
#include <vector>

#include "models/model_family.h"

namespace zs::models {

class FluxFamily final : public ModelFamily {
 public:
  std::string name() const override { return "flux"; }
  std::vector<ModelPreset> presets() const override;
  std::vector<WizardChoice> wizard_choices() const override;
  /// flux-dev / flux-schnell presets, and at model.path a diffusers Flux folder (model_index.json's
  /// FluxPipeline, or transformer/config.json's FluxTransformer2DModel) or a BFL single file.
  bool recognizes(const config::TrainerConfig& cfg) const override;
  /// A pipeline's text encoders stay frozen unless asked (T5 never trains; CLIP-L may take LoRA);
  /// the tiny preset's own encoder trains with it.
  TextEncoderTraining auto_text_training(const config::TrainerConfig& cfg) const override;
  /// [dev]: 28 steps, embedded guidance 3.5 (FluxPipeline's defaults); [schnell]: 4 steps, none;
  /// flux-tiny: 28 steps, no guidance.
  std::int64_t default_sampling_steps(const config::TrainerConfig& cfg) const override;
  double default_guidance_scale(const config::TrainerConfig& cfg) const override;
  std::vector<std::string> default_lora_targets() const override;
  std::vector<std::string> default_text_encoder_lora_targets() const override;
  models::ModelShape shape(const config::TrainerConfig& cfg) const override;
  /// model.prediction_type and training.min_snr_gamma mean nothing for rectified flow.
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

/// The registry's Flux family.
const ModelFamily& flux_family();

/// Whether `path` is a Flux model: a diffusers folder (model_index.json's FluxPipeline, or
/// transformer/config.json's FluxTransformer2DModel) or a .safetensors file in BFL's layout.
/// Reads config files and a file's header only.
bool is_flux_model(const std::string& path);

}  // namespace zs::models
