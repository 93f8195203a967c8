#include "models/flux2/flux2_model.h"

#include <filesystem>

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "data/latent_cache.h"
#include "io/json_file.h"
#include "models/diffusers_folder.h"
#include "models/flux2/flux2_single_file.h"
#include "models/flux2/flux2_text.h"
#include "models/frozen_outputs.h"
#include "models/transformer_model_parts.h"
#include "models/weights.h"
#include "settings/trainer_config.h"

namespace zs::models {

namespace fs = std::filesystem;

diffusion::FlowScheduleConfig flux2_schedule() {
  diffusion::FlowScheduleConfig s;
  s.shift = 3.0;
  s.use_dynamic_shifting = true;
  s.base_shift = 0.5;
  s.max_shift = 1.15;
  s.base_image_seq_len = 256;
  s.max_image_seq_len = 4096;
  s.time_shift_type = "exponential";
  s.empirical_mu = true;
  return s;
}

Flux2Model Flux2Model::build_tiny(const std::vector<std::string>& captions, std::uint64_t seed, const UnitBuilt& on_unit) {
  at::manual_seed(seed);
  Flux2Model m;
  m.word_tokenizer = WordTokenizer::build(captions, 12);
  m.tiny_text = tiny_text_encoder(m.word_tokenizer);
  // klein's shape, small: double-stream blocks then single-stream ones, no guidance embedding; in
  // pixel space, 3 channels 2×2-patchified (a 32-pixel image is 16 × 16 tokens of 12 values).
  Flux2Config c;
  c.in_channels = 12;
  c.out_channels = 12;
  c.num_layers = 2;
  c.num_single_layers = 4;
  c.attention_head_dim = 16;
  c.num_attention_heads = 4;
  c.joint_attention_dim = m.tiny_text->config().hidden_size;
  c.timestep_guidance_channels = 64;
  c.axes_dims_rope = {4, 4, 4, 4};
  c.guidance_embeds = false;
  m.transformer = Flux2Transformer2DModel(c, on_unit);
  m.schedule = flux2_schedule();
  m.text_training_ = TextEncoderTraining::full;
  return m;
}

Flux2Model Flux2Model::build_transformer_only(const Flux2Config& config, std::uint64_t seed, const UnitBuilt& on_unit) {
  at::manual_seed(seed);
  Flux2Model m;
  m.transformer = Flux2Transformer2DModel(config, on_unit);
  m.schedule = flux2_schedule();
  m.text_training_ = TextEncoderTraining::frozen;
  return m;
}

Flux2Model Flux2Model::load_pipeline(const std::string& dir, const UnitBuilt& on_unit, bool with_transformer,
                                     const Files& files) {
  const DiffusersFolder p = open_pipeline(dir, "FLUX.2");
  Flux2Model m;
  m.set_sources(dir, files);
  const std::string index = dir + "/model_index.json";
  m.distilled_ = io::read_json_file(index, "pipeline index").value("is_distilled", false);
  // The VAE first: Flux.1's AutoencoderKL in a FLUX.2 folder is the likeliest mix-up.
  const std::string vae_config = p.dir("vae") + "/config.json";
  m.vae_config_ = AutoencoderKLConfig::from_file(vae_config);
  if (!m.vae_config_->flux2())
    throw Error(ErrorKind::config, vae_config + ": a " + std::to_string(m.vae_config_->latent_channels) +
                                       "-channel AutoencoderKL (Flux.1's, SD's); FLUX.2 needs AutoencoderKLFlux2 "
                                       "(32 latent channels with BatchNorm statistics): use the FLUX.2 release's vae/");
  m.vae_files_ = files.vae.empty() ? p.weight_files("vae") : std::vector<std::string>{m.files_.vae};
  {
    const WeightFiles r(m.vae_files_);
    m.bn_mean_ = r.find("bn.running_mean");
    m.bn_var_ = r.find("bn.running_var");
    if (!m.bn_mean_.defined() || !m.bn_var_.defined())
      throw Error(ErrorKind::checkpoint, m.vae_files_.front() + ": has no bn.running_mean / bn.running_var (FLUX.2's "
                                                                "latent statistics); is it Flux.1's VAE?");
    m.bn_mean_ = m.bn_mean_.to(at::kFloat);
    m.bn_var_ = m.bn_var_.to(at::kFloat);
  }
  if (with_transformer) {
    auto check_channels = [&](const Flux2Config& c, const std::string& where) {
      if (c.in_channels != 4 * m.vae_config_->latent_channels)
        throw Error(ErrorKind::config, where + ": in_channels " + std::to_string(c.in_channels) + " is not 4 × the VAE's " +
                                           std::to_string(m.vae_config_->latent_channels) + " latent channels (" + vae_config + ")");
    };
    if (files.transformer.empty()) {
      const WeightFiles r(p.weight_files("transformer"));
      const Flux2Config c = Flux2Config::from_file(p.dir("transformer") + "/config.json");
      check_channels(c, p.dir("transformer") + "/config.json");
      m.transformer = load_units<Flux2Transformer2DModel>(c, [&](const std::string& n) { return r.find(n); },
                                                          p.dir("transformer"), on_unit);
    } else {
      // BFL's single file: its tensors mapped onto diffusers' names as they are read; checked whole
      // against the folder's transformer/config.json first.
      const Flux2File file(files.transformer);
      const Flux2Config c = file.config(dir);
      file.check(c);
      check_channels(c, files.transformer);
      m.transformer = load_units<Flux2Transformer2DModel>(c, [&](const std::string& n) { return file.tensor(n, c); },
                                                          files.transformer, on_unit);
    }
  }
  m.text_files_ = files.text_encoder.empty() ? p.weight_files("text_encoder") : std::vector<std::string>{m.files_.text_encoder};
  const std::string text_config = p.dir("text_encoder") + "/config.json";
  const QwenTextConfig text = QwenTextConfig::from_file(text_config);
  if (text.kind == QwenTextConfig::Kind::qwen2_5_vl)
    throw Error(ErrorKind::config, text_config + ": a Qwen2.5-VL model; FLUX.2's text encoder is Qwen3 ([klein]) or "
                                                 "Mistral-Small-3.1 ([dev])");
  m.mistral_ = text.kind == QwenTextConfig::Kind::mistral;
  check_qwen_text_files(text, text_config, m.text_files_);
  // [dev]'s tokenizer is Mistral's tekken, which QwenTokenizer does not read: its prompts are
  // refused (prompt_states) until it lands; a run whose cache holds every caption needs none.
  if (!m.mistral_) m.tokenizer = std::make_shared<QwenTokenizer>(QwenTokenizer::load(p.dir("tokenizer")));
  const std::string scheduler = p.dir("scheduler") + "/scheduler_config.json";
  m.schedule = diffusion::FlowScheduleConfig::from_json(io::read_json_file(scheduler, "scheduler config"), scheduler);
  m.schedule.empirical_mu = true;  // both pipelines: compute_empirical_mu
  m.text_training_ = TextEncoderTraining::frozen;
  return m;
}

bool Flux2Model::has_saved_base(const std::string& dir) {
  return fs::exists(fs::path(dir) / "transformer" / "diffusion_pytorch_model.safetensors");
}

Flux2Model Flux2Model::load_folder(const std::string& dir, const UnitBuilt& on_unit) {
  if (const PipelineRef ref = pipeline_of(dir); !ref.path.empty()) return load_pipeline(ref.path, on_unit, true, ref.files);
  Flux2Model m;
  load_tiny_text(dir, m.word_tokenizer, m.tiny_text);
  m.transformer = load_units_if_saved<Flux2Transformer2DModel>(Flux2Config::from_file(dir + "/transformer/config.json"),
                                                               dir + "/transformer/diffusion_pytorch_model.safetensors", on_unit);
  m.schedule = read_folder_schedule(dir);
  m.schedule.empirical_mu = true;
  return m;
}

void Flux2Model::configure(const config::TrainerConfig& cfg) {
  TransformerPipelineModel::configure(cfg);
  training_guidance_ = cfg.training.guidance;
}

Flux2Model::Names Flux2Model::names() const {
  return {"FLUX.2", "FLUX.2's text encoder (Qwen3 for klein, Mistral-Small-3.1 for dev)", "flux2-tiny"};
}

nlohmann::json Flux2Model::transformer_config_json() const { return transformer->config().to_json(); }

at::Tensor Flux2Model::prompt_states(QwenTextModelImpl& text, const std::string& caption, const at::Device& device,
                                     bool streamed) {
  if (mistral_ || !tokenizer)
    throw Error(ErrorKind::config, pipeline_ + "/tokenizer: FLUX.2 [dev]'s Mistral tokenizer (tekken) is not read yet, so "
                                               "[dev] captions cannot be encoded here; fill the text cache with "
                                               "`zerostudio cache` from states encoded elsewhere, or train klein");
  return flux2_klein_prompt_states(text, *tokenizer, caption, settings_.max_sequence_length, device, streamed);
}

AutoencoderKLImpl& Flux2Model::vae_model() {
  if (!vae) {
    if (!vae_config_) throw Error(ErrorKind::config, "flux2-tiny has no VAE");
    vae = AutoencoderKL(*vae_config_);
    const WeightFiles r(vae_files_);
    load_vae_weights(*vae, r.view);
    place_frozen(*vae, /*streams=*/false);
  }
  return *vae;
}

at::Tensor Flux2Model::predict(const at::Tensor& noisy, const at::Tensor& t, const TextConditioning& cond,
                               const at::Tensor& geometry) {
  (void)geometry;
  const std::int64_t b = noisy.size(0), c = noisy.size(1), h = noisy.size(2), w = noisy.size(3);
  // _pack_latents: [B, C, h, w] → [B, h·w, C]; the ids of the grid and of the text rows.
  const at::Tensor tokens = noisy.reshape({b, c, h * w}).permute({0, 2, 1}).contiguous();
  const auto opts = tokens.options();
  const at::Tensor context = cond.context.to(opts.dtype());
  const at::Tensor img_ids = flux2_image_ids(h, w, opts);
  const at::Tensor txt_ids = flux2_text_ids(context.size(1), opts);
  // The pipelines: the scheduler's timestep σ·1000 in float32, passed as timestep / 1000.
  const at::Tensor model_t = (t.to(at::kDouble) * 1000).to(at::kFloat) / 1000;
  at::Tensor guidance;
  if (embeds_guidance())
    guidance = at::full({b}, sampling_guidance_ >= 0 ? sampling_guidance_ : training_guidance_, opts.dtype(at::kFloat));
  const at::Tensor out = transformer->forward(tokens, context, model_t, img_ids, txt_ids, guidance);
  return out.permute({0, 2, 1}).reshape({b, c, h, w});
}

bool Flux2Model::guides(double scale) const {
  // Flux2KleinPipeline.do_classifier_free_guidance: g > 1 and not is_distilled; [dev] embeds it.
  return !embeds_guidance() && !distilled_ && scale > 1.0;
}

at::Tensor Flux2Model::to_model_space(const at::Tensor& images, at::Generator& generator, data::LatentCache* cache,
                                      const std::vector<std::string>* keys) {
  if (!vae_config_) return patchify_2x2(images);
  c10::NoGradGuard no_grad;
  const DiagonalGaussian posterior = cached_posteriors(
      images, cache, keys,
      [&](const at::Tensor& image) {
        AutoencoderKLImpl& v = vae_model();
        const FrozenVisit visit(parking_, frozen_parts(false, true), nullptr);
        return v.encode(image.to(frozen_dtype()));
      },
      frozen_dtype());
  const at::Tensor z = posterior.sample(generator).to(at::kFloat);
  return flux2_normalize_patched(z, bn_mean_, bn_var_, *vae_config_->batch_norm_eps).to(images.scalar_type());
}

at::Tensor Flux2Model::to_images(const at::Tensor& samples) {
  if (!vae_config_) return unpatchify_2x2(samples);
  c10::NoGradGuard no_grad;
  AutoencoderKLImpl& v = vae_model();
  const FrozenVisit visit(parking_, frozen_parts(false, true), nullptr);
  const at::Tensor z = flux2_denormalize_patched(samples.to(at::kFloat), bn_mean_, bn_var_, *vae_config_->batch_norm_eps);
  return v.decode(z.to(v.parameters().front().scalar_type())).to(at::kFloat);
}

std::int64_t Flux2Model::sample_size(std::int64_t resolution) const { return resolution / pixel_factor(); }

std::int64_t Flux2Model::pixel_factor() const { return (vae_config_ ? vae_config_->downsample_factor() : 1) * 2; }

std::unique_ptr<diffusion::Objective> Flux2Model::objective() const {
  // The model space is already one token per position (the 2×2 patches are channels).
  return std::make_unique<diffusion::FlowMatching>(schedule, settings_.timestep_sampling, 1);
}

std::unique_ptr<diffusion::Sampler> Flux2Model::sampler(std::int64_t steps, at::IntArrayRef sample_shape) const {
  // The pipelines' sigmas: linspace(1, 1/steps, steps) shifted at compute_empirical_mu(tokens, steps).
  return std::make_unique<diffusion::FlowMatchEulerSampler>(schedule, steps, sample_shape[2] * sample_shape[3]);
}

}  // namespace zs::models
