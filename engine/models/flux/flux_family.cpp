#include "models/flux/flux_family.h"

#include <filesystem>
#include <ostream>

#include <nlohmann/json.hpp>

#include "checkpoint/export.h"
#include "config/trainer_config.h"
#include "core/error.h"
#include "core/meta_tensors.h"
#include "estimate/model_shape.h"
#include "io/json_file.h"
#include "io/safetensors.h"
#include "models/autoencoder_kl.h"
#include "models/clip_text_model.h"
#include "models/flux/flux_single_file.h"
#include "models/flux/flux_transformer.h"
#include "models/lora.h"
#include "models/t5_encoder.h"
#include "models/trainable_model.h"
#include "models/weights.h"

namespace zs::models {

namespace fs = std::filesystem;

namespace {

constexpr const char* kNotYet =
    "Flux.1 is described (presets, `zerostudio estimate`, the wizard's memory figures) but cannot be trained, "
    "exported or evaluated yet: issue 35 brings its trainer (train SD 1.x or SDXL meanwhile)";

/// A JSON file's "_class_name", or "" when the file is absent or unreadable.
std::string class_name(const fs::path& file) {
  std::error_code ec;
  if (!fs::is_regular_file(file, ec)) return "";
  try {
    const nlohmann::json j = io::read_json_file(file.string(), "config");
    return j.value("_class_name", std::string());
  } catch (const std::exception&) {
    return "";
  }
}

/// Flux's full-size VAE (../shared/REFERENCE.md, "Flux VAE").
AutoencoderKLConfig flux_vae_config() {
  AutoencoderKLConfig c;
  c.latent_channels = 16;
  c.scaling_factor = 0.3611;
  c.shift_factor = 0.1159;
  c.use_quant_conv = false;
  c.use_post_quant_conv = false;
  c.sample_size = 1024;
  return c;
}

}  // namespace

const ModelFamily& flux_family() {
  static const FluxFamily family;
  return family;
}

bool is_flux_model(const std::string& path) {
  std::error_code ec;
  if (path.empty() || !fs::exists(path, ec)) return false;
  if (fs::is_directory(path, ec)) {
    const fs::path dir(path);
    return class_name(dir / "model_index.json") == "FluxPipeline" ||
           class_name(dir / "transformer" / "config.json") == "FluxTransformer2DModel";
  }
  if (fs::path(path).extension() != ".safetensors") return false;
  try {
    const io::SafetensorsReader file(path);
    std::vector<std::string> names;
    for (const auto& e : file.entries()) names.push_back(e.name);
    return find_bfl_flux_prefix(names).has_value();
  } catch (const std::exception&) {
    return false;
  }
}

std::vector<ModelPreset> FluxFamily::presets() const {
  return {{"flux-dev", "Flux.1 [dev] architecture (estimates only for now)"},
          {"flux-schnell", "Flux.1 [schnell] architecture (estimates only for now)"}};
}

bool FluxFamily::recognizes(const config::TrainerConfig& cfg) const {
  const bool preset = cfg.model.preset == "flux-dev" || cfg.model.preset == "flux-schnell";
  std::error_code ec;
  // A ready config names a folder that does not exist yet: the preset stands for it.
  if (cfg.model.path.empty() || !fs::exists(cfg.model.path, ec)) return preset;
  return is_flux_model(cfg.model.path);
}

std::vector<std::string> FluxFamily::default_lora_targets() const {
  // diffusers' examples/dreambooth/train_dreambooth_lora_flux.py: the attention projections of both
  // streams and the feed-forwards' linears (in single blocks the attention's q, k, v match too).
  return {"to_q", "to_k", "to_v", "to_out.0", "add_q_proj", "add_k_proj", "add_v_proj", "to_add_out",
          "ff.net.0.proj", "ff.net.2", "ff_context.net.0.proj", "ff_context.net.2"};
}

std::vector<std::string> FluxFamily::default_text_encoder_lora_targets() const {
  return models::default_text_encoder_lora_targets();  // CLIP-L's attention projections
}

std::vector<std::string> FluxFamily::keys_not_applying() const {
  return {"model.prediction_type", "training.min_snr_gamma"};
}

std::vector<FamilyFinding> FluxFamily::check(const config::TrainerConfig& cfg) const {
  std::vector<FamilyFinding> out;
  if (cfg.training.train_text_encoder == "full")
    out.push_back({"training.train_text_encoder",
                   "full is not offered for Flux.1: T5-XXL (4.8 B parameters) never trains, and CLIP-L takes `lora`"});
  if (!cfg.model.path.empty()) out.push_back({"model.path", kNotYet, /*warning=*/true});
  return out;
}

estimate::ModelShape FluxFamily::shape(const config::TrainerConfig& cfg) const {
  // The architecture: model.path's transformer/config.json when it is a diffusers folder, else the
  // preset's full-size configuration (a BFL file's is Flux.1's, [dev] when it has guidance_in).
  FluxConfig c;
  c.guidance_embeds = cfg.model.preset != "flux-schnell";
  std::string name = cfg.model.preset;
  std::error_code ec;
  if (!cfg.model.path.empty() && fs::is_directory(cfg.model.path, ec)) {
    c = FluxConfig::from_file((fs::path(cfg.model.path) / "transformer" / "config.json").string());
    name = cfg.model.path;
  } else if (!cfg.model.path.empty() && fs::is_regular_file(cfg.model.path, ec)) {
    const io::SafetensorsReader file(cfg.model.path);
    std::vector<std::string> names;
    for (const auto& e : file.entries()) names.push_back(e.name);
    const std::string prefix = bfl_flux_prefix(names, cfg.model.path);
    const FileShape shape = [&](const std::string& n) -> std::vector<std::int64_t> {
      for (const auto& e : file.entries())
        if (e.name == n) return e.shape;
      return {};
    };
    c = bfl_flux_config(names, shape, prefix, cfg.model.path);
    name = cfg.model.path;
  }
  estimate::ModelShape m;
  m.name = name;
  const TrainedParts trained = resolve_trained_parts(cfg);
  const std::int64_t dim = c.inner_dim();
  {
    const MetaTensorScope meta;
    FluxTransformer2DModel transformer(c);
    for (const ParamUnit& u : transformer->units()) {
      estimate::UnitShape s{u.name};
      s.kind = u.name == "io" ? estimate::UnitKind::io
               : u.name.rfind("single_", 0) == 0 ? estimate::UnitKind::single_block
                                                 : estimate::UnitKind::joint_block;
      for (const auto& [n, t] : u.parameters) {
        s.parameters += t.numel();
        s.largest_module = std::max(s.largest_module, t.numel());
      }
      s.in_channels = u.name == "io" ? c.in_channels : dim;
      s.out_channels = dim;
      s.heads = c.num_attention_heads;
      s.depth = 1;
      m.units.push_back(s);
    }
    if (trained.lora)
      m.lora_denoiser_parameters = lora_parameter_count(*transformer, lora_targets(cfg), cfg.lora.rank);
    const std::int64_t vae_parameters = parameter_count(*AutoencoderKL(flux_vae_config()));
    // T5 v1.1 XXL's encoder (the config's defaults): counted, never trained.
    const std::int64_t t5_parameters = parameter_count(*T5EncoderModel(T5Config{}));
    // CLIP-L (the config's defaults), which LoRA may train.
    const std::vector<std::string> text_targets = text_encoder_lora_targets(cfg);
    const estimate::UnitShape text = estimate::clip_text_encoder_shape(
        "text_encoder", ClipTextConfig{}, trained.text == TextEncoderTraining::lora ? &text_targets : nullptr,
        cfg.lora.rank);
    m.frozen_parameters = vae_parameters + text.parameters + t5_parameters;
    m.frozen_fp32_parameters = vae_parameters;  // force_upcast
    m.lora_text_parameters = text.lora_parameters;
    m.text_encoders.push_back(text);
  }
  m.sample_channels = c.in_channels / 4;  // 16 latent channels, packed 2×2 into the tokens
  m.out_channels = c.out_channels;
  m.latent_factor = 16;                   // 8 (VAE) × 2 (packing): one token per 16×16 pixels
  m.context_tokens = 512;                 // FluxPipeline's max_sequence_length
  m.context_dim = c.joint_attention_dim;
  m.time_embed_dim = dim;
  m.denoiser_adapters_name = "lora_transformer";
  return m;
}

std::unique_ptr<TrainableModel> FluxFamily::build(const config::TrainerConfig&, const std::vector<std::string>&,
                                                  const UnitBuilt&) const {
  throw Error(ErrorKind::config, std::string("model.preset/model.path: ") + kNotYet);
}

std::unique_ptr<TrainableModel> FluxFamily::load_folder(const std::string& dir, const UnitBuilt&) const {
  throw Error(ErrorKind::checkpoint, dir + ": " + kNotYet);
}

std::unique_ptr<TrainableModel> FluxFamily::load_frozen(const config::TrainerConfig& cfg) const {
  throw Error(ErrorKind::config, cfg.model.path + ": " + kNotYet);
}

bool FluxFamily::is_model_folder(const std::string& dir) const {
  return class_name(fs::path(dir) / "transformer" / "config.json") == "FluxTransformer2DModel";
}

checkpoint::ExportResult FluxFamily::export_checkpoint(const checkpoint::CheckpointInfo&, const std::string& out,
                                                       const checkpoint::ExportOptions&) const {
  throw Error(ErrorKind::checkpoint, out + ": " + kNotYet);
}

void FluxFamily::describe(std::ostream&, const std::string& path, const std::string&) const {
  throw Error(ErrorKind::config, path + ": " + kNotYet);
}

void FluxFamily::evaluate(const std::string& path, const std::string&, const std::string&, const std::string&,
                          const std::string&) const {
  throw Error(ErrorKind::config, path + ": " + kNotYet);
}

}  // namespace zs::models
