// The SD family's shape model (SdFamily::shape): UNet units and parameter counts from the
// configs alone, the frozen parts counted from the weight files' headers.
#include "models/sd/sd_shape.h"

#include "models/model_shape.h"
#include "models/sd/sd_family.h"

#include <algorithm>
#include <filesystem>

#include "core/error.h"
#include "core/meta_tensors.h"
#include "data/shapes.h"
#include "io/safetensors.h"
#include "models/autoencoder_kl.h"
#include "models/lora.h"
#include "models/sd/diffusers_pipeline.h"
#include "models/sd/diffusion_model.h"
#include "models/sd/sd_unit_memory.h"
#include "models/sd/single_file_model.h"
#include "models/sd/unet_2d_condition.h"
#include "settings/trainer_config.h"

namespace zs::models {

using models::ModelShape;
using models::UnitShape;

namespace {

using std::int64_t;

int64_t conv_params(int64_t in, int64_t out, int64_t k) { return in * out * k * k + out; }
int64_t linear_params(int64_t in, int64_t out, bool bias = true) { return in * out + (bias ? out : 0); }

int64_t resnet_params(int64_t in, int64_t out, int64_t temb) {
  int64_t n = 2 * in + conv_params(in, out, 3) + linear_params(temb, out) + 2 * out + conv_params(out, out, 3);
  if (in != out) n += conv_params(in, out, 1);
  return n;
}

int64_t transformer_params(int64_t c, int64_t depth, int64_t cross, bool projects_in, bool projects_out) {
  const int64_t block = 2 * c + 3 * c * c + linear_params(c, c)               // norm1, attn1
                        + 2 * c + c * c + 2 * cross * c + linear_params(c, c)  // norm2, attn2
                        + 2 * c + linear_params(c, 8 * c) + linear_params(4 * c, c);  // norm3, GEGLU ff
  // norm, proj_in and proj_out (a 1x1 conv counts as a linear layer)
  return (projects_in ? 2 * c + linear_params(c, c) : 0) + depth * block + (projects_out ? linear_params(c, c) : 0);
}

}  // namespace

ModelShape unet_shape(const models::UNetConfig& c) {
  ModelShape m;
  const int64_t c0 = c.block_out_channels[0], temb = 4 * c0;
  m.sample_channels = c.in_channels;
  m.out_channels = c.out_channels;
  m.context_dim = c.cross_attention_dim;
  m.time_embed_dim = temb;
  UnitShape io{"io", &io_unit_memory()};
  io.parameters = conv_params(c.in_channels, c0, 3) + linear_params(c0, temb) + linear_params(temb, temb) + 2 * c0 +
                  conv_params(c0, c.out_channels, 3);
  io.largest_module = linear_params(temb, temb);
  if (c.addition_embed_type == "text_time") {
    io.parameters += linear_params(c.projection_class_embeddings_input_dim, temb) + linear_params(temb, temb);
    io.largest_module = std::max(io.largest_module, linear_params(c.projection_class_embeddings_input_dim, temb));
  }
  io.in_channels = c.in_channels;
  io.out_channels = c0;
  m.units.push_back(io);
  using Kind = models::UNetUnitPlan::Kind;
  for (const auto& p : c.unit_plan()) {
    UnitShape u{p.name, &resnet_unit_memory(), 0, 0, p.in_channels, p.out_channels, p.level};
    switch (p.kind) {
      case Kind::resnet:
        u.parameters = resnet_params(p.in_channels, p.out_channels, temb);
        u.largest_module = std::max(conv_params(p.in_channels, p.out_channels, 3), conv_params(p.out_channels, p.out_channels, 3));
        u.concat_input = p.concat_input;
        break;
      case Kind::transformer: {
        const int64_t ch = p.out_channels;
        u.memory = &unet_transformer_unit_memory();
        u.depth = p.block_end - p.block_begin;
        u.heads = c.num_attention_heads[p.attention_config];
        u.projects_in = p.projects_in;
        u.projects_out = p.projects_out;
        u.conv_projection = !c.use_linear_projection;
        u.parameters = transformer_params(ch, u.depth, c.cross_attention_dim, p.projects_in, p.projects_out);
        u.largest_module = std::max({linear_params(ch, 8 * ch), linear_params(4 * ch, ch), c.cross_attention_dim * ch});
        break;
      }
      case Kind::downsampler:
      case Kind::upsampler:
        u.memory = p.kind == Kind::downsampler ? &downsampler_unit_memory() : &upsampler_unit_memory();
        u.parameters = u.largest_module = conv_params(p.out_channels, p.out_channels, 3);
        break;
    }
    m.units.push_back(u);
  }
  return m;
}

int64_t unet_parameter_count(const models::UNetConfig& config) { return unet_shape(config).trainable_parameters(); }


namespace {

/// The architectures model_shape read: the UNet's config and the text encoders' (frozen ones;
/// the tiny preset's modules themselves).
struct Architecture {
  models::UNetConfig unet;
  std::vector<std::pair<std::string, models::ClipTextConfig>> text_encoders;
  std::shared_ptr<models::DiffusionModel> tiny;
  bool count_text_encoders = false;  ///< frozen_parameters lacks them (not counted from weight files)
};

/// CLIP ViT-L/14's text tower (SD 1.x, SDXL's first) and OpenCLIP ViT-bigG/14's (SDXL's second).
models::ClipTextConfig clip_l() {
  models::ClipTextConfig c;  // the struct's defaults are CLIP-L's
  return c;
}
models::ClipTextConfig clip_big_g() {
  models::ClipTextConfig c;
  c.hidden_size = 1280;
  c.intermediate_size = 5120;
  c.num_attention_heads = 20;
  c.num_hidden_layers = 32;
  c.hidden_act = "gelu";
  c.with_projection = true;
  c.projection_dim = 1280;
  return c;
}

ModelShape shape_of(const config::TrainerConfig& cfg, Architecture& arch) {
  // A ready config names the folder a user will fill in; until it exists, model.preset (sd15,
  // sdxl) describes the architecture.
  const bool placeholder = !cfg.model.path.empty() && !std::filesystem::exists(cfg.model.path) && cfg.model.preset != "tiny";
  if (!cfg.model.path.empty() && !placeholder && models::is_single_file(cfg.model.path)) {
    // A single file: the configs from its header (or the companion folder), counts from its shapes.
    const auto file = models::SingleFileModel::open(cfg.model.path, cfg.model.config_path);
    arch.unet = file.info().unet;
    arch.text_encoders.emplace_back("text_encoder", file.info().text_encoder);
    if (file.info().family == "sdxl") arch.text_encoders.emplace_back("text_encoder_2", file.info().text_encoder_2);
    ModelShape m = unet_shape(file.info().unet);
    m.name = cfg.model.path;
    m.latent_factor = static_cast<int>(file.info().vae.downsample_factor());
    const auto counts = file.parameter_counts();
    for (const auto& [part, n] : counts)
      if (part != "unet") m.frozen_parameters += n;
    if (file.info().vae.force_upcast && counts.count("vae")) m.frozen_fp32_parameters = counts.at("vae");
    return m;
  }
  if (!cfg.model.path.empty() && !placeholder) {
    const std::filesystem::path unet = std::filesystem::path(cfg.model.path) / "unet" / "config.json";
    if (!std::filesystem::exists(unet))
      throw Error(ErrorKind::config, "model.path: " + unet.string() +
                                         " not found (the estimate needs a diffusers folder's unet/config.json)");
    arch.unet = models::UNetConfig::from_file(unet.string());
    for (const char* part : {"text_encoder", "text_encoder_2"}) {
      const auto te = std::filesystem::path(cfg.model.path) / part / "config.json";
      if (std::filesystem::exists(te)) arch.text_encoders.emplace_back(part, models::ClipTextConfig::from_file(te.string()));
    }
    ModelShape m = unet_shape(arch.unet);
    m.name = cfg.model.path;
    const auto vae = std::filesystem::path(cfg.model.path) / "vae" / "config.json";
    bool upcast = true;
    if (std::filesystem::exists(vae)) {
      const auto vc = models::AutoencoderKLConfig::from_file(vae.string());
      m.latent_factor = static_cast<int>(vc.downsample_factor());
      upcast = vc.force_upcast;
    }
    // Frozen components: counted from their weight files' headers (nothing is loaded).
    try {
      const auto pipeline = models::DiffusersPipeline::open(cfg.model.path);
      for (const char* part : {"vae", "text_encoder", "text_encoder_2"})
        if (pipeline.has(part))
          for (const auto& file : pipeline.weight_files(part)) {
            const io::SafetensorsReader reader(file);
            for (const auto& e : reader.entries()) {
              m.frozen_parameters += e.numel();
              if (std::string(part) == "vae" && upcast) m.frozen_fp32_parameters += e.numel();
            }
          }
    } catch (const Error&) {
      // A folder without model_index.json (a UNet alone): nothing frozen to count.
    }
    if (models::DiffusionModel::is_preset_folder(cfg.model.path)) {
      // A tiny-preset model folder: pixel space, its text encoder counted below.
      m.latent_factor = 1;
      m.sample_channels = arch.unet.in_channels;
      arch.count_text_encoders = true;
    }
    return m;
  }
  if (cfg.model.preset == "sd15") {
    arch.unet = models::UNetConfig::sd15();
    arch.text_encoders.emplace_back("text_encoder", clip_l());
    ModelShape m = unet_shape(arch.unet);
    m.name = "sd15";
    m.frozen_parameters = 123'060'480 + 83'653'863;  // CLIP ViT-L/14 text encoder, VAE
    m.frozen_fp32_parameters = 83'653'863;            // the VAE (force_upcast, diffusers' default)
    return m;
  }
  if (cfg.model.preset == "sdxl") {
    arch.unet = models::UNetConfig::sdxl();
    arch.text_encoders.emplace_back("text_encoder", clip_l());
    arch.text_encoders.emplace_back("text_encoder_2", clip_big_g());
    ModelShape m = unet_shape(arch.unet);
    m.name = "sdxl";
    m.context_dim = 2048;
    m.frozen_parameters = 123'060'480 + 694'659'840 + 83'653'863;  // CLIP-L, OpenCLIP bigG with projection, VAE
    m.frozen_fp32_parameters = 83'653'863;
    return m;
  }
  // The tiny preset, built for real (it has about a million parameters) with the demo dataset's
  // words, so the text encoder (trained with it) is counted as the trainer builds it.
  arch.tiny = std::make_shared<models::DiffusionModel>(
      models::DiffusionModel::build_tiny(data::all_shape_captions(), "epsilon", 0));
  const auto& tiny = *arch.tiny;
  arch.unet = tiny.unet->config();
  arch.text_encoders.emplace_back("text_encoder", tiny.text_encoder->config());
  arch.count_text_encoders = true;
  ModelShape m = unet_shape(tiny.unet->config());
  m.name = "tiny";
  m.latent_factor = 1;
  m.context_tokens = tiny.text_encoder->config().max_position_embeddings;
  return m;
}

}  // namespace

ModelShape SdFamily::shape(const config::TrainerConfig& cfg) const {
  Architecture arch;
  ModelShape m = shape_of(cfg, arch);
  // The text encoders a pipeline has, and the adapters the config's lora section would put on
  // them and on the UNet: counted on the modules built as shapes only.
  m.denoiser_adapters_name = DiffusionModel::kDenoiserAdapters;
  const TrainedParts trained = resolve_trained_parts(cfg);
  const bool lora_unet = trained.lora, lora_text = trained.text == TextEncoderTraining::lora;
  const std::vector<std::string> text_targets = text_encoder_lora_targets(cfg);
  for (const auto& [name, c] : arch.text_encoders) {
    const UnitShape unit = models::clip_text_encoder_shape(name, c, lora_text ? &text_targets : nullptr, cfg.lora.rank);
    if (arch.count_text_encoders) m.frozen_parameters += unit.parameters;  // a pipeline's are counted from its files above
    m.lora_text_parameters += unit.lora_parameters;
    m.text_encoders.push_back(unit);
  }
  if (lora_unet) {
    if (arch.tiny) {
      m.lora_denoiser_parameters = models::lora_parameter_count(*arch.tiny->unet, lora_targets(cfg), cfg.lora.rank);
    } else {
      const MetaTensorScope meta;
      models::UNet2DConditionModel unet(arch.unet);
      m.lora_denoiser_parameters = models::lora_parameter_count(*unet, lora_targets(cfg), cfg.lora.rank);
    }
  }
  return m;
}

}  // namespace zs::models
