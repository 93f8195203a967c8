#include "models/qwen_image/qwen_image_model.h"

#include <filesystem>

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "data/latent_cache.h"
#include "io/json_file.h"
#include "models/diffusers_blocks.h"
#include "models/diffusers_folder.h"
#include "models/frozen_outputs.h"
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
  const DiffusersFolder p = open_pipeline(dir, "Qwen-Image");
  QwenImageModel m;
  m.set_sources(dir, {});
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

QwenImageModel QwenImageModel::load_folder(const std::string& dir, const UnitBuilt& on_unit) {
  if (const PipelineRef ref = pipeline_of(dir); !ref.path.empty()) return load_pipeline(ref.path, on_unit, true);
  QwenImageModel m;
  load_tiny_text(dir, m.word_tokenizer, m.tiny_text);
  // A preset's base where the run keeps it (LoRA), read unit by unit for `on_unit`; otherwise the
  // checkpoint's shards hold every weight.
  m.transformer = load_units_if_saved<QwenImageTransformer2DModel>(QwenImageConfig::from_file(dir + "/transformer/config.json"),
                                                 dir + "/transformer/diffusion_pytorch_model.safetensors", on_unit);
  m.schedule = read_folder_schedule(dir);
  return m;
}

QwenImageModel::Names QwenImageModel::names() const {
  return {"Qwen-Image", "Qwen-Image's text encoder (Qwen2.5-VL-7B, 7 B parameters)", "qwen-image-tiny"};
}

nlohmann::json QwenImageModel::transformer_config_json() const { return transformer->config().to_json(); }

at::Tensor QwenImageModel::prompt_states(QwenTextModelImpl& text, const std::string& caption, const at::Device& device,
                                         bool streamed) {
  return qwen_image_prompt_states(text, *tokenizer, caption, settings_.max_sequence_length, device, streamed);
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
  const at::ScalarType dtype = frozen_dtype();
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

}  // namespace zs::models
