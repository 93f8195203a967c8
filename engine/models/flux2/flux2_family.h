#pragma once
// The FLUX.2 family: [klein 4B] (5 double-stream + 20 single-stream blocks at 3072, Qwen3-4B),
// [klein 9B] (8 + 24 at 4096, Qwen3-8B) and [dev] (8 + 48 at 6144, 32 B, Mistral-Small-3.1-24B), on
// AutoencoderKLFlux2's 32-channel latents 2×2-patchified to 128 (models/flux2/flux2_model.h says how
// each conditions, trains and samples). klein 4B / 9B are step-distilled (4 steps, no guidance);
// their base checkpoints (FLUX.2-klein-base-*) sample with 50 steps and true CFG 4; [dev] embeds its
// guidance (4, 50 steps).

#include <memory>
#include <string>
#include <vector>

#include "models/model_family.h"

namespace zs::models {

class Flux2Family final : public ModelFamily {
 public:
  std::string name() const override { return "flux2"; }
  std::vector<ModelPreset> presets() const override;
  std::vector<WizardChoice> wizard_choices() const override;
  /// The flux2-* presets, and at model.path a diffusers FLUX.2 folder (model_index.json's
  /// Flux2KleinPipeline or Flux2Pipeline, or transformer/config.json's Flux2Transformer2DModel).
  bool recognizes(const config::TrainerConfig& cfg) const override;
  TextEncoderTraining auto_text_training(const config::TrainerConfig& cfg) const override;
  /// klein (distilled) 4 steps without guidance; klein base 50 steps, CFG 4; [dev] 50 steps, embedded 4.
  std::int64_t default_sampling_steps(const config::TrainerConfig& cfg) const override;
  double default_guidance_scale(const config::TrainerConfig& cfg) const override;
  std::vector<std::string> default_lora_targets() const override;
  std::vector<std::string> default_text_encoder_lora_targets() const override { return {}; }
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

/// The registry's FLUX.2 family.
const ModelFamily& flux2_family();

/// Whether `path` is a diffusers FLUX.2 folder (config files only) or a FLUX.2 transformer in BFL's
/// single-file layout (is_flux2_bfl_file).
bool is_flux2_model(const std::string& path);
/// Whether `path` is a .safetensors file of a FLUX.2 transformer in BFL's layout (its shared
/// "double_stream_modulation_img.lin.weight", behind any prefix; Flux.1's file has a modulation per
/// block instead). Reads the header only.
bool is_flux2_bfl_file(const std::string& path);

}  // namespace zs::models
