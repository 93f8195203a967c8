#include "models/z_image/z_image_family.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <optional>
#include <ostream>

#include "checkpoint/export.h"
#include "core/error.h"
#include "core/meta_tensors.h"
#include "data/shapes.h"
#include "io/json_file.h"
#include "io/safetensors.h"
#include "models/autoencoder_kl.h"
#include "models/clip_text_model.h"
#include "models/diffusers_folder.h"
#include "models/lora.h"
#include "models/model_shape.h"
#include "models/quantized_base.h"
#include "models/qwen_text/qwen_text_model.h"
#include "models/trainable_model.h"
#include "models/transformer_model_parts.h"
#include "models/transformer_pipeline_model.h"
#include "models/weights.h"
#include "models/z_image/z_image_export.h"
#include "models/z_image/z_image_model.h"
#include "models/z_image/z_image_single_file.h"
#include "models/z_image/z_image_text.h"
#include "models/z_image/z_image_transformer.h"
#include "settings/trainer_config.h"

namespace zs::models {

namespace fs = std::filesystem;

namespace {

bool is_tiny_folder(const std::string& dir) { return is_tiny_transformer_folder(dir, "ZImageTransformer2DModel"); }

bool is_tiny(const config::TrainerConfig& cfg) {
  std::error_code ec;
  if (!cfg.model.path.empty() && fs::exists(cfg.model.path, ec)) return is_tiny_folder(cfg.model.path);
  return cfg.model.preset == "z-image-tiny";
}

/// Whether the config's model is Z-Image-Turbo (distilled: 8 steps, no guidance): the preset, or a
/// model.path whose folder or file name says Turbo (Tongyi-MAI/Z-Image-Turbo, z_image_turbo_bf16.safetensors;
/// the two releases' configs are identical, so the name is all there is to go by).
bool is_turbo(const config::TrainerConfig& cfg) {
  if (cfg.model.preset == "z-image-turbo") return true;
  std::string name = fs::path(cfg.model.path).lexically_normal().filename().string();
  if (name.empty()) name = fs::path(cfg.model.path).lexically_normal().parent_path().filename().string();
  std::transform(name.begin(), name.end(), name.begin(), [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
  return name.find("turbo") != std::string::npos;
}

bool is_single_file(const config::TrainerConfig& cfg) {
  std::error_code ec;
  return !cfg.model.path.empty() && fs::is_regular_file(cfg.model.path, ec);
}

/// model.path's transformer/config.json, a single file's (model.config_path's transformer/config.json,
/// else read from its shapes), else the released model's (Tongyi-MAI/Z-Image-Turbo: diffusers'
/// defaults but axes_lens [1536, 512, 512], which change no parameter).
ZImageConfig transformer_config(const config::TrainerConfig& cfg) {
  std::error_code ec;
  if (!cfg.model.path.empty() && fs::is_directory(cfg.model.path, ec))
    return ZImageConfig::from_file((fs::path(cfg.model.path) / "transformer" / "config.json").string());
  if (is_single_file(cfg)) return ZImageFile(cfg.model.path).config(cfg.model.config_path);
  ZImageConfig c;
  c.axes_lens = {1536, 512, 512};
  return c;
}

}  // namespace

const ModelFamily& z_image_family() {
  static const ZImageFamily family;
  return family;
}

bool is_z_image_model(const std::string& path) {
  std::error_code ec;
  if (path.empty() || !fs::is_regular_file(path, ec))
    return is_transformer_pipeline(path, "ZImagePipeline", "ZImageTransformer2DModel");
  if (fs::path(path).extension() != ".safetensors") return false;
  try {
    std::vector<std::string> names;
    const io::SafetensorsReader reader(path);
    for (const auto& e : reader.entries()) names.push_back(e.name);
    return find_z_image_file_prefix(names).has_value();
  } catch (const std::exception&) {
    return false;
  }
}

std::vector<ModelPreset> ZImageFamily::presets() const {
  return {{"z-image-tiny", "Tiny Z-Image-architecture demo model (trains on the CPU)", true},
          {"z-image", "Z-Image architecture (6 B transformer, Qwen3-4B text encoder)"},
          {"z-image-turbo", "Z-Image-Turbo: Z-Image distilled to 8 steps without guidance"}};
}

std::vector<WizardChoice> ZImageFamily::wizard_choices() const {
  // As configs/z-image-*.yaml set them: 1024 px, batch 1, lr 1e-5 and 1e-4 (DiffSynth-Studio's,
  // musubi-tuner's and ai-toolkit's LoRA rate), a constant rate, shift sampling; diffusers folders.
  return {{"z-image", "Z-Image", {"z-image"}, true, true, 1024, "", "shift", 1, 1e-5, 1e-4, "constant", 0, true},
          {"z-image-turbo", "Z-Image-Turbo", {"z-image-turbo"}, true, true, 1024, "", "shift", 1, 1e-5, 1e-4, "constant", 0,
           true}};
}

bool ZImageFamily::recognizes(const config::TrainerConfig& cfg) const {
  const bool preset = cfg.model.preset == "z-image" || cfg.model.preset == "z-image-turbo" || cfg.model.preset == "z-image-tiny";
  std::error_code ec;
  if (cfg.model.path.empty() || !fs::exists(cfg.model.path, ec)) return preset;
  return is_z_image_model(cfg.model.path);
}

TextEncoderTraining ZImageFamily::auto_text_training(const config::TrainerConfig& cfg) const {
  return is_tiny(cfg) ? TextEncoderTraining::full : TextEncoderTraining::frozen;
}

std::int64_t ZImageFamily::default_sampling_steps(const config::TrainerConfig& cfg) const {
  // ZImagePipeline's num_inference_steps; Turbo's model card samples 9 steps = 8 forwards, which
  // the pipeline's default sigmas (linspace(1, 1/N, N) shifted by 3) give for N = 8.
  return is_turbo(cfg) && !is_tiny(cfg) ? 8 : 50;
}

double ZImageFamily::default_guidance_scale(const config::TrainerConfig& cfg) const {
  return is_turbo(cfg) && !is_tiny(cfg) ? 0.0 : 5.0;  // ZImagePipeline's guidance_scale; Turbo's card: 0
}

std::vector<std::string> ZImageFamily::default_lora_targets() const {
  // DiffSynth-Studio's Z-Image LoRA targets: attention and feed-forward of every block (refiners too).
  return {"to_q", "to_k", "to_v", "to_out.0", "w1", "w2", "w3"};
}

std::vector<std::string> ZImageFamily::default_text_encoder_lora_targets() const { return {}; }

std::vector<std::string> ZImageFamily::keys_not_applying() const {
  return {"model.prediction_type", "training.min_snr_gamma", "training.guidance", "model.text_encoder_2_path"};
}

std::vector<FamilyFinding> ZImageFamily::check(const config::TrainerConfig& cfg) const {
  std::vector<FamilyFinding> out;
  if (!is_tiny(cfg) && (cfg.training.train_text_encoder == "full" || cfg.training.train_text_encoder == "lora"))
    out.push_back({"training.train_text_encoder",
                   cfg.training.train_text_encoder + " is not offered for Z-Image: its text encoder (Qwen3-4B) stays "
                   "frozen and its outputs are cached; set it to none or auto"});
  std::error_code ec;
  if (is_single_file(cfg)) {
    // ComfyUI's transformer file holds the transformer alone: the configs, tokenizer, scheduler and
    // the other weights come from a diffusers Z-Image folder (or model.vae_path / text_encoder_path).
    const std::string why = " (a single-file Z-Image transformer holds the transformer alone: Qwen3-4B, the VAE, the "
                            "tokenizer and the scheduler come from a diffusers Z-Image folder, e.g. Tongyi-MAI/"
                            "Z-Image-Turbo without its transformer weights)";
    if (cfg.model.config_path.empty()) {
      out.push_back({"model.config_path", "set it to a diffusers Z-Image folder" + why});
    } else if (!fs::exists(fs::path(cfg.model.config_path) / "model_index.json", ec)) {
      out.push_back({"model.config_path", "'" + cfg.model.config_path + "' has no model_index.json" + why});
    } else {
      try {  // the file against the config before anything is written
        const ZImageFile file(cfg.model.path);
        file.check(file.config(cfg.model.config_path));
      } catch (const Error& e) {
        out.push_back({"model.path", e.what()});
      }
    }
  }
  for (const auto& [key, file] : {std::pair<const char*, const std::string*>{"model.vae_path", &cfg.model.vae_path},
                                  {"model.text_encoder_path", &cfg.model.text_encoder_path}})
    if (!file->empty() && !fs::is_regular_file(*file, ec))
      out.push_back({key, "file '" + *file + "' does not exist (a .safetensors weight file)"});
  if (is_turbo(cfg) && !is_tiny(cfg) && cfg.training.max_steps > 0)
    out.push_back({"model.preset",
                   "Z-Image-Turbo is distilled to 8 steps without guidance, and training it directly wears the "
                   "distillation off (samples blur within a few hundred steps). musubi-tuner advises training the base "
                   "(Tongyi-MAI/Z-Image) and using the LoRA on Turbo; ai-toolkit merges ostris' de-distillation "
                   "adapter while training. Train on the base unless a short run is meant",
                   true});
  return out;
}

models::ModelShape ZImageFamily::shape(const config::TrainerConfig& cfg) const {
  const bool tiny = is_tiny(cfg);
  std::optional<ZImageModel> tiny_model;
  if (tiny) tiny_model.emplace(ZImageModel::build_tiny(data::all_shape_captions(), 0));
  const ZImageConfig c = tiny ? tiny_model->transformer->config() : transformer_config(cfg);
  models::ModelShape m;
  m.name = cfg.model.path.empty() ? cfg.model.preset : cfg.model.path;
  const TrainedParts trained = resolve_trained_parts(cfg);
  auto describe_units = [&](ZImageTransformer2DModelImpl& transformer) {
    const std::vector<ParamUnit> units = transformer.units();
    m.units = models::transformer_unit_shapes(units, 4 * c.in_channels, c.dim, c.n_heads, /*all_single=*/true);
    const std::vector<LinearWeights> linear = linear_weights(transformer, units);
    for (std::size_t i = 0; i < m.units.size() && i < linear.size(); ++i) m.units[i].linear = linear[i];
    if (trained.lora) m.lora_denoiser_parameters = lora_parameter_count(transformer, lora_targets(cfg), cfg.lora.rank);
  };
  if (tiny) {
    describe_units(*tiny_model->transformer);
    describe_tiny_text(m, tiny_model->tiny_text, cfg.lora.rank);
  } else {
    const MetaTensorScope meta;
    describe_units(*ZImageTransformer2DModel(c));
    // Qwen3-4B streamed (ZImageModel::condition); Flux.1's VAE in float32 (force_upcast).
    describe_pipeline_frozen_parts(m, QwenTextConfig::qwen3_4b(), parameter_count(*AutoencoderKL(AutoencoderKLConfig::flux1())),
                                   true);
    m.context_tokens = cfg.model.max_sequence_length.value_or(kZImageMaxSequenceLength);
  }
  m.sample_channels = c.in_channels;
  m.out_channels = c.in_channels;
  m.context_dim = c.cap_feat_dim;
  m.time_embed_dim = c.adaln_dim();
  m.denoiser_adapters_name = ZImageModel::kDenoiserAdapters;
  return m;
}

std::unique_ptr<TrainableModel> ZImageFamily::build(const config::TrainerConfig& cfg, const std::vector<std::string>& captions,
                                                    const UnitBuilt& on_unit) const {
  std::unique_ptr<ZImageModel> m;
  if (!cfg.model.path.empty() && is_tiny_folder(cfg.model.path))
    m = std::make_unique<ZImageModel>(ZImageModel::load_folder(cfg.model.path));
  else if (is_tiny(cfg))
    m = std::make_unique<ZImageModel>(ZImageModel::build_tiny(captions, static_cast<std::uint64_t>(cfg.training.seed), on_unit));
  else if (is_single_file(cfg))  // ComfyUI's transformer file, the rest from model.config_path
    m = std::make_unique<ZImageModel>(ZImageModel::load_pipeline(
        cfg.model.config_path, on_unit, true, {cfg.model.path, cfg.model.vae_path, cfg.model.text_encoder_path}));
  else
    m = std::make_unique<ZImageModel>(
        ZImageModel::load_pipeline(cfg.model.path, on_unit, true, {"", cfg.model.vae_path, cfg.model.text_encoder_path}));
  const std::int64_t f = m->pixel_factor();
  if (cfg.data.resolution % f != 0)
    throw Error(ErrorKind::config, "data.resolution: " + std::to_string(cfg.data.resolution) + " must be a multiple of " +
                                       std::to_string(f) + " for Z-Image (VAE down-sampling × the 2×2 patches)");
  m->configure(cfg);
  return m;
}

std::unique_ptr<TrainableModel> ZImageFamily::load_folder(const std::string& dir, const UnitBuilt& on_unit) const {
  return std::make_unique<ZImageModel>(ZImageModel::load_folder(dir, on_unit));
}

std::unique_ptr<TrainableModel> ZImageFamily::load_frozen(const config::TrainerConfig& cfg) const {
  const std::string folder = is_single_file(cfg) ? cfg.model.config_path : cfg.model.path;
  auto m = std::make_unique<ZImageModel>(ZImageModel::load_pipeline(folder, {}, /*with_transformer=*/false,
                                                                    {"", cfg.model.vae_path, cfg.model.text_encoder_path}));
  m->configure(cfg);
  return m;
}

bool ZImageFamily::is_model_folder(const std::string& dir) const {
  return io::json_class_name(fs::path(dir) / "transformer" / "config.json") == "ZImageTransformer2DModel";
}

bool ZImageFamily::has_saved_base(const std::string& dir) const { return ZImageModel::has_saved_base(dir); }

checkpoint::ExportResult ZImageFamily::export_checkpoint(const checkpoint::CheckpointInfo& info, const std::string& out,
                                                         const checkpoint::ExportOptions& options) const {
  return checkpoint::export_z_image_checkpoint(info, out, options);
}

void ZImageFamily::describe(std::ostream& out, const std::string& path, const std::string& config_path) const {
  std::error_code ec;
  auto blocks_of = [](const ZImageConfig& c) {
    return std::to_string(c.n_layers) + " single-stream blocks and " + std::to_string(c.n_refiner_layers) + " + " +
           std::to_string(c.n_refiner_layers) + " refiner blocks, " + std::to_string(c.dim) + " wide, " +
           std::to_string(c.n_heads) + " heads";
  };
  if (fs::is_regular_file(path, ec)) {  // as a run with model.config_path reads it
    const ZImageFile file(path);
    const ZImageConfig c = file.config(config_path);
    file.check(c);
    const MetaTensorScope meta;
    out << path << ": Z-Image transformer, single-file layout (ComfyUI's" << (file.prefix().empty() ? "" : ", behind " + file.prefix())
        << "), " << blocks_of(c) << ", " << parameter_count(*ZImageTransformer2DModel(c)) << " parameters\n";
    return;
  }
  const ZImageConfig c = ZImageConfig::from_file((fs::path(path) / "transformer" / "config.json").string());
  const std::string blocks = blocks_of(c);
  if (fs::exists(fs::path(path) / "model_index.json", ec)) {
    describe_decoder_pipeline(out, path, "Qwen2, Qwen3's chat tokens", blocks, /*check_text=*/true);
    return;
  }
  out << path << ": Z-Image-architecture model folder, transformer " << blocks << "\n  config " << c.to_json().dump() << "\n";
}

void ZImageFamily::evaluate(const std::string& path, const std::string&, const std::string&, const std::string&,
                            const std::string&) const {
  throw Error(ErrorKind::config, path + ": `model eval` does not run Z-Image components yet; `model info` describes the model");
}

}  // namespace zs::models
