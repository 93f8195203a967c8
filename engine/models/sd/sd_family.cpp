#include "models/sd/sd_family.h"

#include <filesystem>

#include "core/error.h"
#include "models/lora.h"
#include "models/model_shape.h"
#include "models/sd/model_source.h"
#include "models/sd/sd_export.h"
#include "settings/trainer_config.h"

namespace zs::models {

namespace fs = std::filesystem;

const ModelFamily& sd_family() {
  static const SdFamily family;
  return family;
}

std::vector<ModelPreset> SdFamily::presets() const {
  return {{"tiny", "Tiny demo model (trains on the CPU)", true},
          {"sd15", "Stable Diffusion 1.5 architecture"},
          {"sdxl", "SDXL architecture"}};
}

std::vector<WizardChoice> SdFamily::wizard_choices() const {
  // As configs/ sets them: sd15-*.yaml 512 px, epsilon, batch 4, lr 1e-5 (full) and 1e-4 (LoRA),
  // WarmupLR over 100 steps (sd15-lora; the full fine-tune 250); sdxl-*.yaml 1024 px, epsilon,
  // batch 1 (the Adafactor recipe), lr 4e-7 (LoRA: 1e-4, kohya's usual; no ready config),
  // WarmupLR over 100.
  return {{"sd1", "Stable Diffusion 1.x", {"sd15"}, true, true, 512, "epsilon", "", 4, 1e-5, 1e-4, "WarmupLR", 100, true},
          {"sdxl", "SDXL", {"sdxl"}, true, true, 1024, "epsilon", "", 1, 4e-7, 1e-4, "WarmupLR", 100, true}};
}

std::string SdFamily::wizard_choice_of(const config::TrainerConfig& cfg) const {
  // A diffusers folder with a second text encoder is SDXL's; anything else SD 1.x's.
  std::error_code ec;
  return fs::is_directory(fs::path(cfg.model.path) / "text_encoder_2", ec) ? "sdxl" : "sd1";
}

bool SdFamily::recognizes(const config::TrainerConfig& cfg) const {
  // Every model ZeroStudio reads today is Stable Diffusion's: a diffusers folder, a single file,
  // a tiny-preset folder, or a preset (also what a ready config's not-yet-filled path stands for).
  if (!cfg.model.path.empty()) return true;
  for (const auto& p : presets())
    if (cfg.model.preset == p.name) return true;
  return false;
}

TextEncoderTraining SdFamily::auto_text_training(const config::TrainerConfig& cfg) const {
  // The tiny preset's own encoder trains in full (built, or exported as a folder and trained on);
  // a pipeline's encoders stay frozen, so their outputs can be cached.
  const bool tiny = cfg.model.path.empty() ? cfg.model.preset == "tiny" : DiffusionModel::is_preset_folder(cfg.model.path);
  return tiny ? TextEncoderTraining::full : TextEncoderTraining::frozen;
}

std::vector<std::string> SdFamily::default_lora_targets() const {
  return {"to_q", "to_k", "to_v", "to_out.0"};  // the UNet's attention projections (diffusers' names)
}

std::vector<std::string> SdFamily::default_text_encoder_lora_targets() const {
  return models::default_text_encoder_lora_targets();
}

std::vector<std::string> SdFamily::keys_not_applying() const {
  return {"training.timestep_sampling", "training.sigmoid_scale", "training.logit_mean", "training.logit_std",
          "training.guidance", "model.max_sequence_length", "model.vae_path", "model.text_encoder_path",
          "model.text_encoder_2_path", "lora.init_from"};
}

std::vector<FamilyFinding> SdFamily::check(const config::TrainerConfig& c) const {
  std::vector<FamilyFinding> out;
  std::error_code ec;
  if (c.model.path.empty() || !fs::is_regular_file(c.model.path, ec)) return out;  // a folder, or not there yet
  if (fs::path(c.model.path).extension() != ".safetensors")
    out.push_back({"model.path", "'" + c.model.path + "' is not a .safetensors file; single files are read as safetensors "
                                 "only (a .ckpt is a Python pickle: convert it first), folders as diffusers pipelines"});
  else if (c.model.config_path.empty())
    out.push_back({"model.config_path", "a single-file model.path carries no tokenizer: set this to a diffusers folder of "
                                        "the same family (SD 1.x or SDXL) or to a folder with vocab.json and merges.txt"});
  else if (!fs::is_directory(c.model.config_path, ec))
    out.push_back({"model.config_path", "folder '" + c.model.config_path + "' does not exist"});
  return out;
}

checkpoint::ExportResult SdFamily::export_checkpoint(const checkpoint::CheckpointInfo& info, const std::string& out,
                                                     const checkpoint::ExportOptions& options) const {
  return checkpoint::export_sd_checkpoint(info, out, options);
}

std::unique_ptr<TrainableModel> SdFamily::build(const config::TrainerConfig& cfg, const std::vector<std::string>& captions,
                                                const UnitBuilt& on_unit) const {
  if (!cfg.model.path.empty() && DiffusionModel::is_preset_folder(cfg.model.path)) {
    // A tiny-preset model exported as a folder (a quickstart checkpoint, `export --format
    // diffusers`): training goes on from its weights, with its own tokenizer; loaded whole.
    return std::make_unique<DiffusionModel>(DiffusionModel::load_folder(cfg.model.path));
  }
  if (!cfg.model.path.empty()) {
    // A diffusers pipeline folder or single file: the UNet trains from its weights; VAE and text
    // encoders are frozen.
    auto m = std::make_unique<DiffusionModel>(
        DiffusionModel::load_pipeline(cfg.model.path, cfg.model.prediction_type, cfg.model.config_path, on_unit));
    const std::int64_t f = m->pixel_factor();
    if (cfg.data.resolution % f != 0)
      throw Error(ErrorKind::config, "data.resolution: " + std::to_string(cfg.data.resolution) + " must be a multiple of " +
                                         std::to_string(f) + " for " + cfg.model.path + " (VAE × UNet down-sampling)");
    return m;
  }
  // The tiny preset (the trainability checks refused the others without model.path).
  return std::make_unique<DiffusionModel>(DiffusionModel::build_tiny(
      captions, cfg.model.prediction_type, static_cast<std::uint64_t>(cfg.training.seed), on_unit));
}

std::unique_ptr<TrainableModel> SdFamily::load_folder(const std::string& dir, const UnitBuilt& on_unit) const {
  return std::make_unique<DiffusionModel>(DiffusionModel::load_folder(dir, on_unit));
}

std::unique_ptr<TrainableModel> SdFamily::load_frozen(const config::TrainerConfig& cfg) const {
  return std::make_unique<DiffusionModel>(DiffusionModel::load_frozen(cfg.model.path, cfg.model.config_path));
}

}  // namespace zs::models
