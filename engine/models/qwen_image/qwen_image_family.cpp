#include "models/qwen_image/qwen_image_family.h"

#include <filesystem>
#include <optional>
#include <ostream>

#include <nlohmann/json.hpp>

#include "checkpoint/export.h"
#include "core/error.h"
#include "core/meta_tensors.h"
#include "data/shapes.h"
#include "io/json_file.h"
#include "models/clip_text_model.h"
#include "models/diffusers_folder.h"
#include "models/lora.h"
#include "models/model_shape.h"
#include "models/quantized_base.h"
#include "models/qwen_image/qwen_export.h"
#include "models/qwen_image/qwen_image_model.h"
#include "models/qwen_image/qwen_text_encoder.h"
#include "models/qwen_image/qwen_transformer.h"
#include "models/qwen_image/qwen_vae.h"
#include "models/trainable_model.h"
#include "models/transformer_model_parts.h"
#include "models/transformer_pipeline_model.h"
#include "models/weights.h"
#include "settings/trainer_config.h"

namespace zs::models {

namespace fs = std::filesystem;

namespace {


bool is_tiny_folder(const std::string& dir) { return is_tiny_transformer_folder(dir, "QwenImageTransformer2DModel"); }

bool is_tiny(const config::TrainerConfig& cfg) {
  std::error_code ec;
  if (!cfg.model.path.empty() && fs::exists(cfg.model.path, ec)) return is_tiny_folder(cfg.model.path);
  return cfg.model.preset == "qwen-image-tiny";
}

/// model.path's transformer/config.json (a diffusers folder or a run's model folder), else the
/// full size (../shared/REFERENCE.md, "Qwen-Image transformer").
QwenImageConfig transformer_config(const config::TrainerConfig& cfg) {
  std::error_code ec;
  if (!cfg.model.path.empty() && fs::is_directory(cfg.model.path, ec))
    return QwenImageConfig::from_file((fs::path(cfg.model.path) / "transformer" / "config.json").string());
  return QwenImageConfig{};
}

}  // namespace

const ModelFamily& qwen_image_family() {
  static const QwenImageFamily family;
  return family;
}

bool is_qwen_image_model(const std::string& path) { return is_transformer_pipeline(path, "QwenImagePipeline", "QwenImageTransformer2DModel"); }

std::vector<ModelPreset> QwenImageFamily::presets() const {
  return {{"qwen-image-tiny", "Tiny Qwen-Image-architecture demo model (trains on the CPU)", true},
          {"qwen-image", "Qwen-Image architecture (20 B transformer, Qwen2.5-VL-7B text encoder)"}};
}

std::vector<WizardChoice> QwenImageFamily::wizard_choices() const {
  // As configs/qwen-image-*.yaml set them: 1024 px, batch 1, lr 1e-5 and 1e-4, a constant rate,
  // shift sampling; diffusers folders only (no single-file layout is read).
  return {{"qwen-image", "Qwen-Image", {"qwen-image"}, true, false, 1024, "", "shift", 1, 1e-5, 1e-4, "constant", 0, true}};
}

bool QwenImageFamily::recognizes(const config::TrainerConfig& cfg) const {
  const bool preset = cfg.model.preset == "qwen-image" || cfg.model.preset == "qwen-image-tiny";
  std::error_code ec;
  if (cfg.model.path.empty() || !fs::exists(cfg.model.path, ec)) return preset;
  return is_qwen_image_model(cfg.model.path);
}

TextEncoderTraining QwenImageFamily::auto_text_training(const config::TrainerConfig& cfg) const {
  return is_tiny(cfg) ? TextEncoderTraining::full : TextEncoderTraining::frozen;
}

std::int64_t QwenImageFamily::default_sampling_steps(const config::TrainerConfig&) const {
  return 50;  // QwenImagePipeline's num_inference_steps
}

double QwenImageFamily::default_guidance_scale(const config::TrainerConfig&) const {
  return 4.0;  // QwenImagePipeline's true_cfg_scale
}

std::vector<std::string> QwenImageFamily::default_lora_targets() const {
  // DiffSynth-Studio's Qwen-Image LoRA (the seed's --lora_target_modules): both streams' attention
  // projections, the MLPs' output linears and the modulations.
  return {"to_q",     "to_k",         "to_v",      "add_q_proj",    "add_k_proj",    "add_v_proj",
          "to_out.0", "to_add_out",   "img_mlp.net.2", "img_mod.1", "txt_mlp.net.2", "txt_mod.1"};
}

std::vector<std::string> QwenImageFamily::default_text_encoder_lora_targets() const { return {}; }

std::vector<std::string> QwenImageFamily::keys_not_applying() const {
  return {"model.prediction_type", "training.min_snr_gamma", "training.guidance",        "model.config_path",
          "model.vae_path",        "model.text_encoder_path", "model.text_encoder_2_path"};
}

std::vector<FamilyFinding> QwenImageFamily::check(const config::TrainerConfig& cfg) const {
  std::vector<FamilyFinding> out;
  if (!is_tiny(cfg) && (cfg.training.train_text_encoder == "full" || cfg.training.train_text_encoder == "lora"))
    out.push_back({"training.train_text_encoder",
                   cfg.training.train_text_encoder + " is not offered for Qwen-Image: its text encoder "
                   "(Qwen2.5-VL-7B) stays frozen and its outputs are cached; set it to none or auto"});
  std::error_code ec;
  if (!cfg.model.path.empty() && fs::is_regular_file(cfg.model.path, ec))
    out.push_back({"model.path", "'" + cfg.model.path + "' is a file; Qwen-Image is read from a diffusers folder "
                                 "(Qwen/Qwen-Image: model_index.json, transformer/, text_encoder/, vae/, tokenizer/, "
                                 "scheduler/)"});
  return out;
}

models::ModelShape QwenImageFamily::shape(const config::TrainerConfig& cfg) const {
  // The tiny preset is built for real with the demo dataset's words; the others on meta tensors.
  const bool tiny = is_tiny(cfg);
  std::optional<QwenImageModel> tiny_model;
  if (tiny) tiny_model.emplace(QwenImageModel::build_tiny(data::all_shape_captions(), 0));
  const QwenImageConfig c = tiny ? tiny_model->transformer->config() : transformer_config(cfg);
  models::ModelShape m;
  m.name = cfg.model.path.empty() ? cfg.model.preset : cfg.model.path;
  const TrainedParts trained = resolve_trained_parts(cfg);
  const std::int64_t dim = c.inner_dim();
  auto describe_units = [&](QwenImageTransformer2DModelImpl& transformer) {
    const std::vector<ParamUnit> units = transformer.units();
    m.units = models::transformer_unit_shapes(units, c.in_channels, dim, c.num_attention_heads);
    const std::vector<LinearWeights> linear = linear_weights(transformer, units);
    for (std::size_t i = 0; i < m.units.size() && i < linear.size(); ++i) m.units[i].linear = linear[i];
    if (trained.lora) m.lora_denoiser_parameters = lora_parameter_count(transformer, lora_targets(cfg), cfg.lora.rank);
  };
  if (tiny) {
    describe_units(*tiny_model->transformer);
    describe_tiny_text(m, tiny_model->tiny_text, cfg.lora.rank);
  } else {
    const MetaTensorScope meta;
    describe_units(*QwenImageTransformer2DModel(c));
    // Qwen2.5-VL-7B's language model streamed (TransformerPipelineModel::condition); the VAE in
    // the compute dtype.
    describe_pipeline_frozen_parts(m, QwenTextConfig{}, parameter_count(*QwenVae(QwenVaeConfig{})), false);
    m.context_tokens = cfg.model.max_sequence_length.value_or(512);
  }
  m.sample_channels = c.in_channels / 4;  // packed 2×2 into the tokens
  m.out_channels = c.out_channels;
  m.context_dim = c.joint_attention_dim;
  m.time_embed_dim = dim;
  m.denoiser_adapters_name = QwenImageModel::kDenoiserAdapters;
  return m;
}

std::unique_ptr<TrainableModel> QwenImageFamily::build(const config::TrainerConfig& cfg,
                                                       const std::vector<std::string>& captions,
                                                       const UnitBuilt& on_unit) const {
  std::unique_ptr<QwenImageModel> m;
  if (!cfg.model.path.empty() && is_tiny_folder(cfg.model.path))
    m = std::make_unique<QwenImageModel>(QwenImageModel::load_folder(cfg.model.path));
  else if (is_tiny(cfg))
    m = std::make_unique<QwenImageModel>(
        QwenImageModel::build_tiny(captions, static_cast<std::uint64_t>(cfg.training.seed), on_unit));
  else
    m = std::make_unique<QwenImageModel>(QwenImageModel::load_pipeline(cfg.model.path, on_unit, true));
  const std::int64_t f = m->pixel_factor();
  if (cfg.data.resolution % f != 0)
    throw Error(ErrorKind::config, "data.resolution: " + std::to_string(cfg.data.resolution) + " must be a multiple of " +
                                       std::to_string(f) + " for Qwen-Image (VAE down-sampling × the 2×2 packing)");
  m->configure(cfg);
  return m;
}

std::unique_ptr<TrainableModel> QwenImageFamily::load_folder(const std::string& dir, const UnitBuilt& on_unit) const {
  return std::make_unique<QwenImageModel>(QwenImageModel::load_folder(dir, on_unit));
}

std::unique_ptr<TrainableModel> QwenImageFamily::load_frozen(const config::TrainerConfig& cfg) const {
  auto m = std::make_unique<QwenImageModel>(QwenImageModel::load_pipeline(cfg.model.path, {}, /*with_transformer=*/false));
  m->configure(cfg);
  return m;
}

bool QwenImageFamily::is_model_folder(const std::string& dir) const {
  return io::json_class_name(fs::path(dir) / "transformer" / "config.json") == "QwenImageTransformer2DModel";
}

bool QwenImageFamily::has_saved_base(const std::string& dir) const { return QwenImageModel::has_saved_base(dir); }

checkpoint::ExportResult QwenImageFamily::export_checkpoint(const checkpoint::CheckpointInfo& info, const std::string& out,
                                                            const checkpoint::ExportOptions& options) const {
  return checkpoint::export_qwen_image_checkpoint(info, out, options);
}

void QwenImageFamily::describe(std::ostream& out, const std::string& path, const std::string&) const {
  std::error_code ec;
  const QwenImageConfig c = QwenImageConfig::from_file((fs::path(path) / "transformer" / "config.json").string());
  if (fs::exists(fs::path(path) / "model_index.json", ec)) {
    describe_decoder_pipeline(out, path, "Qwen2",
                              std::to_string(c.num_layers) + " dual-stream blocks, " + std::to_string(c.inner_dim()) + " wide",
                              /*check_text=*/false);
    return;
  }
  out << path << ": Qwen-Image-architecture model folder, transformer " << c.num_layers << " dual-stream blocks, "
      << c.inner_dim() << " wide\n  config " << c.to_json().dump() << "\n";
}

void QwenImageFamily::evaluate(const std::string& path, const std::string&, const std::string&, const std::string&,
                               const std::string&) const {
  throw Error(ErrorKind::config, path + ": `model eval` does not run Qwen-Image components yet; `model info` "
                                        "describes the model");
}

}  // namespace zs::models
