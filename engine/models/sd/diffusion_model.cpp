#include "models/sd/diffusion_model.h"

#include <algorithm>
#include <filesystem>

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/atomic_file.h"
#include "io/json_file.h"
#include "data/latent_cache.h"
#include "models/frozen_outputs.h"
#include "models/sd/diffusers_pipeline.h"
#include "models/sd/model_source.h"
#include "models/weights.h"
#include "io/safetensors.h"

namespace zs::models {

namespace fs = std::filesystem;

DiffusionModel DiffusionModel::build_tiny(const std::vector<std::string>& captions, const std::string& prediction_type,
                                          std::uint64_t seed, const UnitBuilt& on_unit) {
  at::manual_seed(seed);
  DiffusionModel m;
  // Pixel space, three levels (e.g. 32 -> 16 -> 8 px): plain convolutions at full size, where
  // attention would cost the most and help the least; cross-attention at the two coarse levels
  // and in the middle, where the caption decides colours and shape.
  UNetConfig u;
  u.in_channels = 3;
  u.out_channels = 3;
  u.sample_size = 32;
  u.block_out_channels = {32, 64, 96};
  u.down_block_types = {"DownBlock2D", "CrossAttnDownBlock2D", "CrossAttnDownBlock2D"};
  u.up_block_types = {"CrossAttnUpBlock2D", "CrossAttnUpBlock2D", "UpBlock2D"};
  u.layers_per_block = 1;
  u.cross_attention_dim = 64;
  u.num_attention_heads = {2, 4, 4};
  u.transformer_layers_per_block = {1, 1, 1};
  u.norm_num_groups = 8;
  m.unet = UNet2DConditionModel(u, on_unit);

  m.tokenizer = WordTokenizer::build(captions, 12);
  ClipTextConfig t;
  t.vocab_size = m.tokenizer.vocab_size();
  t.hidden_size = 64;
  t.intermediate_size = 128;
  t.num_attention_heads = 4;
  t.num_hidden_layers = 2;
  t.max_position_embeddings = m.tokenizer.max_length();
  t.eos_token_id = m.tokenizer.eos_id();
  m.text_encoder = ClipTextModel(t);

  // Cosine schedule and trailing timesteps: sampling starts from pure noise, which matters at
  // small pixel sizes where scaled_linear leaves the image visible at t = 999.
  m.schedule.beta_schedule = "squaredcos_cap_v2";
  m.schedule.prediction_type = prediction_type;
  m.schedule.timestep_spacing = "trailing";
  m.schedule.steps_offset = 0;
  m.schedule.set_alpha_to_one = true;
  // With epsilon prediction, t = 999 (ᾱ ≈ 0) makes DDIM's x0 = (x − √(1−ᾱ)·ε)/√ᾱ blow up;
  // clamping x0 (clip_sample) rescues that but measurably hurts v-prediction (the quickstart's
  // colours went from right to muddy), so it is on only for epsilon.
  m.schedule.clip_sample = prediction_type == "epsilon";
  return m;
}

DiffusionModel DiffusionModel::load_pipeline(const std::string& dir, const std::string& prediction_type,
                                             const std::string& config_path, const UnitBuilt& on_unit) {
  const auto source = open_model_source(dir, config_path);
  const ModelSource& p = *source;
  for (const char* part : {"unet", "vae", "text_encoder", "tokenizer", "scheduler"})
    if (!p.has(part))
      throw Error(ErrorKind::config, dir + "/model_index.json: has no " + part +
                                         " (ZeroStudio trains Stable Diffusion 1.x-layout pipelines: unet, vae, "
                                         "text_encoder, tokenizer, scheduler)");
  DiffusionModel m;
  m.unet = p.load_unet(on_unit);
  load_frozen_parts(m, p, !m.unet->config().addition_embed_type.empty(), dir, config_path);
  m.schedule = p.load_scheduler();
  m.schedule.prediction_type = prediction_type;
  return m;
}

DiffusionModel DiffusionModel::load_frozen(const std::string& dir, const std::string& config_path) {
  const auto source = open_model_source(dir, config_path);
  for (const char* part : {"unet", "vae", "text_encoder", "tokenizer"})
    if (!source->has(part))
      throw Error(ErrorKind::config, dir + "/model_index.json: has no " + part);
  DiffusionModel m;
  load_frozen_parts(m, *source, !source->unet_config().addition_embed_type.empty(), dir, config_path);
  return m;
}

void DiffusionModel::load_frozen_parts(DiffusionModel& m, const ModelSource& p, bool sdxl, const std::string& dir,
                                       const std::string& config_path) {
  if (sdxl) {
    // SDXL: a second tokenizer and text encoder (with projection) give the pooled embedding.
    for (const char* part : {"text_encoder_2", "tokenizer_2"})
      if (!p.has(part))
        throw Error(ErrorKind::config, dir + "/model_index.json: has no " + part + ", which an SDXL pipeline needs");
    m.text_encoder_2 = p.load_text_encoder("text_encoder_2");
    if (!m.text_encoder_2->config().with_projection)
      throw Error(ErrorKind::config, dir + "/text_encoder_2/config.json: expected CLIPTextModelWithProjection (SDXL's "
                                           "pooled text embedding comes from its text_projection)");
    m.clip_tokenizer_2 = std::make_shared<ClipTokenizer>(p.load_tokenizer("tokenizer_2"));
    for (auto& param : m.text_encoder_2->parameters()) param.set_requires_grad(false);
  }
  m.vae = p.load_vae();
  m.text_encoder = p.load_text_encoder("text_encoder");
  m.clip_tokenizer = std::make_shared<ClipTokenizer>(p.load_tokenizer("tokenizer"));
  m.text_training = TextEncoderTraining::frozen;
  m.pipeline = fs::absolute(dir).lexically_normal().string();
  if (!config_path.empty()) m.config_path = fs::absolute(config_path).lexically_normal().string();
  for (auto& param : m.vae->parameters()) param.set_requires_grad(false);
  for (auto& param : m.text_encoder->parameters()) param.set_requires_grad(false);
}

PipelineRef DiffusionModel::pipeline_of(const std::string& dir) {
  const std::string source = dir + "/pipeline.json";
  if (!fs::exists(source)) return {};
  const auto j = io::read_json_file(source, "pipeline reference");
  PipelineRef ref{j.value("path", std::string()), j.value("config_path", std::string()),
                  j.value("prediction_type", std::string("epsilon"))};
  if (!fs::exists(fs::path(ref.path) / "model_index.json") && !is_single_file(ref.path))
    throw Error(ErrorKind::checkpoint, source + ": the run was trained from " + ref.path +
                                           ", which is gone; put the pipeline folder back there to resume or export");
  return ref;
}

bool DiffusionModel::is_model_folder(const std::string& dir) {
  return fs::exists(fs::path(dir) / "unet" / "config.json");
}

bool DiffusionModel::has_saved_base(const std::string& dir) {
  return fs::exists(fs::path(dir) / "unet" / "diffusion_pytorch_model.safetensors");
}

void DiffusionModel::save_base(const std::string& dir) const {
  if (!pipeline.empty()) return;
  for (const char* sub : {"unet", "text_encoder"}) fs::create_directories(fs::path(dir) / sub);
  const std::map<std::string, std::string> meta = {{"format", "pt"}, {"producer", "zerostudio"}};
  save_weights(*unet, dir + "/unet/diffusion_pytorch_model.safetensors", "", meta);
  save_weights(*text_encoder, dir + "/text_encoder/model.safetensors", "", meta);
}

bool DiffusionModel::is_preset_folder(const std::string& dir) {
  std::error_code ec;
  return fs::is_regular_file(fs::path(dir) / "tokenizer" / "tokenizer.json", ec) &&
         fs::is_regular_file(fs::path(dir) / "unet" / "config.json", ec) && !fs::exists(fs::path(dir) / "model_index.json", ec);
}

DiffusionModel DiffusionModel::load_folder(const std::string& dir, const UnitBuilt& on_unit) {
  if (const PipelineRef ref = pipeline_of(dir); !ref.path.empty()) {
    // The pipeline's own UNet (same config as the run's unet/config.json); the checkpoint's
    // weights replace its weights when the optimizer loads the shards.
    return load_pipeline(ref.path, ref.prediction_type, ref.config_path, on_unit);
  }
  DiffusionModel m;
  // A preset's base weights, where the run keeps them (train/lora_setup.h: LoRA, frozen encoder),
  // read unit by unit for `on_unit`; otherwise the checkpoint's shards hold every weight.
  m.unet = load_units_if_saved<UNet2DConditionModel>(UNetConfig::from_file(dir + "/unet/config.json"),
                                                     dir + "/unet/diffusion_pytorch_model.safetensors", on_unit);
  m.tokenizer = WordTokenizer::load(dir + "/tokenizer/tokenizer.json");
  ClipTextConfig t = ClipTextConfig::from_file(dir + "/text_encoder/config.json");
  if (t.vocab_size != m.tokenizer.vocab_size())
    throw Error(ErrorKind::checkpoint, dir + ": text_encoder/config.json vocab_size " + std::to_string(t.vocab_size) +
                                           " does not match the tokenizer's " + std::to_string(m.tokenizer.vocab_size()));
  m.text_encoder = ClipTextModel(t);
  m.schedule = diffusion::ScheduleConfig::from_file(dir + "/scheduler/scheduler_config.json");
  const std::string text_file = dir + "/text_encoder/model.safetensors";
  if (fs::exists(text_file)) load_weights(*m.text_encoder, io::SafetensorsReader(text_file));
  return m;
}

void DiffusionModel::save_folder(const std::string& dir) const {
  for (const char* sub : {"unet", "scheduler"}) fs::create_directories(fs::path(dir) / sub);
  io::write_file_atomic(dir + "/unet/config.json", unet->config().to_json().dump(2) + "\n");
  io::write_file_atomic(dir + "/scheduler/scheduler_config.json", schedule.to_json().dump(2) + "\n");
  if (!pipeline.empty()) {
    // The frozen parts stay in the pipeline folder; the run remembers where it is.
    io::write_file_atomic(dir + "/pipeline.json",
                          nlohmann::json{{"path", pipeline}, {"config_path", config_path},
                                         {"prediction_type", schedule.prediction_type}}.dump(2) + "\n");
    return;
  }
  for (const char* sub : {"text_encoder", "tokenizer"}) fs::create_directories(fs::path(dir) / sub);
  io::write_file_atomic(dir + "/text_encoder/config.json", text_encoder->config().to_json().dump(2) + "\n");
  tokenizer.save(dir + "/tokenizer/tokenizer.json");
}

at::Tensor DiffusionModel::encode_text(const std::vector<std::string>& captions, const at::Device& device) {
  return condition(captions, device).context;
}

at::Tensor DiffusionModel::predict(const at::Tensor& noisy, const at::Tensor& t, const TextConditioning& cond,
                                   const at::Tensor& geometry) {
  // SDXL (added text_time embedding): the pooled text embedding and the geometry as time ids.
  const bool added = !unet->config().addition_embed_type.empty();
  return unet->forward(noisy, t, cond.context, cond.pooled, added ? geometry.to(noisy.device()) : at::Tensor());
}

namespace {
at::Tensor frame_batch(const ClipTokenizer& tok, const std::vector<std::string>& captions, const at::Device& device) {
  std::vector<std::int64_t> ids;
  for (const auto& c : captions) {
    const auto framed = tok.frame(c);
    ids.insert(ids.end(), framed.begin(), framed.end());
  }
  return at::tensor(ids, at::kLong).view({static_cast<std::int64_t>(captions.size()), -1}).to(device);
}
}  // namespace

/// Brings parked frozen parts back for one call and sends them away after it.
class FrozenVisit {
 public:
  // Nested visits (several captions, each encoded on its own) bring the part back once.
  FrozenVisit(DiffusionModel& m, bool text, bool image)
      : m_(m), text_(text), image_(image), active_(m.parking_.parked()), depth_(m.visiting_[text ? 0 : 1]) {
    if (!active_ || depth_++ > 0) return;
    m_.bring_back(text_, image_);
    m_.parking_.count_visit();
  }
  ~FrozenVisit() {
    if (active_ && --depth_ == 0) m_.send_away(text_, image_);
  }
  FrozenVisit(const FrozenVisit&) = delete;
  FrozenVisit& operator=(const FrozenVisit&) = delete;

