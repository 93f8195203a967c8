#pragma once
// The Stable Diffusion family: SD 1.x and SDXL (diffusers folders and single files) and the
// quickstart's tiny pixel-space model. A UNet denoiser conditioned on CLIP text encoders
// (SDXL: two, plus a pooled embedding and time ids), trained for ε or v with DDPM noise and
// sampled with DDIM.

#include <memory>
#include <string>
#include <vector>

#include "models/model_family.h"
#include "models/sd/diffusion_model.h"

namespace zs::config {
struct TrainerConfig;
}

namespace zs::models {

class SdFamily final : public ModelFamily {
 public:
  std::string name() const override { return "sd"; }
  std::string denoiser_folder() const override { return "unet"; }
  std::vector<ModelPreset> presets() const override;
  std::vector<WizardChoice> wizard_choices() const override;
  std::string wizard_choice_of(const config::TrainerConfig& cfg) const override;
  bool recognizes(const config::TrainerConfig& cfg) const override;
  TextEncoderTraining auto_text_training(const config::TrainerConfig& cfg) const override;
  std::vector<std::string> default_lora_targets() const override;
  std::vector<std::string> default_text_encoder_lora_targets() const override;
  models::ModelShape shape(const config::TrainerConfig& cfg) const override;
  std::unique_ptr<TrainableModel> build(const config::TrainerConfig& cfg, const std::vector<std::string>& captions,
                                        const UnitBuilt& on_unit) const override;
  std::unique_ptr<TrainableModel> load_folder(const std::string& dir, const UnitBuilt& on_unit) const override;
  std::unique_ptr<TrainableModel> load_frozen(const config::TrainerConfig& cfg) const override;
  bool is_model_folder(const std::string& dir) const override { return DiffusionModel::is_model_folder(dir); }
  bool has_saved_base(const std::string& dir) const override { return DiffusionModel::has_saved_base(dir); }
  std::vector<FamilyFinding> check(const config::TrainerConfig& cfg) const override;
  /// The flow-matching and Flux.1 keys (timestep sampling, training guidance, T5 length).
  std::vector<std::string> keys_not_applying() const override;
  void describe(std::ostream& out, const std::string& path, const std::string& config_path) const override;
  void evaluate(const std::string& path, const std::string& config_path, const std::string& component,
                const std::string& inputs, const std::string& output) const override;
  checkpoint::ExportResult export_checkpoint(const checkpoint::CheckpointInfo& info, const std::string& out,
                                             const checkpoint::ExportOptions& options) const override;
};

/// The registry's SD family.
const ModelFamily& sd_family();

}  // namespace zs::models
