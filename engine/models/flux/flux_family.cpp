#include "models/flux/flux_family.h"

#include <filesystem>
#include <map>
#include <optional>
#include <ostream>

#include <nlohmann/json.hpp>

#include "checkpoint/export.h"
#include "core/error.h"
#include "core/meta_tensors.h"
#include "core/text.h"
#include "data/shapes.h"
#include "io/json_file.h"
#include "io/safetensors.h"
#include "models/autoencoder_kl.h"
#include "models/clip_text_model.h"
#include "models/diffusers_folder.h"
#include "models/flux/flux_export.h"
#include "models/flux/flux_model.h"
#include "models/flux/flux_single_file.h"
#include "models/flux/flux_transformer.h"
#include "models/lora.h"
#include "models/model_shape.h"
#include "models/quantized_base.h"
#include "models/t5_encoder.h"
#include "models/t5_tokenizer.h"
#include "models/trainable_model.h"
#include "models/weights.h"
#include "settings/trainer_config.h"

namespace zs::models {

namespace fs = std::filesystem;

namespace {

/// Whether `dir` is a flux-tiny model exported as a folder (its word tokenizer's tokenizer.json and
/// transformer/config.json, no model_index.json): what model.path may name to train on.
bool is_tiny_folder(const std::string& dir) {
  std::error_code ec;
  const fs::path d(dir);
  return fs::is_regular_file(d / "tokenizer" / "tokenizer.json", ec) &&
         fs::is_regular_file(d / "transformer" / "config.json", ec) && !fs::exists(d / "model_index.json", ec);
}

/// Whether the config's model is the flux-tiny preset (built from scratch, or an exported one).
bool is_tiny(const config::TrainerConfig& cfg) {
  std::error_code ec;
  if (!cfg.model.path.empty() && fs::exists(cfg.model.path, ec)) return is_tiny_folder(cfg.model.path);
  return cfg.model.preset == "flux-tiny";
}

/// The transformer's configuration: model.path's transformer/config.json (a diffusers folder or
/// a run's model folder), a BFL file's (model.config_path's transformer/config.json where it has
/// one, else read from the file's shapes), else the preset's full size.
FluxConfig transformer_config(const config::TrainerConfig& cfg) {
  FluxConfig c;
  c.guidance_embeds = cfg.model.preset != "flux-schnell";
  std::error_code ec;
  if (!cfg.model.path.empty() && fs::is_directory(cfg.model.path, ec))
    return FluxConfig::from_file((fs::path(cfg.model.path) / "transformer" / "config.json").string());
  if (!cfg.model.path.empty() && fs::is_regular_file(cfg.model.path, ec)) {
    const fs::path companion = fs::path(cfg.model.config_path) / "transformer" / "config.json";
    if (!cfg.model.config_path.empty() && fs::exists(companion, ec)) return FluxConfig::from_file(companion.string());
    return BflFile(cfg.model.path).config();
  }
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
    return io::json_class_name(dir / "model_index.json") == "FluxPipeline" ||
           io::json_class_name(dir / "transformer" / "config.json") == "FluxTransformer2DModel";
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
  return {{"flux-tiny", "Tiny Flux.1-architecture demo model (trains on the CPU)", true},
          {"flux-dev", "Flux.1 [dev] architecture"},
          {"flux-schnell", "Flux.1 [schnell] architecture"}};
}

std::vector<WizardChoice> FluxFamily::wizard_choices() const {
  // As configs/flux-dev-*.yaml set them: 1024 px, batch 1, lr 1e-5 and 1e-4, a constant rate, the
  // schema's shift sampling (sd-scripts' flux_shift; [schnell] is the same transformer, distilled).
  return {{"flux-dev", "Flux.1 [dev]", {"flux-dev"}, true, true, 1024, "", "shift", 1, 1e-5, 1e-4, "constant", 0, true},
          {"flux-schnell", "Flux.1 [schnell]", {"flux-schnell"}, true, true, 1024, "", "shift", 1, 1e-5, 1e-4, "constant",
           0, true}};
}

TextEncoderTraining FluxFamily::auto_text_training(const config::TrainerConfig& cfg) const {
  // The tiny preset's own encoder trains with it; a pipeline's stay frozen (their outputs cached).
  return is_tiny(cfg) ? TextEncoderTraining::full : TextEncoderTraining::frozen;
}

std::int64_t FluxFamily::default_sampling_steps(const config::TrainerConfig& cfg) const {
  // FluxPipeline's num_inference_steps (28); [schnell] is distilled to 4 steps.
  if (is_tiny(cfg)) return 28;
  return transformer_config(cfg).guidance_embeds ? 28 : 4;
}

double FluxFamily::default_guidance_scale(const config::TrainerConfig& cfg) const {
  // [dev]: FluxPipeline's guidance_scale 3.5, embedded; [schnell] and the tiny preset: no guidance.
  if (is_tiny(cfg)) return 1.0;
  return transformer_config(cfg).guidance_embeds ? 3.5 : 1.0;
}

bool FluxFamily::recognizes(const config::TrainerConfig& cfg) const {
  const bool preset = cfg.model.preset == "flux-dev" || cfg.model.preset == "flux-schnell" || cfg.model.preset == "flux-tiny";
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
  return {"model.prediction_type", "training.min_snr_gamma", "lora.init_from"};
}

std::vector<FamilyFinding> FluxFamily::check(const config::TrainerConfig& cfg) const {
  std::vector<FamilyFinding> out;
  if (cfg.training.train_text_encoder == "full")
    out.push_back({"training.train_text_encoder",
                   "full is not offered for Flux.1: T5-XXL (4.8 B parameters) never trains, and CLIP-L takes `lora`"});
  std::error_code ec;
  if (!cfg.model.path.empty() && fs::is_regular_file(cfg.model.path, ec)) {
    // A BFL single file holds the transformer alone: the rest comes from a diffusers Flux folder.
    const std::string why = " (a Black Forest Labs single file holds the transformer alone: VAE, CLIP-L, T5, their "
                            "tokenizers and the scheduler come from a diffusers Flux folder, e.g. black-forest-labs/"
                            "FLUX.1-dev without its transformer weights)";
    if (cfg.model.config_path.empty())
      out.push_back({"model.config_path", "set it to a diffusers Flux folder" + why});
    else if (!fs::exists(fs::path(cfg.model.config_path) / "model_index.json", ec))
      out.push_back({"model.config_path", "'" + cfg.model.config_path + "' has no model_index.json" + why});
  }
  for (const auto& [key, file] : {std::pair<const char*, const std::string*>{"model.vae_path", &cfg.model.vae_path},
                                  {"model.text_encoder_path", &cfg.model.text_encoder_path},
                                  {"model.text_encoder_2_path", &cfg.model.text_encoder_2_path}})
    if (!file->empty() && !fs::is_regular_file(*file, ec))
      out.push_back({key, "file '" + *file + "' does not exist (a .safetensors weight file)"});
  return out;
}

models::ModelShape FluxFamily::shape(const config::TrainerConfig& cfg) const {
  // The tiny preset is built for real (a few hundred thousand parameters) with the demo dataset's
  // words; the others are described on meta tensors.
  const bool tiny = is_tiny(cfg);
  std::optional<FluxModel> tiny_model;
  if (tiny) tiny_model.emplace(FluxModel::build_tiny(data::all_shape_captions(), 0));
  const FluxConfig c = tiny ? tiny_model->transformer->config() : transformer_config(cfg);
  models::ModelShape m;
  m.name = cfg.model.path.empty() ? cfg.model.preset : cfg.model.path;
  const TrainedParts trained = resolve_trained_parts(cfg);
  const std::int64_t dim = c.inner_dim();
  auto describe_units = [&](FluxTransformer2DModelImpl& transformer) {
    const std::vector<ParamUnit> units = transformer.units();
    m.units = models::transformer_unit_shapes(units, c.in_channels, dim, c.num_attention_heads);
    const std::vector<LinearWeights> linear = linear_weights(transformer, units);
    for (std::size_t i = 0; i < m.units.size() && i < linear.size(); ++i) m.units[i].linear = linear[i];
    if (trained.lora)
      m.lora_denoiser_parameters = lora_parameter_count(transformer, lora_targets(cfg), cfg.lora.rank);
  };
  const std::vector<std::string> text_targets = text_encoder_lora_targets(cfg);
  const std::vector<std::string>* lora_text = trained.text == TextEncoderTraining::lora ? &text_targets : nullptr;
  if (tiny) {
    describe_units(*tiny_model->transformer);
    // Its own encoder stands in for CLIP and T5 (counted as the SD tiny preset's is).
    const ClipTextConfig& tc = tiny_model->clip->config();
    const models::UnitShape text = models::clip_text_encoder_shape("text_encoder", tc, lora_text, cfg.lora.rank);
    m.frozen_parameters = text.parameters;
    m.frozen_text_linear = linear_weights(*tiny_model->clip);
    m.lora_text_parameters = text.lora_parameters;
    m.text_encoders.push_back(text);
    m.latent_factor = 2;  // pixels, packed 2×2 into the tokens
    m.context_tokens = tc.max_position_embeddings;
  } else {
    const MetaTensorScope meta;
    describe_units(*FluxTransformer2DModel(c));
    const std::int64_t vae_parameters = parameter_count(*AutoencoderKL(AutoencoderKLConfig::flux1()));
    // T5 v1.1 XXL's encoder (the config's defaults): counted, never trained.
    const T5EncoderModel t5(T5Config{});
    const std::int64_t t5_parameters = parameter_count(*t5);
    // On a GPU it streams block by block (FluxModel::encode): the device holds one piece at a time.
    m.frozen_streamed_parameters = t5_parameters;
    m.frozen_streamed_piece = parameter_count(*t5->shared);
    for (const auto& block : *t5->encoder->block)
      if (parameter_count(*block) > m.frozen_streamed_piece) {
        m.frozen_streamed_piece = parameter_count(*block);
        m.streamed_piece_linear = linear_weights(*block);
      }
    m.streamed_linear = linear_weights(*t5);
    m.frozen_text_linear = m.streamed_linear;
    m.frozen_text_linear += linear_weights(*ClipTextModel(ClipTextConfig{}));
    // CLIP-L (the config's defaults), which LoRA may train.
    const models::UnitShape text =
        models::clip_text_encoder_shape("text_encoder", ClipTextConfig{}, lora_text, cfg.lora.rank);
    m.frozen_parameters = vae_parameters + text.parameters + t5_parameters;
    m.frozen_fp32_parameters = vae_parameters;  // force_upcast
    m.lora_text_parameters = text.lora_parameters;
    m.text_encoders.push_back(text);
    m.latent_factor = 16;  // 8 (VAE) × 2 (packing): one token per 16×16 pixels
    m.context_tokens = cfg.model.max_sequence_length ? *cfg.model.max_sequence_length
                       : c.guidance_embeds           ? 512
                                                     : 256;
  }
  m.sample_channels = c.in_channels / 4;  // packed 2×2 into the tokens
  m.out_channels = c.out_channels;
  m.context_dim = c.joint_attention_dim;
  m.time_embed_dim = dim;
  m.denoiser_adapters_name = FluxModel::kDenoiserAdapters;
  return m;
}

std::unique_ptr<TrainableModel> FluxFamily::build(const config::TrainerConfig& cfg, const std::vector<std::string>& captions,
                                                  const UnitBuilt& on_unit) const {
  std::unique_ptr<FluxModel> m;
  std::error_code ec;
  if (!cfg.model.path.empty() && is_tiny_folder(cfg.model.path)) {
    // A flux-tiny model exported as a folder (`export --format diffusers`): training goes on from it.
    m = std::make_unique<FluxModel>(FluxModel::load_folder(cfg.model.path));
  } else if (is_tiny(cfg)) {
    m = std::make_unique<FluxModel>(FluxModel::build_tiny(captions, static_cast<std::uint64_t>(cfg.training.seed), on_unit));
  } else {
    const FluxModel::Companions companions{cfg.model.vae_path, cfg.model.text_encoder_path, cfg.model.text_encoder_2_path};
    if (fs::is_regular_file(cfg.model.path, ec))  // BFL's transformer, the rest from model.config_path
      m = std::make_unique<FluxModel>(
          FluxModel::load_pipeline(cfg.model.config_path, on_unit, true, cfg.model.path, companions));
    else
      m = std::make_unique<FluxModel>(FluxModel::load_pipeline(cfg.model.path, on_unit, true, "", companions));
  }
  const std::int64_t f = m->pixel_factor();
  if (cfg.data.resolution % f != 0)
    throw Error(ErrorKind::config, "data.resolution: " + std::to_string(cfg.data.resolution) + " must be a multiple of " +
                                       std::to_string(f) + " for Flux.1 (VAE down-sampling × the 2×2 packing)");
  m->configure(cfg);
  return m;
}

std::unique_ptr<TrainableModel> FluxFamily::load_folder(const std::string& dir, const UnitBuilt& on_unit) const {
  return std::make_unique<FluxModel>(FluxModel::load_folder(dir, on_unit));
}

std::unique_ptr<TrainableModel> FluxFamily::load_frozen(const config::TrainerConfig& cfg) const {
  std::error_code ec;
  const std::string folder = fs::is_regular_file(cfg.model.path, ec) ? cfg.model.config_path : cfg.model.path;
  auto m = std::make_unique<FluxModel>(FluxModel::load_pipeline(
      folder, {}, /*with_transformer=*/false, "",
      {cfg.model.vae_path, cfg.model.text_encoder_path, cfg.model.text_encoder_2_path}));
  m->configure(cfg);
  return m;
}

bool FluxFamily::is_model_folder(const std::string& dir) const {
  return io::json_class_name(fs::path(dir) / "transformer" / "config.json") == "FluxTransformer2DModel";
}

bool FluxFamily::has_saved_base(const std::string& dir) const { return FluxModel::has_saved_base(dir); }

checkpoint::ExportResult FluxFamily::export_checkpoint(const checkpoint::CheckpointInfo& info, const std::string& out,
                                                       const checkpoint::ExportOptions& options) const {
  return checkpoint::export_flux_checkpoint(info, out, options);
}

void FluxFamily::describe(std::ostream& out, const std::string& path, const std::string& config_path) const {
  std::error_code ec;
  if (fs::is_directory(path, ec) && fs::exists(fs::path(path) / "model_index.json", ec)) {
    const auto p = DiffusersFolder::open(path);
    const auto unreadable = describe_pipeline(out, p, [&](const PipelineComponent& c) -> std::string {
      if (c.name == "tokenizer_2") {
        const auto t = T5Tokenizer::load_folder(p.dir(c.name));
        return "SentencePiece (spiece.model), vocabulary " + std::to_string(t.vocab_size());
      }
      const auto t = p.load_tokenizer(c.name);
      return "vocabulary " + std::to_string(t.vocab_size()) + ", " + std::to_string(t.max_length()) + " tokens";
    });
    const FluxConfig c = FluxConfig::from_file(p.dir("transformer") + "/config.json");
    out << "  transformer: " << c.num_layers << " double-stream + " << c.num_single_layers << " single-stream blocks, "
        << c.inner_dim() << " wide, " << (c.guidance_embeds ? "guidance embedding (Flux.1 [dev] kind)" : "no guidance embedding ([schnell] kind)")
        << "\n";
    fail_unreadable(path, unreadable);
    return;
  }
  if (fs::is_regular_file(path, ec)) {
    // Black Forest Labs' single file: the transformer alone, its configuration read from the shapes.
    const BflFile bfl(path);
    std::int64_t params = 0;
    std::map<std::string, std::int64_t> dtypes;
    for (const auto& e : bfl.reader().entries()) {
      params += e.numel();
      dtypes[e.dtype] += e.numel();
    }
    const std::string& prefix = bfl.prefix();
    const FluxConfig c = bfl.config(config_path);  // as a run with model.config_path reads it
    out << path << ": Black Forest Labs' single-file Flux.1 transformer" << (prefix.empty() ? "" : " (prefix " + prefix + ")")
        << ", " << params << " parameters, " << format_bytes(static_cast<std::int64_t>(fs::file_size(path)))
        << "\n  dtypes:";
    for (const auto& [d, n] : dtypes) out << " " << d << "(" << n << ")";
    out << "\n  transformer: " << c.num_layers << " double-stream + " << c.num_single_layers << " single-stream blocks, "
        << c.inner_dim() << " wide, " << (c.guidance_embeds ? "guidance embedding ([dev])" : "no guidance embedding ([schnell])")
        << "\n  config " << c.to_json().dump() << "\n";
    return;
  }
  // A run's model folder or an exported flux-tiny.
  const FluxConfig c = FluxConfig::from_file((fs::path(path) / "transformer" / "config.json").string());
  out << path << ": Flux.1-architecture model folder, transformer " << c.num_layers << " double-stream + "
      << c.num_single_layers << " single-stream blocks, " << c.inner_dim() << " wide\n  config " << c.to_json().dump() << "\n";
}

void FluxFamily::evaluate(const std::string& path, const std::string&, const std::string&, const std::string&,
                          const std::string&) const {
  throw Error(ErrorKind::config, path + ": `model eval` does not run Flux.1 components yet (issue 35 continues); "
                                        "`model info` describes the model");
}

}  // namespace zs::models
