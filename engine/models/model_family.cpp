#include "models/model_family.h"

#include <filesystem>
#include <ostream>

#include "core/error.h"
#include "models/flux/flux_family.h"
#include "models/flux2/flux2_family.h"
#include "models/model_shape.h"
#include "models/qwen_image/qwen_image_family.h"
#include "models/z_image/z_image_family.h"
#include "models/sd/sd_family.h"
#include "settings/trainer_config.h"

namespace zs::models {

namespace fs = std::filesystem;

const char* to_string(TextEncoderTraining t) {
  switch (t) {
    case TextEncoderTraining::full: return "full";
    case TextEncoderTraining::lora: return "lora";
    case TextEncoderTraining::frozen: break;
  }
  return "frozen";
}

// The registry: one line per family (docs/ARCHITECTURE.md, "Adding a model family"), in the order
// the wizard and the schema list their presets.
const std::vector<const ModelFamily*>& model_families() {
  static const std::vector<const ModelFamily*> all = {&sd_family(), &flux_family(), &flux2_family(),
                                                      &qwen_image_family(), &z_image_family()};
  return all;
}

const ModelFamily* find_family(const std::string& name) {
  for (const ModelFamily* f : model_families())
    if (f->name() == name) return f;
  return nullptr;
}

std::vector<std::string> preset_names() {
  std::vector<std::string> out;
  for (const ModelFamily* f : model_families())
    for (const auto& p : f->presets()) out.push_back(p.name);
  return out;
}

std::vector<std::string> presets_training_without_path() {
  std::vector<std::string> out;
  for (const ModelFamily* f : model_families())
    for (const auto& p : f->presets())
      if (p.trains_without_path) out.push_back(p.name);
  return out;
}

const ModelFamily& family_of(const config::TrainerConfig& cfg) {
  // Newest first: SD, the first family, takes any model.path the others do not recognize.
  const auto& all = model_families();
  for (auto it = all.rbegin(); it != all.rend(); ++it)
    if ((*it)->recognizes(cfg)) return **it;
  std::string known;
  for (const auto& name : preset_names()) known += (known.empty() ? "" : ", ") + name;
  if (!cfg.model.path.empty())
    throw Error(ErrorKind::config, "model.path: no model family reads " + cfg.model.path +
                                       "; give a diffusers folder or single file of a supported family (presets: " +
                                       known + ")");
  throw Error(ErrorKind::config, "model.preset: '" + cfg.model.preset + "' is no family's preset; choose one of " + known);
}

std::string model_files_problem(const config::TrainerConfig& cfg) {
  if (cfg.model.path.empty()) return "";
  try {
    const ModelFamily& family = family_of(cfg);
    // A diffusers pipeline or a single file: what `model info` reads. (A folder without
    // model_index.json is ZeroStudio's own export of a tiny preset, which `model info` does not
    // describe; its loader checks it.)
    std::error_code ec;
    if (!fs::is_directory(cfg.model.path, ec) || fs::exists(fs::path(cfg.model.path) / "model_index.json", ec)) {
      std::ostream listing(nullptr);  // describe's listing is not wanted here, only its verdict
      family.describe(listing, cfg.model.path, cfg.model.config_path);
    }
    (void)family.shape(cfg);  // the denoiser's config.json
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

TrainedParts resolve_trained_parts(const config::TrainerConfig& cfg) {
  TrainedParts t;
  t.lora = cfg.training.method == "lora";
  const std::string& te = cfg.training.train_text_encoder;
  if (te == "full") t.text = TextEncoderTraining::full;
  else if (te == "lora") t.text = TextEncoderTraining::lora;
  else if (te == "none") t.text = TextEncoderTraining::frozen;
  else t.text = family_of(cfg).auto_text_training(cfg);  // auto
  return t;
}

std::string text_adapter_unit(const std::string& component) { return "lora_" + component; }

std::vector<std::string> lora_targets(const config::TrainerConfig& cfg) {
  return cfg.lora.targets ? *cfg.lora.targets : family_of(cfg).default_lora_targets();
}

std::int64_t sampling_steps(const config::TrainerConfig& cfg) {
  return cfg.sampling.steps ? *cfg.sampling.steps : family_of(cfg).default_sampling_steps(cfg);
}

double sampling_guidance(const config::TrainerConfig& cfg) {
  return cfg.sampling.guidance_scale ? *cfg.sampling.guidance_scale : family_of(cfg).default_guidance_scale(cfg);
}

std::vector<std::string> text_encoder_lora_targets(const config::TrainerConfig& cfg) {
  return cfg.lora.text_encoder_targets ? *cfg.lora.text_encoder_targets
                                       : family_of(cfg).default_text_encoder_lora_targets();
}

std::vector<RosterUnit> unit_roster(const RosterParts& parts, const TrainedParts& trained) {
  std::vector<RosterUnit> out;
  // The denoiser's units (its small in/out layers, "io", stay whole at stage 3), frozen under LoRA.
  for (const auto& [name, n] : parts.denoiser) out.push_back({name, n, trained.lora, name == "io", false});
  // LoRA's adapters: one trained unit after the base, kept whole.
  if (trained.lora && parts.denoiser_adapters > 0)
    out.push_back({parts.denoiser_adapters_name, parts.denoiser_adapters, false, true, false});
  // Trained text encoders: each one unit named after its component, run once before the
  // denoiser (kept whole); under LoRA the encoder is a frozen base followed by its adapters.
  for (std::size_t i = 0; i < parts.text_encoders.size(); ++i) {
    const auto& [component, n] = parts.text_encoders[i];
    if (trained.text == TextEncoderTraining::full) {
      out.push_back({component, n, false, true, true});
    } else if (trained.text == TextEncoderTraining::lora) {
      out.push_back({component, n, true, true, false});
      const std::int64_t adapters = i < parts.text_encoder_adapters.size() ? parts.text_encoder_adapters[i] : 0;
      if (adapters > 0) out.push_back({text_adapter_unit(component), adapters, false, true, true});
    }
  }
  return out;
}

RosterParts roster_parts(const models::ModelShape& m) {
  RosterParts parts;
  for (const auto& u : m.units) parts.denoiser.emplace_back(u.name, u.parameters);
  parts.denoiser_adapters = m.lora_denoiser_parameters;
  parts.denoiser_adapters_name = m.denoiser_adapters_name;
  for (const auto& t : m.text_encoders) {
    parts.text_encoders.emplace_back(t.name, t.parameters);
    parts.text_encoder_adapters.push_back(t.lora_parameters);
  }
  return parts;
}

std::vector<RosterUnit> ModelFamily::roster(const config::TrainerConfig& cfg) const {
  return unit_roster(roster_parts(shape(cfg)), resolve_trained_parts(cfg));
}

}  // namespace zs::models
