#include "models/z_image/z_image_model.h"

#include <filesystem>

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "data/latent_cache.h"
#include "io/atomic_file.h"
#include "io/json_file.h"
#include "models/attention_options.h"
#include "models/diffusers_folder.h"
#include "models/frozen_outputs.h"
#include "models/lora.h"
#include "models/quantized_base.h"
#include "models/transformer_lora_file.h"
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
  const DiffusersFolder p = DiffusersFolder::open(dir);
  for (const char* part : {"transformer", "vae", "text_encoder", "tokenizer", "scheduler"})
    if (!p.has(part))
      throw Error(ErrorKind::config, dir + "/model_index.json: has no " + part +
                                         " (a Z-Image pipeline has transformer, vae, text_encoder, tokenizer and scheduler)");
  auto absolute = [](const std::string& f) { return f.empty() ? f : fs::absolute(f).lexically_normal().string(); };
  ZImageModel m;
  m.pipeline_ = fs::absolute(dir).lexically_normal().string();
  m.files_ = {absolute(files.transformer), absolute(files.vae), absolute(files.text_encoder)};
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

ZImageModel::PipelineRef ZImageModel::pipeline_of(const std::string& dir) {
  PipelineRef ref{pipeline_reference(dir), {}};
  if (ref.path.empty()) return ref;
  const std::string file = dir + "/pipeline.json";
  const auto j = io::read_json_file(file, "pipeline reference");
  ref.files = {j.value("transformer_file", std::string()), j.value("vae_file", std::string()),
               j.value("text_encoder_file", std::string())};
  for (const std::string& f : {ref.files.transformer, ref.files.vae, ref.files.text_encoder})
    if (!f.empty() && !fs::exists(f))
      throw Error(ErrorKind::checkpoint, file + ": the run's weights came from " + f +
                                             ", which is gone; put the file back there to resume or export");
  return ref;
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

void ZImageModel::save_folder(const std::string& dir) const {
  save_transformer_folder(dir, transformer->config().to_json(), "ZImageTransformer2DModel", schedule);
  if (!pipeline_.empty()) {
    nlohmann::json ref{{"path", pipeline_}};
    for (const auto& [key, file] : {std::pair<const char*, const std::string*>{"transformer_file", &files_.transformer},
                                    {"vae_file", &files_.vae},
                                    {"text_encoder_file", &files_.text_encoder}})
      if (!file->empty()) ref[key] = *file;
    io::write_file_atomic(dir + "/pipeline.json", ref.dump(2) + "\n");
  }
  else save_tiny_text(dir, word_tokenizer, tiny_text);
}

void ZImageModel::save_base(const std::string& dir) const {
  if (pipeline_.empty()) save_tiny_base(dir, *transformer, *tiny_text);
}

void ZImageModel::configure(const config::TrainerConfig& cfg) {
  Settings s;
  s.timestep_sampling.mode = cfg.training.timestep_sampling;
  s.timestep_sampling.sigmoid_scale = cfg.training.sigmoid_scale;
  s.timestep_sampling.logit_mean = cfg.training.logit_mean;
  s.timestep_sampling.logit_std = cfg.training.logit_std;
  s.max_sequence_length = cfg.model.max_sequence_length.value_or(kZImageMaxSequenceLength);
  s.text_format = quant::base_format_from_string(cfg.model.text_encoder_precision);
  settings_ = s;
}

void ZImageModel::place_frozen(torch::nn::Module& part, bool streams) {
  c10::NoGradGuard no_grad;
  freeze(part);
  part.train(false);
  if (attention_) set_attention_options(part, *attention_);
  if (frozen_dtype_) part.to(*frozen_dtype_);
  // Parked parts wait in CPU memory (a visit brings them); Qwen3 on a GPU streams from there.
  if (!parking_.parked() && !(streams && frozen_home_.is_cuda())) part.to(frozen_home_);
}

QwenTextModelImpl& ZImageModel::text_model() {
  if (!text_encoder) {
    if (pipeline_.empty()) throw Error(ErrorKind::config, "z-image-tiny has no Qwen3 text encoder");
    text_encoder = load_qwen_text_model(DiffusersFolder::open(pipeline_).dir("text_encoder"), text_files_);
    if (settings_.text_format != quant::BaseFormat::bf16) quantize_linears(*text_encoder, settings_.text_format);
    place_frozen(*text_encoder, /*streams=*/true);
  }
  return *text_encoder;
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

TextConditioning ZImageModel::condition(const std::vector<std::string>& captions, const at::Device& device,
                                        data::LatentCache* cache) {
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
  std::vector<at::Tensor> rows;
  if (!tokenizer) {
    for (const auto& caption : captions)
      rows.push_back(tiny_text->forward(word_tokenizer.encode_batch({caption}).to(device)).last_hidden_state[0]);
    return pad_conditioning(rows);
  }
  QwenTextModelImpl& text = text_model();  // loaded before the visit brings it
  const FrozenVisit visit(parking_, frozen_parts(true, false), text_encoder.ptr().get());
  // On a GPU, Qwen3 stays in CPU memory and passes through the device layer by layer. One caption
  // at a time: a caption's rows never depend on its batch.
  const bool stream = device.is_cuda() && text.parameters().front().device().is_cpu();
  for (const auto& caption : captions)
    rows.push_back(z_image_prompt_states(text, *tokenizer, caption, settings_.max_sequence_length, device, stream));
  return pad_conditioning(rows);
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
  const at::ScalarType dtype = frozen_dtype_.value_or(at::kFloat);
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

std::vector<std::pair<std::string, at::Tensor>> ZImageModel::named_parameters() const {
  return transformer_model_parameters(*transformer, tiny_text, text_training_);
}

std::vector<ParamUnit> ZImageModel::denoiser_units() const { return prefixed_units(transformer->units(), "transformer."); }

std::size_t ZImageModel::attach_denoiser_lora(const std::vector<std::string>& targets, const LoraOptions& o,
                                              std::uint64_t seed) {
  return attach_lora(*transformer, targets, o, seed).size();
}

std::size_t ZImageModel::load_lora_file(const std::string& path) {
  return load_transformer_lora_file(*transformer, path, "Z-Image");
}

ParamUnit ZImageModel::denoiser_adapters() { return lora_unit(*transformer, kDenoiserAdapters, "transformer."); }

std::vector<std::pair<std::string, std::shared_ptr<torch::nn::Module>>> ZImageModel::text_encoder_modules() const {
  return tiny_text_modules(tiny_text);
}

std::vector<std::string> ZImageModel::text_components() const {
  std::vector<std::string> out = TrainableModel::text_components();
  if (tokenizer) out.push_back("text_encoder@" + std::to_string(settings_.max_sequence_length));
  return out;
}

void ZImageModel::set_text_training(TextEncoderTraining t) {
  set_tiny_text_training(t, tokenizer != nullptr, "Z-Image's text encoder (Qwen3-4B)", "z-image-tiny", tiny_text);
  text_training_ = t;
}

std::vector<ModelComponent> ZImageModel::components() const {
  using Role = ModelComponent::Role;
  return {{module_of(transformer), Role::denoiser},
          {module_of(tiny_text), Role::text_encoder},
          {module_of(text_encoder), Role::frozen, true},
          {module_of(vae), Role::frozen}};
}

void ZImageModel::set_attention(const AttentionOptions& o) {
  attention_ = std::make_shared<AttentionOptions>(o);  // for the parts loaded on first use
  TrainableModel::set_attention(o);
}

void ZImageModel::to(const at::Device& device, bool with_denoiser) {
  frozen_home_ = device;
  TrainableModel::to(device, with_denoiser);
}

void ZImageModel::frozen_to(at::ScalarType compute) {
  frozen_dtype_ = compute;
  if (text_encoder) text_encoder->to(compute);
  if (vae) vae->to(compute);
}

std::vector<torch::nn::Module*> ZImageModel::frozen_parts(bool text, bool image) const {
  std::vector<torch::nn::Module*> out;
  if (pipeline_.empty()) return out;
  if (image && vae) out.push_back(vae.ptr().get());
  if (text && text_encoder) out.push_back(text_encoder.ptr().get());
  return out;
}

std::int64_t ZImageModel::frozen_bytes() const { return parameter_bytes(frozen_parts(true, true)); }

void ZImageModel::park_frozen(const at::Device& device, const std::vector<std::string>& remember,
                              data::LatentCache* text_cache) {
  if (parking_.parked() || pipeline_.empty()) return;
  parking_.park(
      device, remember,
      [&](const std::string& caption) {
        return TextConditioning{condition({caption}, device, text_cache).context[0], {}, {}};
      },
      [&] {
        if (!device.is_cpu()) {
          c10::NoGradGuard no_grad;
          for (auto* part : frozen_parts(true, true)) part->to(at::kCPU);
        }
        text_encoder = nullptr;  // every caption is cached or remembered: Qwen3 leaves memory
      });
}

}  // namespace zs::models
