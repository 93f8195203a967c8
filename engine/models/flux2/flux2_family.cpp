#include "models/flux2/flux2_family.h"

#include <filesystem>
#include <optional>
#include <ostream>

#include <nlohmann/json.hpp>

#include "checkpoint/export.h"
#include "core/error.h"
#include "core/meta_tensors.h"
#include "data/shapes.h"
#include "io/json_file.h"
#include "io/safetensors.h"
#include "models/autoencoder_kl.h"
#include "models/clip_text_model.h"
#include "models/diffusers_folder.h"
#include "models/flux2/flux2_export.h"
#include "models/flux2/flux2_model.h"
#include "models/flux2/flux2_single_file.h"
#include "models/flux2/flux2_text.h"
#include "models/flux2/flux2_transformer.h"
#include "models/lora.h"
#include "models/model_shape.h"
#include "models/quantized_base.h"
#include "models/qwen_text/qwen_text_model.h"
#include "models/transformer_model_parts.h"
#include "models/transformer_pipeline_model.h"
#include "models/weights.h"
#include "settings/trainer_config.h"

namespace zs::models {

namespace fs = std::filesystem;

namespace {

constexpr const char* kTransformerClass = "Flux2Transformer2DModel";

bool is_tiny_folder(const std::string& dir) { return is_tiny_transformer_folder(dir, kTransformerClass); }

bool is_tiny(const config::TrainerConfig& cfg) {
  std::error_code ec;
  if (!cfg.model.path.empty() && fs::exists(cfg.model.path, ec)) return is_tiny_folder(cfg.model.path);
  return cfg.model.preset == "flux2-tiny";
}

bool is_single_file(const config::TrainerConfig& cfg) {
  std::error_code ec;
  return !cfg.model.path.empty() && fs::is_regular_file(cfg.model.path, ec);
}

bool is_folder(const config::TrainerConfig& cfg) {
  std::error_code ec;
  return !cfg.model.path.empty() && fs::is_directory(cfg.model.path, ec) && !is_tiny_folder(cfg.model.path);
}

/// The three releases' parts, or model.path's (a diffusers FLUX.2 folder).
struct Variant {
  Flux2Config transformer;
  QwenTextConfig text;
  bool distilled = false;
};

Variant variant(const config::TrainerConfig& cfg) {
  Variant v;
  if (is_folder(cfg) || (is_single_file(cfg) && !cfg.model.config_path.empty())) {
    // A folder, or BFL's single file with a folder for the rest (model.config_path).
    const bool file = is_single_file(cfg);
    const fs::path dir(file ? cfg.model.config_path : cfg.model.path);
    v.transformer = file ? Flux2File(cfg.model.path).config(cfg.model.config_path)
                         : Flux2Config::from_file((dir / "transformer" / "config.json").string());
    if (fs::exists(dir / "text_encoder" / "config.json"))
      v.text = QwenTextConfig::from_file((dir / "text_encoder" / "config.json").string());
    else
      v.text = v.transformer.guidance_embeds ? QwenTextConfig::mistral_small_3_1() : QwenTextConfig::qwen3_4b();
    if (fs::exists(dir / "model_index.json"))
      v.distilled = io::read_json_file((dir / "model_index.json").string(), "pipeline index").value("is_distilled", false);
    return v;
  }
  if (cfg.model.preset == "flux2-klein-9b") {
    v.transformer = Flux2Config::klein_9b();
    v.text = QwenTextConfig::qwen3_8b();
    v.distilled = true;
  } else if (cfg.model.preset == "flux2-dev") {
    v.transformer = Flux2Config::dev();
    v.text = QwenTextConfig::mistral_small_3_1();
  } else {
    v.transformer = Flux2Config::klein_4b();
    v.text = QwenTextConfig::qwen3_4b();
    v.distilled = true;
  }
  return v;
}

/// AutoencoderKLFlux2's released config (diffusers' class defaults).
AutoencoderKLConfig flux2_vae_config() {
  return AutoencoderKLConfig::from_json(nlohmann::json{{"_class_name", "AutoencoderKLFlux2"}}, "AutoencoderKLFlux2");
}

}  // namespace

const ModelFamily& flux2_family() {
  static const Flux2Family family;
  return family;
}

bool is_flux2_model(const std::string& path) {
  std::error_code ec;
  if (!path.empty() && fs::is_regular_file(path, ec)) return is_flux2_bfl_file(path);
  return is_transformer_pipeline(path, "Flux2KleinPipeline", kTransformerClass) ||
         is_transformer_pipeline(path, "Flux2Pipeline", kTransformerClass);
}

bool is_flux2_bfl_file(const std::string& path) {
  if (fs::path(path).extension() != ".safetensors") return false;
  try {
    std::vector<std::string> names;
    const io::SafetensorsReader reader(path);
    for (const auto& e : reader.entries()) names.push_back(e.name);
    return find_flux2_file_prefix(names).has_value();
  } catch (const std::exception&) {
    return false;
  }
}

std::vector<ModelPreset> Flux2Family::presets() const {
  return {{"flux2-tiny", "Tiny FLUX.2-klein-architecture demo model (trains on the CPU)", true},
          {"flux2-klein-4b", "FLUX.2 [klein] 4B (4 B transformer, Qwen3-4B text encoder; distilled to 4 steps)"},
          {"flux2-klein-9b", "FLUX.2 [klein] 9B (9 B transformer, Qwen3-8B text encoder; distilled to 4 steps)"},
          {"flux2-dev", "FLUX.2 [dev] (32 B transformer, Mistral-Small-3.1-24B text encoder, embedded guidance)"}};
}

std::vector<WizardChoice> Flux2Family::wizard_choices() const {
  // As configs/flux2-*.yaml set them: 1024 px, batch 1, lr 1e-5 and 1e-4 (diffusers'
  // train_dreambooth_lora_flux2_klein.py's LoRA rate), a constant rate, shift sampling; diffusers
  // folders and BFL's single files.
  return {{"flux2-klein-4b", "FLUX.2 [klein] 4B", {"flux2-klein-4b"}, true, true, 1024, "", "shift", 1, 1e-5, 1e-4,
           "constant", 0, true},
          {"flux2-klein-9b", "FLUX.2 [klein] 9B", {"flux2-klein-9b"}, true, true, 1024, "", "shift", 1, 1e-5, 1e-4,
           "constant", 0, true},
          {"flux2-dev", "FLUX.2 [dev]", {"flux2-dev"}, true, true, 1024, "", "shift", 1, 1e-5, 1e-4, "constant", 0, true}};
}

bool Flux2Family::recognizes(const config::TrainerConfig& cfg) const {
  const std::string& p = cfg.model.preset;
  const bool preset = p == "flux2-tiny" || p == "flux2-klein-4b" || p == "flux2-klein-9b" || p == "flux2-dev";
  std::error_code ec;
  if (cfg.model.path.empty() || !fs::exists(cfg.model.path, ec)) return preset;
  return is_flux2_model(cfg.model.path);
}

TextEncoderTraining Flux2Family::auto_text_training(const config::TrainerConfig& cfg) const {
  return is_tiny(cfg) ? TextEncoderTraining::full : TextEncoderTraining::frozen;
}

std::int64_t Flux2Family::default_sampling_steps(const config::TrainerConfig& cfg) const {
  // Flux2KleinPipeline's model cards: 4 steps for the distilled klein, 50 for the base; Flux2Pipeline's 50.
  // (The tiny preset samples as a klein base: it is trained from scratch, not distilled.)
  return !is_tiny(cfg) && variant(cfg).distilled ? 4 : 50;
}

double Flux2Family::default_guidance_scale(const config::TrainerConfig& cfg) const {
  // klein distilled: 1 (no guidance); klein base: 4 (true CFG); [dev]: 4 (embedded).
  return !is_tiny(cfg) && variant(cfg).distilled ? 1.0 : 4.0;
}

std::vector<std::string> Flux2Family::default_lora_targets() const {
  // diffusers' train_dreambooth_lora_flux2_klein.py: attention of the double blocks and the single
  // blocks' fused projections in and out.
  return {"to_q", "to_k", "to_v", "to_out.0", "to_qkv_mlp_proj", "to_out"};
}

std::vector<std::string> Flux2Family::keys_not_applying() const {
  return {"model.prediction_type", "training.min_snr_gamma", "model.text_encoder_2_path", "model.vae_path",
          "model.text_encoder_path"};
}

std::vector<FamilyFinding> Flux2Family::check(const config::TrainerConfig& cfg) const {
  std::vector<FamilyFinding> out;
  if (!is_tiny(cfg) && (cfg.training.train_text_encoder == "full" || cfg.training.train_text_encoder == "lora"))
    out.push_back({"training.train_text_encoder",
                   cfg.training.train_text_encoder + " is not offered for FLUX.2: its text encoder (Qwen3 or "
                   "Mistral-Small) stays frozen and its outputs are cached; set it to none or auto"});
  std::error_code ec;
  if (is_single_file(cfg)) {
    // BFL's transformer file holds the transformer alone: the configs, tokenizer, scheduler and the
    // other weights come from a diffusers FLUX.2 folder.
    const std::string why = " (a single-file FLUX.2 transformer holds the transformer alone: the text encoder, the VAE, "
                            "the tokenizer and the scheduler come from a diffusers FLUX.2 folder, e.g. "
                            "black-forest-labs/FLUX.2-klein-base-4B without its transformer weights)";
    if (!is_flux2_bfl_file(cfg.model.path)) {
      out.push_back({"model.path", "'" + cfg.model.path + "' is not a FLUX.2 transformer in BFL's single-file layout (no "
                                   "double_stream_modulation_img.lin.weight); give BFL's flux-2-*.safetensors or a "
                                   "diffusers folder"});
    } else if (cfg.model.config_path.empty()) {
      out.push_back({"model.config_path", "set it to a diffusers FLUX.2 folder" + why});
    } else if (!fs::exists(fs::path(cfg.model.config_path) / "model_index.json", ec)) {
      out.push_back({"model.config_path", "'" + cfg.model.config_path + "' has no model_index.json" + why});
    } else {
      try {  // the file against the config before anything is written
        const Flux2File file(cfg.model.path);
        file.check(file.config(cfg.model.config_path));
      } catch (const Error& e) {
        out.push_back({"model.path", e.what()});
      }
    }
  }
  if (out.empty() && !is_tiny(cfg) && cfg.training.guidance != 1.0) {
    try {
      if (!variant(cfg).transformer.guidance_embeds)
        out.push_back({"training.guidance", "FLUX.2 [klein] has no guidance embedding; training.guidance applies to [dev] only",
                       true});
    } catch (const Error&) {  // an unreadable model: the build says so, naming the file
    }
  }
  return out;
}

models::ModelShape Flux2Family::shape(const config::TrainerConfig& cfg) const {
  const bool tiny = is_tiny(cfg);
  std::optional<Flux2Model> tiny_model;
  if (tiny) tiny_model.emplace(Flux2Model::build_tiny(data::all_shape_captions(), 0));
  const Variant v = tiny ? Variant{tiny_model->transformer->config(), {}, false} : variant(cfg);
  const Flux2Config& c = v.transformer;
  models::ModelShape m;
  m.name = cfg.model.path.empty() ? cfg.model.preset : cfg.model.path;
  const TrainedParts trained = resolve_trained_parts(cfg);
  auto describe_units = [&](Flux2Transformer2DModelImpl& transformer) {
    const std::vector<ParamUnit> units = transformer.units();
    m.units = models::transformer_unit_shapes(units, c.in_channels, c.inner_dim(), c.num_attention_heads);
    const std::vector<LinearWeights> linear = linear_weights(transformer, units);
    for (std::size_t i = 0; i < m.units.size() && i < linear.size(); ++i) m.units[i].linear = linear[i];
    if (trained.lora) m.lora_denoiser_parameters = lora_parameter_count(transformer, lora_targets(cfg), cfg.lora.rank);
  };
  if (tiny) {
    describe_units(*tiny_model->transformer);
    describe_tiny_text(m, tiny_model->tiny_text, cfg.lora.rank);
  } else {
    const MetaTensorScope meta;
    describe_units(*Flux2Transformer2DModel(c));
    // Qwen3 or Mistral-Small streamed; the VAE in float32 (force_upcast, as Flux.1's).
    describe_pipeline_frozen_parts(m, v.text, parameter_count(*AutoencoderKL(flux2_vae_config())), true);
    m.context_tokens = cfg.model.max_sequence_length.value_or(kFlux2MaxSequenceLength);
  }
  m.sample_channels = c.in_channels;
  m.out_channels = c.out_channels;
  m.context_dim = c.joint_attention_dim;
  m.time_embed_dim = c.inner_dim();
  m.denoiser_adapters_name = Flux2Model::kDenoiserAdapters;
  return m;
}

std::unique_ptr<TrainableModel> Flux2Family::build(const config::TrainerConfig& cfg, const std::vector<std::string>& captions,
                                                   const UnitBuilt& on_unit) const {
  std::unique_ptr<Flux2Model> m;
  if (!cfg.model.path.empty() && is_tiny_folder(cfg.model.path))
    m = std::make_unique<Flux2Model>(Flux2Model::load_folder(cfg.model.path));
  else if (is_tiny(cfg))
    m = std::make_unique<Flux2Model>(Flux2Model::build_tiny(captions, static_cast<std::uint64_t>(cfg.training.seed), on_unit));
  else if (is_single_file(cfg))  // BFL's transformer file, the rest from model.config_path
    m = std::make_unique<Flux2Model>(Flux2Model::load_pipeline(cfg.model.config_path, on_unit, true, {cfg.model.path, "", ""}));
  else
    m = std::make_unique<Flux2Model>(Flux2Model::load_pipeline(cfg.model.path, on_unit, true));
  const std::int64_t f = m->pixel_factor();
  if (cfg.data.resolution % f != 0)
    throw Error(ErrorKind::config, "data.resolution: " + std::to_string(cfg.data.resolution) + " must be a multiple of " +
                                       std::to_string(f) + " for FLUX.2 (VAE down-sampling × the 2×2 patches)");
  m->configure(cfg);
  return m;
}

std::unique_ptr<TrainableModel> Flux2Family::load_folder(const std::string& dir, const UnitBuilt& on_unit) const {
  return std::make_unique<Flux2Model>(Flux2Model::load_folder(dir, on_unit));
}

std::unique_ptr<TrainableModel> Flux2Family::load_frozen(const config::TrainerConfig& cfg) const {
  const std::string folder = is_single_file(cfg) ? cfg.model.config_path : cfg.model.path;
  auto m = std::make_unique<Flux2Model>(Flux2Model::load_pipeline(folder, {}, /*with_transformer=*/false));
  m->configure(cfg);
  return m;
}

bool Flux2Family::is_model_folder(const std::string& dir) const {
  return io::json_class_name(fs::path(dir) / "transformer" / "config.json") == kTransformerClass;
}

bool Flux2Family::has_saved_base(const std::string& dir) const { return Flux2Model::has_saved_base(dir); }

checkpoint::ExportResult Flux2Family::export_checkpoint(const checkpoint::CheckpointInfo& info, const std::string& out,
                                                        const checkpoint::ExportOptions& options) const {
  return checkpoint::export_flux2_checkpoint(info, out, options);
}

void Flux2Family::describe(std::ostream& out, const std::string& path, const std::string& config_path) const {
  std::error_code ec;
  auto blocks_of = [](const Flux2Config& c) {
    return std::to_string(c.num_layers) + " double-stream and " + std::to_string(c.num_single_layers) +
           " single-stream blocks, " + std::to_string(c.inner_dim()) + " wide, " + std::to_string(c.num_attention_heads) +
           " heads" + (c.guidance_embeds ? ", guidance embedding ([dev])" : "");
  };
  if (fs::is_regular_file(path, ec)) {  // as a run with model.config_path reads it
    const Flux2File file(path);
    const Flux2Config c = file.config(config_path);
    file.check(c);
    const MetaTensorScope meta;
    out << path << ": FLUX.2 transformer, single-file layout (BFL's" << (file.prefix().empty() ? "" : ", behind " + file.prefix())
        << "), " << blocks_of(c) << ", " << parameter_count(*Flux2Transformer2DModel(c)) << " parameters\n";
    return;
  }
  const Flux2Config c = Flux2Config::from_file((fs::path(path) / "transformer" / "config.json").string());
  const std::string blocks = blocks_of(c);
  if (fs::exists(fs::path(path) / "model_index.json", ec)) {
    describe_decoder_pipeline(out, path, "Qwen2, Qwen3's chat tokens", blocks, /*check_text=*/true);
    return;
  }
  out << path << ": FLUX.2-architecture model folder, transformer " << blocks << "\n  config " << c.to_json().dump() << "\n";
}

void Flux2Family::evaluate(const std::string& path, const std::string&, const std::string&, const std::string&,
                           const std::string&) const {
  throw Error(ErrorKind::config, path + ": `model eval` does not run FLUX.2 components yet; `model info` describes the model");
}

}  // namespace zs::models
