#include "models/qwen_image/qwen_image_model.h"

#include <algorithm>
#include <filesystem>
#include <set>

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "data/latent_cache.h"
#include "io/atomic_file.h"
#include "io/json_file.h"
#include "io/safetensors.h"
#include "models/attention_options.h"
#include "models/diffusers_blocks.h"
#include "models/diffusers_folder.h"
#include "models/quantized_base.h"
#include "models/frozen_outputs.h"
#include "models/lora.h"
#include "models/transformer_lora_file.h"
#include "models/transformer_model_parts.h"
#include "models/weights.h"
#include "settings/trainer_config.h"

namespace zs::models {

namespace fs = std::filesystem;

namespace {

/// Qwen-Image's scheduler (../shared/REFERENCE.md, "Qwen-Image scheduler").
diffusion::FlowScheduleConfig qwen_image_schedule() {
  diffusion::FlowScheduleConfig s;
  s.use_dynamic_shifting = true;
  s.base_shift = 0.5;
  s.max_shift = 0.9;
  s.base_image_seq_len = 256;
  s.max_image_seq_len = 8192;
  s.time_shift_type = "exponential";
  s.shift_terminal = 0.02;
  return s;
}

}  // namespace

QwenImageModel QwenImageModel::build_tiny(const std::vector<std::string>& captions, std::uint64_t seed,
                                          const UnitBuilt& on_unit) {
  at::manual_seed(seed);
  QwenImageModel m;
  m.word_tokenizer = WordTokenizer::build(captions, 12);
  m.tiny_text = tiny_text_encoder(m.word_tokenizer);
  // Pixel space: 3 channels packed 2×2 into 12-value tokens (a 32-pixel image is 16 × 16 tokens).
  QwenImageConfig c;
  c.in_channels = 12;
  c.out_channels = 3;
  c.num_layers = 4;
  c.attention_head_dim = 16;
  c.num_attention_heads = 4;
  c.joint_attention_dim = m.tiny_text->config().hidden_size;
  c.axes_dims_rope = {4, 6, 6};
  m.transformer = QwenImageTransformer2DModel(c, on_unit);
  m.schedule = qwen_image_schedule();
  m.text_training_ = TextEncoderTraining::full;
  return m;
}

QwenImageModel QwenImageModel::build_transformer_only(const QwenImageConfig& config, std::uint64_t seed,
                                                      const UnitBuilt& on_unit) {
  at::manual_seed(seed);
  QwenImageModel m;
  m.transformer = QwenImageTransformer2DModel(config, on_unit);
  m.schedule = qwen_image_schedule();
  m.text_training_ = TextEncoderTraining::frozen;
  return m;
}

QwenImageModel QwenImageModel::load_pipeline(const std::string& dir, const UnitBuilt& on_unit, bool with_transformer) {
  const DiffusersFolder p = DiffusersFolder::open(dir);
  for (const char* part : {"transformer", "vae", "text_encoder", "tokenizer", "scheduler"})
    if (!p.has(part))
      throw Error(ErrorKind::config, dir + "/model_index.json: has no " + part +
                                         " (a Qwen-Image pipeline has transformer, vae, text_encoder, tokenizer and "
                                         "scheduler)");
  QwenImageModel m;
  m.pipeline_ = fs::absolute(dir).lexically_normal().string();
  if (with_transformer) {
    const WeightFiles r(p.weight_files("transformer"));
    m.transformer = load_units<QwenImageTransformer2DModel>(
        QwenImageConfig::from_file(p.dir("transformer") + "/config.json"), [&](const std::string& n) { return r.find(n); },
        p.dir("transformer"), on_unit);
  }
  // The frozen parts' configs and files now (a missing one is an error at once), their weights on
  // first use (text_model(), vae_model()).
  m.vae_config_ = QwenVaeConfig::from_file(p.dir("vae") + "/config.json");
  m.vae_files_ = p.weight_files("vae");
  m.text_files_ = p.weight_files("text_encoder");
  m.tokenizer = std::make_shared<QwenTokenizer>(QwenTokenizer::load(p.dir("tokenizer")));
  const std::string scheduler = p.dir("scheduler") + "/scheduler_config.json";
  m.schedule = diffusion::FlowScheduleConfig::from_json(io::read_json_file(scheduler, "scheduler config"), scheduler);
  m.text_training_ = TextEncoderTraining::frozen;
  return m;
}

bool QwenImageModel::has_saved_base(const std::string& dir) {
  return fs::exists(fs::path(dir) / "transformer" / "diffusion_pytorch_model.safetensors");
}

std::string QwenImageModel::pipeline_of(const std::string& dir) { return pipeline_reference(dir); }

QwenImageModel QwenImageModel::load_folder(const std::string& dir, const UnitBuilt& on_unit) {
  if (const std::string path = pipeline_of(dir); !path.empty()) return load_pipeline(path, on_unit, true);
  QwenImageModel m;
  load_tiny_text(dir, m.word_tokenizer, m.tiny_text);
  // A preset's base where the run keeps it (LoRA), read unit by unit for `on_unit`; otherwise the
  // checkpoint's shards hold every weight.
  m.transformer = load_units_if_saved<QwenImageTransformer2DModel>(QwenImageConfig::from_file(dir + "/transformer/config.json"),
                                                 dir + "/transformer/diffusion_pytorch_model.safetensors", on_unit);
  m.schedule = read_folder_schedule(dir);
  return m;
}

void QwenImageModel::save_folder(const std::string& dir) const {
  save_transformer_folder(dir, transformer->config().to_json(), "QwenImageTransformer2DModel", schedule);
  if (!pipeline_.empty()) io::write_file_atomic(dir + "/pipeline.json", nlohmann::json{{"path", pipeline_}}.dump(2) + "\n");
  else save_tiny_text(dir, word_tokenizer, tiny_text);
}

void QwenImageModel::save_base(const std::string& dir) const {
  if (pipeline_.empty()) save_tiny_base(dir, *transformer, *tiny_text);
}

void QwenImageModel::configure(const config::TrainerConfig& cfg) {
  Settings s;
  s.timestep_sampling.mode = cfg.training.timestep_sampling;
  s.timestep_sampling.sigmoid_scale = cfg.training.sigmoid_scale;
  s.timestep_sampling.logit_mean = cfg.training.logit_mean;
  s.timestep_sampling.logit_std = cfg.training.logit_std;
  // QwenImagePipeline's max_sequence_length (512).
  s.max_sequence_length = cfg.model.max_sequence_length.value_or(512);
  s.text_format = quant::base_format_from_string(cfg.model.text_encoder_precision);
  settings_ = s;
}

void QwenImageModel::place_frozen(torch::nn::Module& part, bool streams) {
  c10::NoGradGuard no_grad;
  freeze(part);
  part.train(false);
  if (attention_) set_attention_options(part, *attention_);
  if (frozen_dtype_) part.to(*frozen_dtype_);
  // Parked parts wait in CPU memory (a visit brings them); Qwen2.5-VL on a GPU streams from there.
  const bool home = !parking_.parked() && !(streams && frozen_home_.is_cuda());
  if (home) part.to(frozen_home_);
}

QwenTextModelImpl& QwenImageModel::text_model() {
  if (!text_encoder) {
    if (pipeline_.empty()) throw Error(ErrorKind::config, "qwen-image-tiny has no Qwen2.5-VL text encoder");
    text_encoder = load_qwen_text_model(DiffusersFolder::open(pipeline_).dir("text_encoder"), text_files_);
    if (settings_.text_format != quant::BaseFormat::bf16 && text_training_ == TextEncoderTraining::frozen)
      quantize_linears(*text_encoder, settings_.text_format);  // before place_frozen's cast
    place_frozen(*text_encoder, /*streams=*/true);
  }
  return *text_encoder;
}

QwenVaeImpl& QwenImageModel::vae_model() {
  if (!vae) {
    if (!vae_config_) throw Error(ErrorKind::config, "qwen-image-tiny has no VAE");
    vae = QwenVae(*vae_config_);
    const WeightFiles r(vae_files_);
    load_qwen_vae_weights(*vae, r.view);
    place_frozen(*vae, /*streams=*/false);
  }
  return *vae;
}

at::Tensor QwenImageModel::encode_one(const std::string& caption, const at::Device& device) {
  if (!tokenizer) return tiny_text->forward(word_tokenizer.encode_batch({caption}).to(device)).last_hidden_state;
  // On a GPU, Qwen2.5-VL stays in CPU memory and passes through the device layer by layer.
  QwenTextModelImpl& text = text_model();
  const bool stream = device.is_cuda() && text.parameters().front().device().is_cpu();
  return qwen_image_prompt_states(text, *tokenizer, caption, settings_.max_sequence_length, device, stream)
      .unsqueeze(0);
}

TextConditioning QwenImageModel::condition(const std::vector<std::string>& captions, const at::Device& device,
                                           data::LatentCache* cache) {
  // The rows' dtype: the frozen parts' (Qwen2.5-VL's, loaded or not), or the tiny encoder's.
  const auto opts = tokenizer ? at::TensorOptions().dtype(frozen_dtype_.value_or(at::kFloat)).device(device)
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
  if (tokenizer) text_model();  // loaded before the visit brings it
  const FrozenVisit visit(parking_, frozen_parts(true, false), text_encoder.ptr().get());
  // One caption at a time: a caption's rows never depend on its batch (QwenImagePipeline's
  // padding and mask make them equal anyway).
  std::vector<at::Tensor> rows;
  for (const auto& caption : captions) rows.push_back(encode_one(caption, device)[0]);
  return pad_conditioning(rows);
}

at::Tensor QwenImageModel::predict(const at::Tensor& noisy, const at::Tensor& t, const TextConditioning& cond,
                                   const at::Tensor& geometry) {
  (void)geometry;
  const std::int64_t h = noisy.size(2), w = noisy.size(3);
  const at::Tensor tokens = pack_latents_2x2(noisy.contiguous());  // QwenImagePipeline._pack_latents
  const at::Tensor context = cond.context.to(tokens.scalar_type());
  const at::Tensor mask = cond.mask.defined() ? cond.mask.to(tokens.device()) : at::Tensor();
  const at::Tensor out = transformer->forward(tokens, context, mask, t, h / 2, w / 2);
  return unpack_latents_2x2(out, h, w);
}

at::Tensor QwenImageModel::combine_guidance(const at::Tensor& uncond, const at::Tensor& cond, double scale) const {
  // pipeline_qwenimage.py: on packed tokens, comb · ‖cond‖ / ‖comb‖ over each token's values.
  const std::int64_t h = cond.size(2), w = cond.size(3);
  const at::Tensor c = pack_latents_2x2(cond.contiguous());
  const at::Tensor u = pack_latents_2x2(uncond.contiguous());
  const at::Tensor comb = u + scale * (c - u);
  const at::Tensor rescaled = comb * (c.norm(2, {-1}, true) / comb.norm(2, {-1}, true));
  return unpack_latents_2x2(rescaled, h, w);
}

at::Tensor QwenImageModel::to_model_space(const at::Tensor& images, at::Generator& generator, data::LatentCache* cache,
                                          const std::vector<std::string>* keys) {
  if (!vae_config_) return images;
  c10::NoGradGuard no_grad;
  const at::ScalarType dtype = frozen_dtype_.value_or(at::kFloat);
  const DiagonalGaussian posterior = cached_posteriors(
      images, cache, keys,
      [&](const at::Tensor& image) {
        QwenVaeImpl& v = vae_model();
        const FrozenVisit visit(parking_, frozen_parts(false, true), nullptr);
        return v.encode(image.to(dtype));
      },
      dtype);
  return vae_config_->to_model_latents(posterior.sample(generator)).to(images.scalar_type());
}

at::Tensor QwenImageModel::to_images(const at::Tensor& samples) {
  if (!vae_config_) return samples;
  c10::NoGradGuard no_grad;
  QwenVaeImpl& v = vae_model();
  const FrozenVisit visit(parking_, frozen_parts(false, true), nullptr);
  const at::Tensor z = vae_config_->from_model_latents(samples.to(at::kFloat));
  return v.decode(z.to(v.parameters().front().scalar_type())).to(at::kFloat);
}

std::int64_t QwenImageModel::sample_size(std::int64_t resolution) const {
  return vae_config_ ? resolution / vae_config_->downsample_factor() : resolution;
}

std::int64_t QwenImageModel::pixel_factor() const { return (vae_config_ ? vae_config_->downsample_factor() : 1) * 2; }

std::unique_ptr<diffusion::Objective> QwenImageModel::objective() const {
  return std::make_unique<diffusion::FlowMatching>(schedule, settings_.timestep_sampling, 2);
}

std::unique_ptr<diffusion::Sampler> QwenImageModel::sampler(std::int64_t steps, at::IntArrayRef sample_shape) const {
  const std::int64_t tokens = (sample_shape[2] / 2) * (sample_shape[3] / 2);
  return std::make_unique<diffusion::FlowMatchEulerSampler>(schedule, steps, tokens);
}

std::vector<std::pair<std::string, at::Tensor>> QwenImageModel::named_parameters() const {
  return transformer_model_parameters(*transformer, tiny_text, text_training_);
}

std::vector<ParamUnit> QwenImageModel::denoiser_units() const {
  return prefixed_units(transformer->units(), "transformer.");
}

std::size_t QwenImageModel::attach_denoiser_lora(const std::vector<std::string>& targets, const LoraOptions& o,
                                                 std::uint64_t seed) {
  return attach_lora(*transformer, targets, o, seed).size();
}

std::size_t QwenImageModel::load_lora_file(const std::string& path) {
  return load_transformer_lora_file(*transformer, path, "Qwen-Image");
}

ParamUnit QwenImageModel::denoiser_adapters() { return lora_unit(*transformer, kDenoiserAdapters, "transformer."); }

std::vector<std::pair<std::string, std::shared_ptr<torch::nn::Module>>> QwenImageModel::text_encoder_modules() const {
  return tiny_text_modules(tiny_text);
}

std::vector<std::string> QwenImageModel::text_components() const {
  std::vector<std::string> out = TrainableModel::text_components();
  if (tokenizer) out.push_back("text_encoder@" + std::to_string(settings_.max_sequence_length));
  return out;
}

void QwenImageModel::set_text_training(TextEncoderTraining t) {
  set_tiny_text_training(t, tokenizer != nullptr, "Qwen-Image's text encoder (Qwen2.5-VL-7B, 7 B parameters)", "qwen-image-tiny", tiny_text);
  text_training_ = t;
}

std::vector<ModelComponent> QwenImageModel::components() const {
  using Role = ModelComponent::Role;
  return {{module_of(transformer), Role::denoiser},
          {module_of(tiny_text), Role::text_encoder},
          {module_of(text_encoder), Role::frozen, true},
          {module_of(vae), Role::frozen}};
}

void QwenImageModel::set_attention(const AttentionOptions& o) {
  attention_ = std::make_shared<AttentionOptions>(o);  // for the parts loaded on first use
  TrainableModel::set_attention(o);
}

void QwenImageModel::to(const at::Device& device, bool with_denoiser) {
  frozen_home_ = device;
  TrainableModel::to(device, with_denoiser);
}

void QwenImageModel::frozen_to(at::ScalarType compute) {
  frozen_dtype_ = compute;  // QwenImagePipeline runs its VAE in the pipeline's dtype too
  if (text_encoder) text_encoder->to(compute);
  if (vae) vae->to(compute);
}

std::vector<torch::nn::Module*> QwenImageModel::frozen_parts(bool text, bool image) const {
  std::vector<torch::nn::Module*> out;
  if (pipeline_.empty()) return out;
  if (image && vae) out.push_back(vae.ptr().get());
  if (text && text_encoder) out.push_back(text_encoder.ptr().get());
  return out;
}

std::int64_t QwenImageModel::frozen_bytes() const {
  return parameter_bytes(frozen_parts(true, true));
}

void QwenImageModel::park_frozen(const at::Device& device, const std::vector<std::string>& remember,
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
        // Every caption is cached or remembered now: Qwen2.5-VL (7 B) leaves memory altogether,
        // and text_model() reads it again should a caption ever miss.
        text_encoder = nullptr;
      });
}

}  // namespace zs::models
