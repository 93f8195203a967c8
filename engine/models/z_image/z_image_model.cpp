#include "models/z_image/z_image_model.h"

#include <filesystem>

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "data/latent_cache.h"
#include "io/json_file.h"
#include "models/diffusers_folder.h"
#include "models/frozen_outputs.h"
#include "models/transformer_model_parts.h"
#include "models/weights.h"
#include "models/z_image/z_image_single_file.h"
#include "models/z_image/z_image_text.h"
#include "settings/trainer_config.h"

namespace zs::models {

namespace fs = std::filesystem;

namespace {

/// Z-Image's scheduler: FlowMatchEulerDiscreteScheduler with a static shift of 3 (Z-Image-Turbo's
/// scheduler_config.json; DiffSynth-Studio, musubi-tuner and ai-toolkit train the base with 3 too).
diffusion::FlowScheduleConfig z_image_schedule() {
  diffusion::FlowScheduleConfig s;
  s.shift = 3.0;
  s.use_dynamic_shifting = false;
  return s;
}

}  // namespace

ZImageModel ZImageModel::build_tiny(const std::vector<std::string>& captions, std::uint64_t seed, const UnitBuilt& on_unit) {
  at::manual_seed(seed);
  ZImageModel m;
  m.word_tokenizer = WordTokenizer::build(captions, 12);
  m.tiny_text = tiny_text_encoder(m.word_tokenizer);
  // Pixel space: 3 channels in 2×2 patches (a 32-pixel image is 16 × 16 tokens).
  ZImageConfig c;
  c.in_channels = 3;
  c.dim = 64;
  c.n_layers = 4;
  c.n_refiner_layers = 1;
  c.n_heads = 4;
  c.cap_feat_dim = m.tiny_text->config().hidden_size;
  c.axes_dims = {4, 6, 6};
  c.axes_lens = {1024, 512, 512};
  m.transformer = ZImageTransformer2DModel(c, on_unit);
  m.schedule = z_image_schedule();
  m.text_training_ = TextEncoderTraining::full;
  return m;
}

ZImageModel ZImageModel::build_transformer_only(const ZImageConfig& config, std::uint64_t seed, const UnitBuilt& on_unit) {
  at::manual_seed(seed);
  ZImageModel m;
  m.transformer = ZImageTransformer2DModel(config, on_unit);
  m.schedule = z_image_schedule();
  m.text_training_ = TextEncoderTraining::frozen;
  return m;
}

ZImageModel ZImageModel::load_pipeline(const std::string& dir, const UnitBuilt& on_unit, bool with_transformer,
                                       const Files& files) {
  const DiffusersFolder p = open_pipeline(dir, "Z-Image");
  ZImageModel m;
  m.set_sources(dir, files);
  if (with_transformer && files.transformer.empty()) {
    const WeightFiles r(p.weight_files("transformer"));
    m.transformer = load_units<ZImageTransformer2DModel>(ZImageConfig::from_file(p.dir("transformer") + "/config.json"),
                                                         [&](const std::string& n) { return r.find(n); },
                                                         p.dir("transformer"), on_unit);
  } else if (with_transformer) {
    // ComfyUI's single file: its tensors mapped onto diffusers' names as they are read; checked
    // whole against the folder's transformer/config.json first.
    const ZImageFile file(files.transformer);
    const ZImageConfig c = file.config(dir);
    file.check(c);
    m.transformer = load_units<ZImageTransformer2DModel>(
        c, [&](const std::string& n) { return file.tensor(n, c); }, files.transformer, on_unit);
  }
  // The frozen parts' configs and files now (a missing one is an error at once), their weights on
  // first use (text_model(), vae_model()).
  m.vae_config_ = AutoencoderKLConfig::from_file(p.dir("vae") + "/config.json");
  m.vae_files_ = files.vae.empty() ? p.weight_files("vae") : std::vector<std::string>{m.files_.vae};
  m.text_files_ = files.text_encoder.empty() ? p.weight_files("text_encoder") : std::vector<std::string>{m.files_.text_encoder};
  const QwenTextConfig text = QwenTextConfig::from_file(p.dir("text_encoder") + "/config.json");
  if (text.kind != QwenTextConfig::Kind::qwen3)
    throw Error(ErrorKind::config, p.dir("text_encoder") + "/config.json: a " + text.name() +
                                       " model; Z-Image's text encoder is Qwen3 (model_type \"qwen3\")");
  // Qwen3 loads on first use (text_model()); its files' headers are checked against the config now.
  check_qwen_text_files(text, p.dir("text_encoder") + "/config.json", m.text_files_);
  m.tokenizer = std::make_shared<QwenTokenizer>(QwenTokenizer::load(p.dir("tokenizer")));
  const std::string scheduler = p.dir("scheduler") + "/scheduler_config.json";
  m.schedule = diffusion::FlowScheduleConfig::from_json(io::read_json_file(scheduler, "scheduler config"), scheduler);
  m.text_training_ = TextEncoderTraining::frozen;
  return m;
}

bool ZImageModel::has_saved_base(const std::string& dir) {
  return fs::exists(fs::path(dir) / "transformer" / "diffusion_pytorch_model.safetensors");
}

ZImageModel ZImageModel::load_folder(const std::string& dir, const UnitBuilt& on_unit) {
  if (const PipelineRef ref = pipeline_of(dir); !ref.path.empty()) return load_pipeline(ref.path, on_unit, true, ref.files);
  ZImageModel m;
  load_tiny_text(dir, m.word_tokenizer, m.tiny_text);
  m.transformer = load_units_if_saved<ZImageTransformer2DModel>(ZImageConfig::from_file(dir + "/transformer/config.json"),
                                                                dir + "/transformer/diffusion_pytorch_model.safetensors", on_unit);
  m.schedule = read_folder_schedule(dir);
  return m;
}

ZImageModel::Names ZImageModel::names() const {
  return {"Z-Image", "Z-Image's text encoder (Qwen3-4B)", "z-image-tiny"};
}

nlohmann::json ZImageModel::transformer_config_json() const { return transformer->config().to_json(); }

std::int64_t ZImageModel::default_max_sequence_length() const { return kZImageMaxSequenceLength; }

at::Tensor ZImageModel::prompt_states(QwenTextModelImpl& text, const std::string& caption, const at::Device& device,
                                      bool streamed) {
  return z_image_prompt_states(text, *tokenizer, caption, settings_.max_sequence_length, device, streamed);
}

AutoencoderKLImpl& ZImageModel::vae_model() {
  if (!vae) {
    if (!vae_config_) throw Error(ErrorKind::config, "z-image-tiny has no VAE");
    if (files_.vae.empty()) {
      vae = AutoencoderKL(*vae_config_);
      const WeightFiles r(vae_files_);
      load_vae_weights(*vae, r.view);
    } else {
      vae = load_vae_file(*vae_config_, files_.vae);  // ae.safetensors: LDM or diffusers names
    }
    place_frozen(*vae, /*streams=*/false);
  }
  return *vae;
}

at::Tensor ZImageModel::predict(const at::Tensor& noisy, const at::Tensor& t, const TextConditioning& cond,
                                const at::Tensor& geometry) {
  (void)geometry;
  const at::Tensor context = cond.context.to(noisy.scalar_type());
  const at::Tensor mask = cond.mask.defined() ? cond.mask.to(noisy.device()) : at::Tensor();
  // The pipeline: the scheduler's timestep σ·1000 (float64, then float32), (1000 − it) / 1000 in
  // float32, and the output negated. (The model's time embedding multiplies by 1000 again: an ulp
  // here moves its sinusoid's arguments by ~6e-5.)
  const at::Tensor t1000 = (t.to(at::kDouble) * 1000).to(at::kFloat);
  const at::Tensor model_t = (1000 - t1000) / 1000;
  return -transformer->forward(noisy.contiguous(), context, mask, model_t);
}

at::Tensor ZImageModel::combine_guidance(const at::Tensor& uncond, const at::Tensor& cond, double scale) const {
  // pipeline_z_image.py: pos + g·(pos − neg) on the outputs (the negation commutes with it).
  return cond + scale * (cond - uncond);
}

at::Tensor ZImageModel::to_model_space(const at::Tensor& images, at::Generator& generator, data::LatentCache* cache,
                                       const std::vector<std::string>* keys) {
  if (!vae_config_) return images;
  c10::NoGradGuard no_grad;
  const at::ScalarType dtype = frozen_dtype();
  const DiagonalGaussian posterior = cached_posteriors(
      images, cache, keys,
      [&](const at::Tensor& image) {
        AutoencoderKLImpl& v = vae_model();
        const FrozenVisit visit(parking_, frozen_parts(false, true), nullptr);
        return v.encode(image.to(dtype));
      },
      dtype);
  return vae_config_->to_model_latents(posterior.sample(generator)).to(images.scalar_type());
}

at::Tensor ZImageModel::to_images(const at::Tensor& samples) {
  if (!vae_config_) return samples;
  c10::NoGradGuard no_grad;
  AutoencoderKLImpl& v = vae_model();
  const FrozenVisit visit(parking_, frozen_parts(false, true), nullptr);
  const at::Tensor z = vae_config_->from_model_latents(samples.to(at::kFloat));
  return v.decode(z.to(v.parameters().front().scalar_type())).to(at::kFloat);
}

std::int64_t ZImageModel::sample_size(std::int64_t resolution) const {
  return vae_config_ ? resolution / vae_config_->downsample_factor() : resolution;
}

std::int64_t ZImageModel::pixel_factor() const { return (vae_config_ ? vae_config_->downsample_factor() : 1) * 2; }

std::unique_ptr<diffusion::Objective> ZImageModel::objective() const {
  return std::make_unique<diffusion::FlowMatching>(schedule, settings_.timestep_sampling, 2);
}

std::unique_ptr<diffusion::Sampler> ZImageModel::sampler(std::int64_t steps, at::IntArrayRef sample_shape) const {
  // ZImagePipeline's sigmas: linspace(1, 1/steps, steps), shifted by the scheduler (static shift).
  const std::int64_t tokens = (sample_shape[2] / 2) * (sample_shape[3] / 2);
  return std::make_unique<diffusion::FlowMatchEulerSampler>(schedule, steps, tokens);
}

}  // namespace zs::models
