#include "models/transformer_pipeline_model.h"

#include <filesystem>
#include <ostream>

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "data/latent_cache.h"
#include "io/atomic_file.h"
#include "io/json_file.h"
#include "models/attention_options.h"
#include "models/denoiser_module.h"
#include "models/diffusers_folder.h"
#include "models/frozen_outputs.h"
#include "models/lora.h"
#include "models/model_shape.h"
#include "models/quantized_base.h"
#include "models/weights.h"
#include "models/transformer_lora_file.h"
#include "models/transformer_model_parts.h"
#include "settings/trainer_config.h"

namespace zs::models {

namespace fs = std::filesystem;

namespace {

/// pipeline.json's keys for the single files.
constexpr std::pair<const char*, std::string TransformerPipelineModel::Files::*> kFileKeys[] = {
    {"transformer_file", &TransformerPipelineModel::Files::transformer},
    {"vae_file", &TransformerPipelineModel::Files::vae},
    {"text_encoder_file", &TransformerPipelineModel::Files::text_encoder}};

}  // namespace

void describe_tiny_text(ModelShape& m, const ClipTextModel& encoder, std::int64_t lora_rank) {
  const ClipTextConfig& tc = encoder->config();
  const UnitShape text = clip_text_encoder_shape("text_encoder", tc, nullptr, lora_rank);
  m.frozen_parameters = text.parameters;
  m.frozen_text_linear = linear_weights(*encoder);
  m.text_encoders.push_back(text);
  m.latent_factor = 2;  // pixels, 2×2 patches
  m.context_tokens = tc.max_position_embeddings;
}

void describe_pipeline_frozen_parts(ModelShape& m, const QwenTextConfig& config, std::int64_t vae_parameters, bool vae_fp32) {
  const QwenTextModel text(config);
  const std::int64_t text_parameters = parameter_count(*text);
  m.frozen_streamed_parameters = text_parameters;
  for (const auto& child : text->named_modules("", false)) {
    const std::string& k = child.key();
    const auto at = k.rfind("layers.");
    const bool layer = at != std::string::npos && k.find('.', at + 7) == std::string::npos;
    if (layer && parameter_count(*child.value()) > m.frozen_streamed_piece) {
      m.frozen_streamed_piece = parameter_count(*child.value());
      m.streamed_piece_linear = linear_weights(*child.value());
    }
  }
  m.streamed_linear = m.frozen_text_linear = linear_weights(*text);
  m.frozen_parameters = vae_parameters + text_parameters;
  if (vae_fp32) m.frozen_fp32_parameters = vae_parameters;
  m.frozen_on_demand = true;  // TransformerPipelineModel::text_model(), the families' vae_model()
  m.latent_factor = 16;       // 8 (VAE) × 2 (patches): one token per 16×16 pixels
}

void describe_decoder_pipeline(std::ostream& out, const std::string& path, const std::string& tokenizer_kind,
                               const std::string& blocks, bool check_text) {
  const auto p = DiffusersFolder::open(path);
  const auto unreadable = describe_pipeline(out, p, [&](const PipelineComponent& comp) -> std::string {
    const auto t = QwenTokenizer::load(p.dir(comp.name));
    return "byte-level BPE (" + tokenizer_kind + "), vocabulary " + std::to_string(t.vocab_size());
  });
  out << "  transformer: " << blocks << "\n";
  fail_unreadable(path, unreadable);
  if (!check_text) return;
  const std::string text_config = p.dir("text_encoder") + "/config.json";
  check_qwen_text_files(QwenTextConfig::from_file(text_config), text_config, p.weight_files("text_encoder"));
}

DiffusersFolder TransformerPipelineModel::open_pipeline(const std::string& dir, const std::string& family) {
  DiffusersFolder p = DiffusersFolder::open(dir);
  for (const char* part : {"transformer", "vae", "text_encoder", "tokenizer", "scheduler"})
    if (!p.has(part))
      throw Error(ErrorKind::config, dir + "/model_index.json: has no " + part + " (a " + family +
                                         " pipeline has transformer, vae, text_encoder, tokenizer and scheduler)");
  return p;
}

TransformerPipelineModel::PipelineRef TransformerPipelineModel::pipeline_of(const std::string& dir) {
  PipelineRef ref{pipeline_reference(dir), {}};
  if (ref.path.empty()) return ref;
  const std::string file = dir + "/pipeline.json";
  const auto j = io::read_json_file(file, "pipeline reference");
  for (const auto& [key, member] : kFileKeys) {
    std::string& f = ref.files.*member;
    f = j.value(key, std::string());
    if (!f.empty() && !fs::exists(f))
      throw Error(ErrorKind::checkpoint, file + ": the run's weights came from " + f +
                                             ", which is gone; put the file back there to resume or export");
  }
  return ref;
}

void TransformerPipelineModel::set_sources(const std::string& pipeline, const Files& files) {
  auto absolute = [](const std::string& f) { return f.empty() ? f : fs::absolute(f).lexically_normal().string(); };
  pipeline_ = fs::absolute(pipeline).lexically_normal().string();
  files_ = {absolute(files.transformer), absolute(files.vae), absolute(files.text_encoder)};
}

void TransformerPipelineModel::save_folder(const std::string& dir) const {
  save_transformer_folder(dir, transformer_config_json(), transformer_class(), schedule);
  if (pipeline_.empty()) {
    save_tiny_text(dir, word_tokenizer, tiny_text);
    return;
  }
  nlohmann::json ref{{"path", pipeline_}};
  for (const auto& [key, member] : kFileKeys)
    if (!(files_.*member).empty()) ref[key] = files_.*member;
  io::write_file_atomic(dir + "/pipeline.json", ref.dump(2) + "\n");
}

void TransformerPipelineModel::save_base(const std::string& dir) const {
  if (pipeline_.empty()) save_tiny_base(dir, *transformer_module(), *tiny_text);
}

void TransformerPipelineModel::configure(const config::TrainerConfig& cfg) {
  Settings s;
  s.timestep_sampling.mode = cfg.training.timestep_sampling;
  s.timestep_sampling.sigmoid_scale = cfg.training.sigmoid_scale;
  s.timestep_sampling.logit_mean = cfg.training.logit_mean;
  s.timestep_sampling.logit_std = cfg.training.logit_std;
  s.max_sequence_length = cfg.model.max_sequence_length.value_or(default_max_sequence_length());
  s.text_format = quant::base_format_from_string(cfg.model.text_encoder_precision);
  settings_ = s;
}

void TransformerPipelineModel::place_frozen(torch::nn::Module& part, bool streams) {
  c10::NoGradGuard no_grad;
  freeze(part);
  part.train(false);
  if (attention_) set_attention_options(part, *attention_);
  if (frozen_dtype_) part.to(*frozen_dtype_);
  // Parked parts wait in CPU memory (a visit brings them); the decoder on a GPU streams from there.
  if (!parking_.parked() && !(streams && frozen_home_.is_cuda())) part.to(frozen_home_);
}

QwenTextModelImpl& TransformerPipelineModel::text_model() {
  if (!text_encoder) {
    if (pipeline_.empty()) throw Error(ErrorKind::config, std::string(names().tiny_preset) + " has no pipeline text encoder");
    text_encoder = load_qwen_text_model(DiffusersFolder::open(pipeline_).dir("text_encoder"), text_files_);
    if (settings_.text_format != quant::BaseFormat::bf16 && text_training_ == TextEncoderTraining::frozen)
      quantize_linears(*text_encoder, settings_.text_format);  // before place_frozen's cast
    place_frozen(*text_encoder, /*streams=*/true);
  }
  return *text_encoder;
}

TextConditioning TransformerPipelineModel::condition(const std::vector<std::string>& captions, const at::Device& device,
                                                     data::LatentCache* cache) {
  // The rows' dtype: the frozen parts' (the decoder's, loaded or not), or the tiny encoder's.
  const auto opts = !pipeline_.empty() ? at::TensorOptions().dtype(frozen_dtype()).device(device)
                              : tiny_text->parameters().front().options().device(device);
  if (const auto remembered = parking_.recall(captions); !remembered.empty()) {
    std::vector<at::Tensor> rows;
    for (const TextConditioning* r : remembered) rows.push_back(r->context.to(opts));
    return pad_conditioning(rows);
  }
  if (cache && !text_encoders_trained() && !captions.empty())
    return cached_conditioning(captions, *cache, /*pooled=*/false,
                               [&](const std::string& c) { return condition({c}, device); }, opts);
  if (text_encoders_trained())  // the tiny preset's encoder: the whole batch, with gradients
    return {tiny_text->forward(word_tokenizer.encode_batch(captions).to(device)).last_hidden_state, {}, {}};
  c10::NoGradGuard no_grad;
  std::vector<at::Tensor> rows;
  if (pipeline_.empty()) {
    for (const auto& caption : captions)
      rows.push_back(tiny_text->forward(word_tokenizer.encode_batch({caption}).to(device)).last_hidden_state[0]);
    return pad_conditioning(rows);
  }
  QwenTextModelImpl& text = text_model();  // loaded before the visit brings it
  const FrozenVisit visit(parking_, frozen_parts(true, false), text_encoder.ptr().get());
  // On a GPU, the decoder stays in CPU memory and passes through the device layer by layer. One
  // caption at a time: a caption's rows never depend on its batch.
  const bool stream = device.is_cuda() && text.parameters().front().device().is_cpu();
  for (const auto& caption : captions) rows.push_back(prompt_states(text, caption, device, stream));
  return pad_conditioning(rows);
}

std::vector<std::pair<std::string, at::Tensor>> TransformerPipelineModel::named_parameters() const {
  return transformer_model_parameters(*transformer_module(), tiny_text, text_training_);
}

std::vector<ParamUnit> TransformerPipelineModel::denoiser_units() const {
  return prefixed_units(transformer_module()->units(), "transformer.");
}

std::size_t TransformerPipelineModel::attach_denoiser_lora(const std::vector<std::string>& targets,
                                                           const LoraOptions& o, std::uint64_t seed) {
  return attach_lora(*transformer_module(), targets, o, seed).size();
}

ParamUnit TransformerPipelineModel::denoiser_adapters() {
  return lora_unit(*transformer_module(), kDenoiserAdapters, "transformer.");
}

std::size_t TransformerPipelineModel::load_lora_file(const std::string& path) {
  return load_transformer_lora_file(*transformer_module(), path, names().family);
}

std::vector<std::pair<std::string, std::shared_ptr<torch::nn::Module>>> TransformerPipelineModel::text_encoder_modules()
    const {
  return tiny_text_modules(tiny_text);
}

std::vector<std::string> TransformerPipelineModel::text_components() const {
  std::vector<std::string> out = TrainableModel::text_components();
  if (!pipeline_.empty()) out.push_back("text_encoder@" + std::to_string(settings_.max_sequence_length));
  return out;
}

void TransformerPipelineModel::set_text_training(TextEncoderTraining t) {
  set_tiny_text_training(t, !pipeline_.empty(), names().encoder, names().tiny_preset, tiny_text);
  text_training_ = t;
}

std::vector<ModelComponent> TransformerPipelineModel::components() const {
  using Role = ModelComponent::Role;
  return {{transformer_module(), Role::denoiser},
          {module_of(tiny_text), Role::text_encoder},
          {module_of(text_encoder), Role::frozen, true},
          {loaded_vae(), Role::frozen}};
}

void TransformerPipelineModel::set_attention(const AttentionOptions& o) {
  attention_ = std::make_shared<AttentionOptions>(o);
  TrainableModel::set_attention(o);
}

void TransformerPipelineModel::to(const at::Device& device, bool with_denoiser) {
  frozen_home_ = device;
  TrainableModel::to(device, with_denoiser);
}

void TransformerPipelineModel::frozen_to(at::ScalarType compute) {
  frozen_dtype_ = compute;  // the pipelines run their VAE in the pipeline's dtype too
  if (text_encoder) text_encoder->to(compute);
  if (torch::nn::Module* vae = loaded_vae()) vae->to(compute);
}

std::vector<torch::nn::Module*> TransformerPipelineModel::frozen_parts(bool text, bool image) const {
  std::vector<torch::nn::Module*> out;
  if (pipeline_.empty()) return out;
  if (torch::nn::Module* vae = loaded_vae(); image && vae) out.push_back(vae);
  if (text && text_encoder) out.push_back(text_encoder.ptr().get());
  return out;
}

std::int64_t TransformerPipelineModel::frozen_bytes() const { return parameter_bytes(frozen_parts(true, true)); }

void TransformerPipelineModel::park_frozen(const at::Device& device, const std::vector<std::string>& remember,
                                           data::LatentCache* text_cache) {
  if (parking_.parked() || pipeline_.empty()) return;
  parking_.park(
      device, remember,
      // A caption's own rows [n, D] (no padding, no mask: one caption).
      [&](const std::string& caption) {
        return TextConditioning{condition({caption}, device, text_cache).context[0], {}, {}};
      },
      [&] {
        if (!device.is_cpu()) {
          c10::NoGradGuard no_grad;
          for (auto* part : frozen_parts(true, true)) part->to(at::kCPU);
        }
        // Every caption is cached or remembered now: the decoder (billions of parameters) leaves
        // memory altogether, and text_model() reads it again should a caption ever miss.
        text_encoder = nullptr;
      });
}

}  // namespace zs::models
