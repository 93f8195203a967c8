#include "models/flux/flux_model.h"

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
#include "models/diffusers_folder.h"
#include "models/flux/flux_single_file.h"
#include "models/frozen_outputs.h"
#include "models/lora.h"
#include "models/transformer_model_parts.h"
#include "models/weights.h"
#include "settings/trainer_config.h"

namespace zs::models {

namespace fs = std::filesystem;


FluxModel FluxModel::build_tiny(const std::vector<std::string>& captions, std::uint64_t seed, const UnitBuilt& on_unit) {
  at::manual_seed(seed);
  FluxModel m;
  m.word_tokenizer = WordTokenizer::build(captions, 12);
  m.clip = tiny_text_encoder(m.word_tokenizer);
  // Pixel space: 3 channels packed 2×2 into 12-value tokens (a 32-pixel image is 16 × 16 tokens);
  // [schnell]'s kind (no guidance embedding: a model trained from scratch has no distilled
  // guidance to embed, so its samples use true classifier-free guidance).
  FluxConfig c;
  c.in_channels = 12;
  c.out_channels = 12;
  c.num_layers = 2;
  c.num_single_layers = 4;
  c.attention_head_dim = 16;
  c.num_attention_heads = 4;
  c.joint_attention_dim = m.clip->config().hidden_size;
  c.pooled_projection_dim = m.clip->config().hidden_size;
  c.guidance_embeds = false;
  c.axes_dims_rope = {4, 6, 6};
  m.transformer = FluxTransformer2DModel(c, on_unit);
  // [dev]'s scheduler: the shift follows the image's token count (here 256 tokens: e^0.5).
  m.schedule.use_dynamic_shifting = true;
  m.schedule.shift = 3.0;
  m.text_training_ = TextEncoderTraining::full;
  return m;
}

FluxModel FluxModel::build_transformer_only(const FluxConfig& config, std::uint64_t seed, const UnitBuilt& on_unit) {
  at::manual_seed(seed);
  FluxModel m;
  m.transformer = FluxTransformer2DModel(config, on_unit);
  m.schedule.use_dynamic_shifting = true;  // [dev]'s and [schnell]'s scheduler configs
  m.schedule.shift = 3.0;
  m.text_training_ = TextEncoderTraining::frozen;
  return m;
}

namespace {

std::string absolute_or_empty(const std::string& path) {
  return path.empty() ? path : fs::absolute(path).lexically_normal().string();
}

}  // namespace

FluxModel FluxModel::load_pipeline(const std::string& dir, const UnitBuilt& on_unit, bool with_transformer,
                                   const std::string& transformer_file, const Companions& companions) {
  const DiffusersFolder p = DiffusersFolder::open(dir);
  for (const char* part : {"transformer", "vae", "text_encoder", "text_encoder_2", "tokenizer", "tokenizer_2", "scheduler"})
    if (!p.has(part) && !(transformer_file.size() && std::string(part) == "transformer"))
      throw Error(ErrorKind::config, dir + "/model_index.json: has no " + part +
                                         " (a Flux.1 pipeline has transformer, vae, text_encoder, text_encoder_2, "
                                         "tokenizer, tokenizer_2 and scheduler)");
  FluxModel m;
  m.pipeline_ = fs::absolute(dir).lexically_normal().string();
  if (!transformer_file.empty()) m.transformer_file_ = fs::absolute(transformer_file).lexically_normal().string();
  if (with_transformer && transformer_file.empty()) {
    const std::string config = p.dir("transformer") + "/config.json";
    const WeightFiles r(p.weight_files("transformer"));
    m.transformer = load_units<FluxTransformer2DModel>(
        FluxConfig::from_file(config), [&](const std::string& n) { return r.find(n); }, p.dir("transformer"), on_unit);
  } else if (with_transformer) {
    // Black Forest Labs' single file: its tensors mapped onto diffusers' names as they are read;
    // the configuration from the folder's transformer/config.json, else from the file's shapes.
    const BflFile file(transformer_file);
    const FluxConfig c = file.config(dir);
    m.transformer = load_units<FluxTransformer2DModel>(
        c, [&](const std::string& n) { return file.tensor(n, c); }, transformer_file, on_unit);
  }
  m.companions_ = {absolute_or_empty(companions.vae), absolute_or_empty(companions.text_encoder),
                   absolute_or_empty(companions.text_encoder_2)};
  m.vae = companions.vae.empty()
              ? p.load_vae()
              : load_vae_file(AutoencoderKLConfig::from_file(p.dir("vae") + "/config.json"), companions.vae);
  freeze(*m.vae);
  if (companions.text_encoder.empty()) {
    m.clip = p.load_text_encoder("text_encoder");
  } else {
    // clip_l.safetensors: transformers' names, with or without the "text_model." level.
    m.clip = ClipTextModel(ClipTextConfig::from_file(p.dir("text_encoder") + "/config.json"));
    const WeightFiles r({companions.text_encoder});
    load_weights(*m.clip, r.view, "", [](const std::string& name) -> std::vector<std::string> {
      if (name.rfind("text_model.", 0) == 0) return {name.substr(11)};
      return {};
    });
  }
  freeze(*m.clip);
  m.clip_tokenizer = std::make_shared<ClipTokenizer>(p.load_tokenizer("tokenizer"));
  {
    m.t5 = T5EncoderModel(T5Config::from_file(p.dir("text_encoder_2") + "/config.json"));
    const WeightFiles r(companions.text_encoder_2.empty() ? p.weight_files("text_encoder_2")
                                                          : std::vector<std::string>{companions.text_encoder_2});
    // t5xxl files may keep the embedding as encoder.embed_tokens only (the shared matrix).
    load_weights(*m.t5, r.view, "", [](const std::string& name) -> std::vector<std::string> {
      if (name == "shared.weight") return {"encoder.embed_tokens.weight"};
      return {};
    });
    freeze(*m.t5);
  }
  m.t5_tokenizer = std::make_shared<T5Tokenizer>(T5Tokenizer::load_folder(p.dir("tokenizer_2")));
  const std::string scheduler = p.dir("scheduler") + "/scheduler_config.json";
  m.schedule = diffusion::FlowScheduleConfig::from_json(io::read_json_file(scheduler, "scheduler config"), scheduler);
  m.text_training_ = TextEncoderTraining::frozen;
  return m;
}

bool FluxModel::is_model_folder(const std::string& dir) {
  return fs::exists(fs::path(dir) / "transformer" / "config.json");
}

bool FluxModel::has_saved_base(const std::string& dir) {
  return fs::exists(fs::path(dir) / "transformer" / "diffusion_pytorch_model.safetensors");
}

FluxModel::PipelineRef FluxModel::pipeline_of(const std::string& dir) {
  const std::string ref_file = dir + "/pipeline.json";
  if (!fs::exists(ref_file)) return {};
  const auto j = io::read_json_file(ref_file, "pipeline reference");
  PipelineRef ref{j.value("path", std::string()), j.value("transformer_file", std::string()),
                  {j.value("vae_file", std::string()), j.value("text_encoder_file", std::string()),
                   j.value("text_encoder_2_file", std::string())}};
  if (!fs::exists(fs::path(ref.path) / "model_index.json"))
    throw Error(ErrorKind::checkpoint, ref_file + ": the run was trained from " + ref.path +
                                           ", which is gone; put the pipeline folder back there to resume or export");
  for (const std::string& f : {ref.transformer_file, ref.companions.vae, ref.companions.text_encoder,
                               ref.companions.text_encoder_2})
    if (!f.empty() && !fs::exists(f))
      throw Error(ErrorKind::checkpoint, ref_file + ": the run's weights came from " + f +
                                             ", which is gone; put the file back there to resume or export");
  return ref;
}

FluxModel FluxModel::load_folder(const std::string& dir, const UnitBuilt& on_unit) {
  if (const PipelineRef ref = pipeline_of(dir); !ref.path.empty())
    return load_pipeline(ref.path, on_unit, true, ref.transformer_file, ref.companions);
  FluxModel m;
  load_tiny_text(dir, m.word_tokenizer, m.clip);
  // A preset's base where the run keeps it (LoRA), read unit by unit for `on_unit`; otherwise the
  // checkpoint's shards hold every weight.
  m.transformer = load_units_if_saved<FluxTransformer2DModel>(FluxConfig::from_file(dir + "/transformer/config.json"),
                                                 dir + "/transformer/diffusion_pytorch_model.safetensors", on_unit);
  m.schedule = read_folder_schedule(dir);
  return m;
}

void FluxModel::save_folder(const std::string& dir) const {
  save_transformer_folder(dir, transformer->config().to_json(), "FluxTransformer2DModel", schedule);
  if (pipeline_.empty()) {
    save_tiny_text(dir, word_tokenizer, clip);
    return;
  }
  nlohmann::json ref = {{"path", pipeline_}};
  if (!transformer_file_.empty()) ref["transformer_file"] = transformer_file_;
  if (!companions_.vae.empty()) ref["vae_file"] = companions_.vae;
  if (!companions_.text_encoder.empty()) ref["text_encoder_file"] = companions_.text_encoder;
  if (!companions_.text_encoder_2.empty()) ref["text_encoder_2_file"] = companions_.text_encoder_2;
  io::write_file_atomic(dir + "/pipeline.json", ref.dump(2) + "\n");
}

void FluxModel::save_base(const std::string& dir) const {
  if (pipeline_.empty()) save_tiny_base(dir, *transformer, *clip);
}

void FluxModel::configure(const config::TrainerConfig& cfg) {
  Settings s;
  s.timestep_sampling.mode = cfg.training.timestep_sampling;
  s.timestep_sampling.sigmoid_scale = cfg.training.sigmoid_scale;
  s.timestep_sampling.logit_mean = cfg.training.logit_mean;
  s.timestep_sampling.logit_std = cfg.training.logit_std;
  s.guidance = cfg.training.guidance;
  // [schnell] is commonly run with 256 T5 tokens, [dev] with FluxPipeline's 512.
  const bool schnell = transformer && !transformer->config().guidance_embeds;
  s.max_sequence_length = cfg.model.max_sequence_length.value_or(schnell ? 256 : 512);
  settings_ = s;
}

TextConditioning FluxModel::encode(const std::vector<std::string>& captions, const at::Device& device) {
  const auto n = static_cast<std::int64_t>(captions.size());
  if (!clip_tokenizer) {  // the tiny preset: one encoder stands in for both
    const ClipTextOutput out = clip->forward(word_tokenizer.encode_batch(captions).to(device));
    return {out.last_hidden_state, out.pooled};
  }
  // FluxPipeline._get_clip_prompt_embeds: CLIP's pooled output over 77 tokens.
  std::vector<std::int64_t> ids;
  for (const auto& c : captions) {
    const auto framed = clip_tokenizer->frame(c);
    ids.insert(ids.end(), framed.begin(), framed.end());
  }
  const at::Tensor pooled = clip->forward(at::tensor(ids, at::kLong).view({n, -1}).to(device)).pooled;
  // _get_t5_prompt_embeds: T5's last hidden state over max_sequence_length tokens, no mask.
  ids.clear();
  for (const auto& c : captions) {
    const auto t = t5_tokenizer->encode(c, settings_.max_sequence_length);
    ids.insert(ids.end(), t.begin(), t.end());
  }
  // On a GPU, T5-XXL stays in CPU memory and passes through the device block by block.
  const at::Tensor t5_ids = at::tensor(ids, at::kLong).view({n, -1});
  const bool stream = device.is_cuda() && t5->parameters().front().device().is_cpu();
  const at::Tensor context = stream ? t5->forward_streamed(t5_ids, device) : t5->forward(t5_ids.to(device));
  return {context, pooled};
}

TextConditioning FluxModel::condition(const std::vector<std::string>& captions, const at::Device& device,
                                      data::LatentCache* cache) {
  if (const auto rows = parking_.recall(captions); !rows.empty()) {
    std::vector<at::Tensor> context, pooled;
    for (const TextConditioning* r : rows) {
      context.push_back(r->context);
      pooled.push_back(r->pooled);
    }
    const auto opts = clip->parameters().front().options().device(device);
    return {at::cat(context).to(opts), at::cat(pooled).to(opts)};
  }
  if (cache && !text_encoders_trained() && !captions.empty())
    return cached_conditioning(captions, *cache, /*pooled=*/true,
                               [&](const std::string& c) { return condition({c}, device); },
                               clip->parameters().front().options().device(device));
  if (text_encoders_trained()) return encode(captions, device);  // the whole batch, with gradients
  c10::NoGradGuard no_grad;
  const FrozenVisit visit(parking_, frozen_parts(true, false), t5.ptr().get());
  if (captions.size() > 1) {
    // One caption at a time, so a caption's rows never depend on its batch (DiffusionModel says why).
    std::vector<at::Tensor> context, pooled;
    for (const auto& caption : captions) {
      const TextConditioning one = encode({caption}, device);
      context.push_back(one.context);
      pooled.push_back(one.pooled);
    }
    return {at::cat(context), at::cat(pooled)};
  }
  return encode(captions, device);
}

at::Tensor FluxModel::predict(const at::Tensor& noisy, const at::Tensor& t, const TextConditioning& cond,
                              const at::Tensor& geometry) {
  (void)geometry;
  const std::int64_t b = noisy.size(0), h = noisy.size(2), w = noisy.size(3);
  const at::Tensor tokens = pack_latents_2x2(noisy.contiguous());
  const auto opts = tokens.options();
  // FluxPipeline: image ids (0, row, column) of the token grid; text ids all zero.
  const at::Tensor img_ids = flux_image_ids(h / 2, w / 2, opts);
  const at::Tensor txt_ids = at::zeros({cond.context.size(1), 3}, opts);
  at::Tensor guidance;
  if (embeds_guidance())
    guidance = at::full({b}, sampling_guidance_ >= 0 ? sampling_guidance_ : settings_.guidance, opts.dtype(at::kFloat));
  const at::Tensor context = cond.context.to(opts.dtype());
  const at::Tensor pooled = cond.pooled.to(opts.dtype());
  const at::Tensor out = transformer->forward(tokens, context, pooled, t, img_ids, txt_ids, guidance);
  return unpack_latents_2x2(out, h, w);
}

at::Tensor FluxModel::to_model_space(const at::Tensor& images, at::Generator& generator, data::LatentCache* cache,
                                     const std::vector<std::string>* keys) {
  if (!vae) return images;
  c10::NoGradGuard no_grad;
  const DiagonalGaussian posterior = cached_posteriors(
      images, cache, keys,
      [&](const at::Tensor& image) {
        const FrozenVisit visit(parking_, frozen_parts(false, true), nullptr);
        return vae->encode(image.to(vae->parameters().front().dtype()));
      },
      vae->parameters().front().scalar_type());
  return vae->config().to_model_latents(posterior.sample(generator)).to(images.scalar_type());
}

at::Tensor FluxModel::to_images(const at::Tensor& samples) {
  if (!vae) return samples;
  c10::NoGradGuard no_grad;
  const FrozenVisit visit(parking_, frozen_parts(false, true), nullptr);
  const at::Tensor z = vae->config().from_model_latents(samples.to(at::kFloat));
  return vae->decode(z.to(vae->parameters().front().scalar_type())).to(at::kFloat);
}

std::int64_t FluxModel::sample_size(std::int64_t resolution) const {
  return vae ? resolution / vae->config().downsample_factor() : resolution;
}

std::int64_t FluxModel::pixel_factor() const { return (vae ? vae->config().downsample_factor() : 1) * 2; }

std::unique_ptr<diffusion::Objective> FluxModel::objective() const {
  return std::make_unique<diffusion::FlowMatching>(schedule, settings_.timestep_sampling, 2);
}

std::unique_ptr<diffusion::Sampler> FluxModel::sampler(std::int64_t steps, at::IntArrayRef sample_shape) const {
  const std::int64_t tokens = (sample_shape[2] / 2) * (sample_shape[3] / 2);
  return std::make_unique<diffusion::FlowMatchEulerSampler>(schedule, steps, tokens);
}

std::vector<std::pair<std::string, at::Tensor>> FluxModel::named_parameters() const {
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (const auto& p : transformer->named_parameters()) out.emplace_back("transformer." + p.key(), p.value());
  if (text_training_ == TextEncoderTraining::full)
    for (const auto& p : clip->named_parameters()) out.emplace_back("text_encoder." + p.key(), p.value());
  return out;
}

std::vector<ParamUnit> FluxModel::denoiser_units() const {
  return prefixed_units(transformer->units(), "transformer.");
}

std::size_t FluxModel::attach_denoiser_lora(const std::vector<std::string>& targets, const LoraOptions& o,
                                            std::uint64_t seed) {
  return attach_lora(*transformer, targets, o, seed).size();
}

ParamUnit FluxModel::denoiser_adapters() { return lora_unit(*transformer, kDenoiserAdapters, "transformer."); }

std::vector<std::pair<std::string, std::shared_ptr<torch::nn::Module>>> FluxModel::text_encoder_modules() const {
  std::vector<std::pair<std::string, std::shared_ptr<torch::nn::Module>>> out;
  if (clip) out.emplace_back("text_encoder", clip.ptr());
  return out;
}

std::vector<std::string> FluxModel::text_components() const {
  std::vector<std::string> out = TrainableModel::text_components();
  if (t5) out.push_back("text_encoder_2@" + std::to_string(settings_.max_sequence_length));
  return out;
}

void FluxModel::set_text_training(TextEncoderTraining t) {
  if (t == TextEncoderTraining::full && t5)
    throw Error(ErrorKind::config, "training.train_text_encoder: full is not offered for Flux.1 (T5-XXL never trains; "
                                   "CLIP-L takes lora)");
  text_training_ = t;
  if (clip)
    for (auto& p : clip->parameters()) p.set_requires_grad(t == TextEncoderTraining::full);
}

std::vector<ModelComponent> FluxModel::components() const {
  using Role = ModelComponent::Role;
  return {{module_of(transformer), Role::denoiser},
          {module_of(clip), Role::text_encoder},
          {module_of(t5), Role::frozen, true},
          {module_of(vae), Role::frozen}};
}

void FluxModel::frozen_to(at::ScalarType compute) {
  if (text_training_ != TextEncoderTraining::full && clip) clip->to(compute);
  if (t5) t5->to(compute);
  if (vae && !vae->config().force_upcast) vae->to(compute);
}

std::vector<torch::nn::Module*> FluxModel::frozen_parts(bool text, bool image) const {
  std::vector<torch::nn::Module*> out;
  if (pipeline_.empty()) return out;
  if (image && vae) out.push_back(vae.ptr().get());
  if (text && !text_encoders_trained()) {
    if (clip) out.push_back(clip.ptr().get());
    if (t5) out.push_back(t5.ptr().get());
  }
  return out;
}

std::int64_t FluxModel::frozen_bytes() const {
  return parameter_bytes(frozen_parts(true, true));
}

void FluxModel::park_frozen(const at::Device& device, const std::vector<std::string>& remember,
                            data::LatentCache* text_cache) {
  if (frozen_parts(true, true).empty()) return;
  parking_.park(
      device, remember, [&](const std::string& caption) { return condition({caption}, device, text_cache); },
      [&] {
        if (device.is_cpu()) return;
        c10::NoGradGuard no_grad;
        for (auto* part : frozen_parts(true, true)) part->to(at::kCPU);
      });
}

}  // namespace zs::models