 private:
  DiffusionModel& m_;
  bool text_, image_, active_;
  int& depth_;
};

std::vector<std::pair<std::string, torch::nn::Module*>> DiffusionModel::frozen_parts(bool text, bool image) const {
  std::vector<std::pair<std::string, torch::nn::Module*>> out;
  if (pipeline.empty()) return out;
  if (image && vae) out.emplace_back("vae", vae.ptr().get());
  if (text && !text_encoders_trained()) {
    out.emplace_back("text_encoder", text_encoder.ptr().get());
    if (text_encoder_2) out.emplace_back("text_encoder_2", text_encoder_2.ptr().get());
  }
  return out;
}

std::int64_t DiffusionModel::frozen_bytes() const {
  std::int64_t n = 0;
  for (const auto& [name, m] : frozen_parts(true, true))
    for (const auto& p : m->parameters()) n += p.numel() * static_cast<std::int64_t>(p.element_size());
  return n;
}

void DiffusionModel::send_away(bool text, bool image) {
  c10::NoGradGuard no_grad;
  for (const auto& [name, m] : frozen_parts(text, image)) {
    if (!parking_.device().is_cpu()) {
      m->to(at::kCPU);
      continue;
    }
    for (auto& p : m->parameters()) p.set_data(at::empty({0}, p.options()));
  }
}

void DiffusionModel::bring_back(bool text, bool image) {
  c10::NoGradGuard no_grad;
  std::unique_ptr<ModelSource> source;
  for (const auto& [name, m] : frozen_parts(text, image)) {
    if (!parking_.device().is_cpu()) {
      m->to(parking_.device());
      continue;
    }
    // Released: read again from the model files, in the dtype the parameters had.
    if (!source) source = open_model_source(pipeline, config_path);
    std::shared_ptr<torch::nn::Module> fresh =
        name == "vae" ? std::static_pointer_cast<torch::nn::Module>(source->load_vae().ptr())
                      : std::static_pointer_cast<torch::nn::Module>(source->load_text_encoder(name).ptr());
    auto loaded = fresh->named_parameters(true);
    for (auto& item : m->named_parameters(true)) item.value().set_data(loaded[item.key()].to(item.value().options()));
  }
}

void DiffusionModel::park_frozen(const at::Device& device, const std::vector<std::string>& remember,
                                 data::LatentCache* text_cache) {
  if (frozen_parts(true, true).empty()) return;
  parking_.park(
      device, remember, [&](const std::string& caption) { return condition({caption}, device, text_cache); },
      [&] { send_away(true, true); });
}

TextConditioning DiffusionModel::condition(const std::vector<std::string>& captions, const at::Device& device,
                                           data::LatentCache* cache) {
  if (const auto rows = parking_.recall(captions); !rows.empty()) {
    // Sampling's prompts, encoded before the encoders left.
    std::vector<at::Tensor> context, pool;
    for (const TextConditioning* r : rows) {
      context.push_back(r->context);
      if (r->pooled.defined()) pool.push_back(r->pooled);
    }
    const auto opts = text_encoder->parameters().front().options().device(device);
    return {at::cat(context).to(opts), pool.empty() ? at::Tensor() : at::cat(pool).to(opts)};
  }
  if (cache && clip_tokenizer && !text_encoders_trained() && !captions.empty())
    // Each caption's rows from the cache, or encoded (on its own, as below) and stored.
    return cached_conditioning(captions, *cache, /*pooled=*/static_cast<bool>(text_encoder_2),
                               [&](const std::string& c) { return condition({c}, device); },
                               text_encoder->parameters().front().options().device(device));
  if (!clip_tokenizer) {  // the tiny preset's word tokenizer
    const c10::AutoGradMode grad(c10::GradMode::is_enabled() && text_encoders_trained());
    return {text_encoder->forward(tokenizer.encode_batch(captions).to(device)).last_hidden_state, {}};
  }
  if (text_encoders_trained()) return encode_clip(captions, device);  // the whole batch, with gradients
  c10::NoGradGuard no_grad;  // frozen encoders
  const FrozenVisit visit(*this, true, false);
  if (captions.size() > 1) {
    // One caption at a time: a caption's embedding then never depends on which others share its
    // batch (matrix kernels round differently for other row counts), so the text cache's stored
    // rows equal fresh ones bit for bit, and so do runs with other batch sizes.
    std::vector<at::Tensor> contexts, pooled;
    for (const auto& caption : captions) {
      TextConditioning one = condition({caption}, device);
      contexts.push_back(one.context);
      if (one.pooled.defined()) pooled.push_back(one.pooled);
    }
    return {at::cat(contexts), pooled.empty() ? at::Tensor() : at::cat(pooled)};
  }
  return encode_clip(captions, device);
}

TextConditioning DiffusionModel::encode_clip(const std::vector<std::string>& captions, const at::Device& device) {
  const at::Tensor ids = frame_batch(*clip_tokenizer, captions, device);
  if (!text_encoder_2) return {text_encoder->forward(ids).last_hidden_state, {}};  // SD 1.x: the last hidden state
  // SDXL: both penultimate hidden states side by side, and encoder 2's projected pooled output.
  const ClipTextOutput one = text_encoder->forward(ids);
  const ClipTextOutput two = text_encoder_2->forward(frame_batch(*clip_tokenizer_2, captions, device));
  return {at::cat({one.penultimate_hidden_state, two.penultimate_hidden_state}, -1), two.text_embeds};
}

at::Tensor DiffusionModel::to_model_space(const at::Tensor& images, at::Generator& generator, data::LatentCache* cache,
                                          const std::vector<std::string>* keys) {
  if (!vae) return images;
  c10::NoGradGuard no_grad;
  // Each image is encoded on its own, cached or not: a posterior then never depends on which
  // images share its batch (kernels round differently for other batch sizes), so cached and
  // fresh runs agree bit for bit, whatever the batch size or bucket.
  const DiagonalGaussian posterior = cached_posteriors(
      images, cache, keys,
      [&](const at::Tensor& image) {
        const FrozenVisit visit(*this, false, true);
        return vae->encode(image);
      },
      vae->parameters().front().scalar_type());
  return posterior.sample(generator).mul(vae->config().scaling_factor).to(images.scalar_type());
}

at::Tensor DiffusionModel::to_images(const at::Tensor& samples) {
  if (!vae) return samples;
  c10::NoGradGuard no_grad;
  const FrozenVisit visit(*this, false, true);  // parked: the decoder comes back for this call
  return vae->decode(samples.to(at::kFloat) / vae->config().scaling_factor);
}

std::int64_t DiffusionModel::sample_size(std::int64_t resolution) const {
  return vae ? resolution / vae->config().downsample_factor() : resolution;
}

std::int64_t DiffusionModel::pixel_factor() const {
  return (vae ? vae->config().downsample_factor() : 1) * unet->config().downsample_factor();
}

std::vector<std::pair<std::string, at::Tensor>> DiffusionModel::named_parameters() const {
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (const auto& p : unet->named_parameters()) out.emplace_back("unet." + p.key(), p.value());
  if (text_training == TextEncoderTraining::full)
    for (const auto& [component, encoder] : text_encoders())
      for (const auto& p : encoder->named_parameters()) out.emplace_back(component + "." + p.key(), p.value());
  return out;
}

std::vector<ParamUnit> DiffusionModel::denoiser_units() const {
  std::vector<ParamUnit> units = unet->units();
  for (auto& u : units)
    for (auto& [name, p] : u.parameters) name = "unet." + name;
  return units;
}

std::size_t DiffusionModel::attach_denoiser_lora(const std::vector<std::string>& targets, const LoraOptions& o,
                                                 std::uint64_t seed) {
  return attach_lora(*unet, targets, o, seed).size();
}

ParamUnit DiffusionModel::denoiser_adapters() { return lora_unit(*unet, kDenoiserAdapters, "unet."); }

std::vector<ModelComponent> DiffusionModel::components() const {
  using Role = ModelComponent::Role;
  return {{module_of(unet), Role::denoiser},
          {module_of(text_encoder), Role::text_encoder},
          {module_of(text_encoder_2), Role::text_encoder},
          {module_of(vae), Role::frozen}};
}

std::vector<std::pair<std::string, ClipTextModel>> DiffusionModel::text_encoders() const {
  std::vector<std::pair<std::string, ClipTextModel>> out;
  if (text_encoder) out.emplace_back("text_encoder", text_encoder);
  if (text_encoder_2) out.emplace_back("text_encoder_2", text_encoder_2);
  return out;
}

std::vector<std::pair<std::string, std::shared_ptr<torch::nn::Module>>> DiffusionModel::text_encoder_modules() const {
  std::vector<std::pair<std::string, std::shared_ptr<torch::nn::Module>>> out;
  for (const auto& [component, encoder] : text_encoders()) out.emplace_back(component, encoder.ptr());
  return out;
}

std::unique_ptr<diffusion::Objective> DiffusionModel::objective() const {
  return std::make_unique<diffusion::NoiseSchedule>(schedule);
}

std::unique_ptr<diffusion::Sampler> DiffusionModel::sampler(std::int64_t steps, at::IntArrayRef sample_shape) const {
  (void)sample_shape;  // DDIM's steps do not depend on the image size
  return std::make_unique<diffusion::DdimSampler>(diffusion::NoiseSchedule(schedule), steps);
}

void DiffusionModel::set_text_training(TextEncoderTraining t) {
  text_training = t;
  for (const auto& [component, encoder] : text_encoders())
    for (auto& p : encoder->parameters()) p.set_requires_grad(t == TextEncoderTraining::full);
}

void DiffusionModel::frozen_to(at::ScalarType compute) {
  // Encoders trained in full keep their precision (the optimizer casts them); LoRA's frozen
  // bases compute in the compute dtype like any frozen part.
  if (text_training != TextEncoderTraining::full)
    for (auto& [component, encoder] : text_encoders()) encoder->to(compute);
  if (pipeline.empty()) return;
  if (vae && !vae->config().force_upcast) vae->to(compute);
}

}  // namespace zs::models
