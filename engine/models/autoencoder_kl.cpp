#include "models/autoencoder_kl.h"

#include <cmath>
#include <map>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>

#include "core/error.h"
#include "models/attention.h"
#include "io/json_file.h"
#include "io/safetensors.h"
#include "models/vae_single_file_names.h"
#include "models/weights.h"

namespace zs::models {

// Named one by one: a unity batch (CMakeLists.txt, zs_unity) puts later files in this scope too.
using torch::nn::Conv2d;
using torch::nn::Conv2dOptions;
using torch::nn::GroupNorm;
using torch::nn::GroupNormOptions;
using torch::nn::Linear;
using torch::nn::Module;
using torch::nn::ModuleList;
using std::int64_t;

namespace {

Conv2d conv(int64_t in, int64_t out, int64_t k, int64_t stride = 1, int64_t padding = -1) {
  return Conv2d(Conv2dOptions(in, out, k).stride(stride).padding(padding < 0 ? k / 2 : padding));
}
GroupNorm norm(int64_t groups, int64_t channels) { return GroupNorm(GroupNormOptions(groups, channels).eps(1e-6)); }

// ---- ResnetBlock2D without a time embedding: norm1, conv1, norm2, conv2, conv_shortcut ----
struct VaeResnetImpl : Module {
  VaeResnetImpl(int64_t in, int64_t out, int64_t groups)
      : norm1(register_module("norm1", norm(groups, in))),
        conv1(register_module("conv1", conv(in, out, 3))),
        norm2(register_module("norm2", norm(groups, out))),
        conv2(register_module("conv2", conv(out, out, 3))) {
    if (in != out) conv_shortcut = register_module("conv_shortcut", conv(in, out, 1));
  }
  at::Tensor forward(const at::Tensor& x) {  // [B, in, H, W] -> [B, out, H, W]
    const at::Tensor h = conv2(at::silu(norm2(conv1(at::silu(norm1(x))))));
    return (conv_shortcut ? conv_shortcut(x) : x) + h;
  }
  GroupNorm norm1;
  Conv2d conv1;
  GroupNorm norm2;
  Conv2d conv2;
  Conv2d conv_shortcut{nullptr};
};
TORCH_MODULE(VaeResnet);

// ---- the mid-block attention: one head over all pixels, residual ----
struct VaeAttentionImpl : Module, AttentionSite {
  VaeAttentionImpl(int64_t channels, int64_t groups)
      : group_norm(register_module("group_norm", norm(groups, channels))),
        to_q(register_module("to_q", Linear(channels, channels))),
        to_k(register_module("to_k", Linear(channels, channels))),
        to_v(register_module("to_v", Linear(channels, channels))),
        to_out_0(Linear(channels, channels)) {
    auto list = ModuleList();
    list->push_back(to_out_0);
    register_module("to_out", list);
  }
  at::Tensor forward(const at::Tensor& x) {  // [B, C, H, W]
    const auto b = x.size(0), c = x.size(1), h = x.size(2), w = x.size(3);
    const at::Tensor t = group_norm(x).reshape({b, c, h * w}).transpose(1, 2);  // [B, HW, C]
    const at::Tensor out = to_out_0(multi_head_attention(to_q(t), to_k(t), to_v(t), 1, {}, attention));  // one head: [B, HW, C]
    return out.transpose(1, 2).reshape({b, c, h, w}) + x;
  }
  GroupNorm group_norm;
  Linear to_q, to_k, to_v, to_out_0;
};
TORCH_MODULE(VaeAttention);

struct VaeMidImpl : Module {
  VaeMidImpl(int64_t channels, int64_t groups, bool attention) {
    auto resnets = ModuleList();
    r0 = VaeResnet(channels, channels, groups);
    r1 = VaeResnet(channels, channels, groups);
    resnets->push_back(r0);
    resnets->push_back(r1);
    register_module("resnets", resnets);
    if (attention) {
      attn = VaeAttention(channels, groups);
      auto list = ModuleList();
      list->push_back(attn);
      register_module("attentions", list);
    }
  }
  at::Tensor forward(const at::Tensor& x) {
    at::Tensor h = r0(x);
    if (attn) h = attn(h);
    return r1(h);
  }
  VaeResnet r0{nullptr}, r1{nullptr};
  VaeAttention attn{nullptr};
};
TORCH_MODULE(VaeMid);

/// One encoder or decoder block: resnets, then an optional down- (stride 2, padded right and
/// bottom) or up-sampler (nearest ×2, then a conv).
struct VaeBlockImpl : Module {
  VaeBlockImpl(int64_t in, int64_t out, int64_t layers, int64_t groups, int sampler /* 0 none, -1 down, 1 up */)
      : sampler_kind(sampler) {
    auto list = ModuleList();
    for (int64_t j = 0; j < layers; ++j) {
      resnets.push_back(VaeResnet(j == 0 ? in : out, out, groups));
      list->push_back(resnets.back());
    }
    register_module("resnets", list);
    if (sampler != 0) {
      sampler_conv = sampler < 0 ? conv(out, out, 3, 2, 0) : conv(out, out, 3);
      auto samplers = ModuleList();
      // diffusers keeps the conv inside Downsample2D/Upsample2D as `conv`.
      struct Holder : Module {};
      auto holder = std::make_shared<Holder>();
      holder->register_module("conv", sampler_conv);
      samplers->push_back(holder);
      register_module(sampler < 0 ? "downsamplers" : "upsamplers", samplers);
    }
  }
  at::Tensor forward(at::Tensor x) {
    for (auto& r : resnets) x = r(x);
    if (sampler_kind < 0) x = sampler_conv(at::constant_pad_nd(x, {0, 1, 0, 1}));
    if (sampler_kind > 0) x = sampler_conv(at::upsample_nearest2d(x, {x.size(2) * 2, x.size(3) * 2}));
    return x;
  }
  int sampler_kind;
  std::vector<VaeResnet> resnets;
  Conv2d sampler_conv{nullptr};
};
TORCH_MODULE(VaeBlock);

struct CoderImpl : Module {};  // "encoder" / "decoder" name scopes
TORCH_MODULE(Coder);

}  // namespace

struct VaeParts {
  Conv2d enc_conv_in{nullptr}, enc_conv_out{nullptr}, dec_conv_in{nullptr}, dec_conv_out{nullptr};
  std::vector<VaeBlock> enc_blocks, dec_blocks;
  VaeMid enc_mid{nullptr}, dec_mid{nullptr};
  GroupNorm enc_norm_out{nullptr}, dec_norm_out{nullptr};
  Conv2d quant_conv{nullptr}, post_quant_conv{nullptr};
};

AutoencoderKLConfig AutoencoderKLConfig::from_json(const nlohmann::json& j, const std::string& source) {
  if (!j.is_object()) throw Error(ErrorKind::config, source + ": expected a JSON object (diffusers vae/config.json)");
  AutoencoderKLConfig c;
  const bool flux2 = j.contains("_class_name") && j["_class_name"] == "AutoencoderKLFlux2";
  if (flux2) {  // AutoencoderKLFlux2's defaults (diffusers' autoencoder_kl_flux2.py)
    c.latent_channels = 32;
    c.sample_size = 1024;
    c.scaling_factor = 1.0;
    c.batch_norm_eps = 1e-4;
  }
  auto get = [&](const char* key, int64_t& v) {
    if (!j.contains(key) || j[key].is_null()) return;
    if (!j[key].is_number_integer()) throw Error(ErrorKind::config, source + ": " + key + ": expected an integer");
    v = j[key].get<int64_t>();
  };
  get("in_channels", c.in_channels);
  get("out_channels", c.out_channels);
  get("latent_channels", c.latent_channels);
  get("layers_per_block", c.layers_per_block);
  get("norm_num_groups", c.norm_num_groups);
  if (j.contains("sample_size") && j["sample_size"].is_number_integer()) c.sample_size = j["sample_size"].get<int64_t>();
  if (j.contains("block_out_channels")) c.block_out_channels = j["block_out_channels"].get<std::vector<int64_t>>();
  if (j.contains("scaling_factor") && j["scaling_factor"].is_number()) c.scaling_factor = j["scaling_factor"].get<double>();
  if (j.contains("force_upcast") && j["force_upcast"].is_boolean()) c.force_upcast = j["force_upcast"].get<bool>();
  if (j.contains("mid_block_add_attention") && j["mid_block_add_attention"].is_boolean())
    c.mid_block_add_attention = j["mid_block_add_attention"].get<bool>();
  for (const auto& [key, flag] : {std::pair<const char*, bool*>{"use_quant_conv", &c.use_quant_conv},
                                  {"use_post_quant_conv", &c.use_post_quant_conv}}) {
    if (!j.contains(key) || j[key].is_null()) continue;
    if (!j[key].is_boolean()) throw Error(ErrorKind::config, source + ": " + key + ": expected true or false");
    *flag = j[key].get<bool>();
  }
  if (j.contains("shift_factor") && !j["shift_factor"].is_null()) {
    if (!j["shift_factor"].is_number()) throw Error(ErrorKind::config, source + ": shift_factor: expected a number");
    c.shift_factor = j["shift_factor"].get<double>();
  }
  if (j.contains("act_fn") && j["act_fn"] != "silu") throw Error(ErrorKind::config, source + ": act_fn: only \"silu\" is supported");
  for (const char* key : {"down_block_types", "up_block_types"}) {
    if (!j.contains(key)) continue;
    const std::string want = std::string(key) == "down_block_types" ? "DownEncoderBlock2D" : "UpDecoderBlock2D";
    const auto list = j[key];
    if (!list.is_array() || list.size() != c.block_out_channels.size())
      throw Error(ErrorKind::config, source + ": " + key + ": needs one entry per block_out_channels entry");
    for (const auto& t : list)
      if (t != want) throw Error(ErrorKind::config, source + ": " + key + ": only " + want + " is supported, got " + t.dump());
  }
  if (flux2) {
    if (j.contains("batch_norm_eps") && !j["batch_norm_eps"].is_null()) {
      if (!j["batch_norm_eps"].is_number() || !(j["batch_norm_eps"].get<double>() > 0))
        throw Error(ErrorKind::config, source + ": batch_norm_eps: expected a positive number");
      c.batch_norm_eps = j["batch_norm_eps"].get<double>();
    }
    if (j.contains("patch_size") && !j["patch_size"].is_null() && j["patch_size"] != nlohmann::json{2, 2})
      throw Error(ErrorKind::config, source + ": patch_size: only [2, 2] is supported (FLUX.2's), got " + j["patch_size"].dump());
    if (j.contains("decoder_block_out_channels") && !j["decoder_block_out_channels"].is_null() &&
        j["decoder_block_out_channels"] != j.value("block_out_channels", nlohmann::json(c.block_out_channels)))
      throw Error(ErrorKind::config, source + ": decoder_block_out_channels: a decoder narrower than the encoder "
                                              "(FLUX.2-small-decoder) is not supported yet; use the full VAE");
  }
  if (c.block_out_channels.empty()) throw Error(ErrorKind::config, source + ": block_out_channels: must not be empty");
  for (int64_t ch : c.block_out_channels)
    if (ch % c.norm_num_groups != 0)
      throw Error(ErrorKind::config, source + ": block_out_channels: " + std::to_string(ch) +
                                         " is not divisible by norm_num_groups " + std::to_string(c.norm_num_groups));
  return c;
}

AutoencoderKLConfig AutoencoderKLConfig::from_file(const std::string& path) {
  return from_json(io::read_json_file(path, "VAE config"), path);
}

AutoencoderKLConfig AutoencoderKLConfig::flux1() {
  AutoencoderKLConfig c;
  c.latent_channels = 16;
  c.scaling_factor = 0.3611;
  c.shift_factor = 0.1159;
  c.use_quant_conv = false;
  c.use_post_quant_conv = false;
  c.sample_size = 1024;
  return c;
}

nlohmann::json AutoencoderKLConfig::to_json() const {
  nlohmann::json j = {{"_class_name", "AutoencoderKL"},
                      {"act_fn", "silu"},
                      {"in_channels", in_channels},
                      {"out_channels", out_channels},
                      {"latent_channels", latent_channels},
                      {"block_out_channels", block_out_channels},
                      {"down_block_types", std::vector<std::string>(block_out_channels.size(), "DownEncoderBlock2D")},
                      {"up_block_types", std::vector<std::string>(block_out_channels.size(), "UpDecoderBlock2D")},
                      {"layers_per_block", layers_per_block},
                      {"norm_num_groups", norm_num_groups},
                      {"sample_size", sample_size},
                      {"scaling_factor", scaling_factor},
                      {"force_upcast", force_upcast},
                      {"mid_block_add_attention", mid_block_add_attention},
                      {"use_quant_conv", use_quant_conv},
                      {"use_post_quant_conv", use_post_quant_conv},
                      {"shift_factor", shift_factor ? nlohmann::json(*shift_factor) : nlohmann::json(nullptr)}};
  if (flux2()) {
    j["_class_name"] = "AutoencoderKLFlux2";
    j["batch_norm_eps"] = *batch_norm_eps;
    j["patch_size"] = {2, 2};
    j.erase("scaling_factor");
    j.erase("shift_factor");
  }
  return j;
}

at::Tensor AutoencoderKLConfig::to_model_latents(const at::Tensor& z) const {
  return shift_factor ? (z - *shift_factor) * scaling_factor : z * scaling_factor;
}

at::Tensor AutoencoderKLConfig::from_model_latents(const at::Tensor& latents) const {
  return shift_factor ? latents / scaling_factor + *shift_factor : latents / scaling_factor;
}

int64_t AutoencoderKLConfig::downsample_factor() const { return int64_t{1} << (block_out_channels.size() - 1); }

at::Tensor DiagonalGaussian::sample(c10::optional<at::Generator> generator) const {
  // Drawn on the CPU (the generators are CPU ones), then moved next to the mean.
  const at::Tensor eps = at::randn(mean.sizes(), generator, mean.options().device(at::kCPU).dtype(at::kFloat));
  return mean + at::exp(0.5 * logvar) * eps.to(mean.options());
}

AutoencoderKLImpl::AutoencoderKLImpl(AutoencoderKLConfig config)
    : config_(std::move(config)), parts_(std::make_unique<VaeParts>()) {
  const auto& c = config_;
  auto& p = *parts_;
  const auto& ch = c.block_out_channels;
  const int64_t groups = c.norm_num_groups, n = static_cast<int64_t>(ch.size());
  Coder encoder, decoder;
  p.enc_conv_in = encoder->register_module("conv_in", conv(c.in_channels, ch[0], 3));
  auto down = ModuleList();
  int64_t out = ch[0];
  for (int64_t i = 0; i < n; ++i) {
    const int64_t in = out;
    out = ch[static_cast<std::size_t>(i)];
    p.enc_blocks.push_back(VaeBlock(in, out, c.layers_per_block, groups, i + 1 < n ? -1 : 0));
    down->push_back(p.enc_blocks.back());
  }
  encoder->register_module("down_blocks", down);
  p.enc_mid = encoder->register_module("mid_block", VaeMid(ch.back(), groups, c.mid_block_add_attention));
  p.enc_norm_out = encoder->register_module("conv_norm_out", norm(groups, ch.back()));
  p.enc_conv_out = encoder->register_module("conv_out", conv(ch.back(), 2 * c.latent_channels, 3));
  register_module("encoder", encoder);

  p.dec_conv_in = decoder->register_module("conv_in", conv(c.latent_channels, ch.back(), 3));
  p.dec_mid = decoder->register_module("mid_block", VaeMid(ch.back(), groups, c.mid_block_add_attention));
  auto up = ModuleList();
  out = ch.back();
  for (int64_t i = 0; i < n; ++i) {
    const int64_t in = out;
    out = ch[static_cast<std::size_t>(n - 1 - i)];
    p.dec_blocks.push_back(VaeBlock(in, out, c.layers_per_block + 1, groups, i + 1 < n ? 1 : 0));
    up->push_back(p.dec_blocks.back());
  }
  decoder->register_module("up_blocks", up);
  p.dec_norm_out = decoder->register_module("conv_norm_out", norm(groups, ch[0]));
  p.dec_conv_out = decoder->register_module("conv_out", conv(ch[0], c.out_channels, 3));
  register_module("decoder", decoder);
  if (c.use_quant_conv) p.quant_conv = register_module("quant_conv", conv(2 * c.latent_channels, 2 * c.latent_channels, 1));
  if (c.use_post_quant_conv)
    p.post_quant_conv = register_module("post_quant_conv", conv(c.latent_channels, c.latent_channels, 1));
  if (c.flux2()) {  // BatchNorm2d(4·latent, affine=False): its running statistics only
    auto bn = register_module("bn", std::make_shared<Module>());
    bn_running_mean = bn->register_buffer("running_mean", at::zeros({4 * c.latent_channels}));
    bn_running_var = bn->register_buffer("running_var", at::ones({4 * c.latent_channels}));
  }
}

AutoencoderKLImpl::~AutoencoderKLImpl() = default;

DiagonalGaussian AutoencoderKLImpl::encode(const at::Tensor& image) {
  auto& p = *parts_;
  const int64_t f = config_.downsample_factor();
  if (image.dim() != 4 || image.size(1) != config_.in_channels || image.size(2) % f != 0 || image.size(3) % f != 0)
    throw Error(ErrorKind::config, "VAE input must be [B, " + std::to_string(config_.in_channels) +
                                       ", H, W] with H and W divisible by " + std::to_string(f));
  at::Tensor h = p.enc_conv_in(image.to(p.enc_conv_in->weight.scalar_type()));
  for (auto& b : p.enc_blocks) h = b(h);
  h = p.enc_conv_out(at::silu(p.enc_norm_out(p.enc_mid(h))));
  const auto moments = (p.quant_conv ? p.quant_conv(h) : h).chunk(2, 1);
  return {moments[0], moments[1].clamp(-30.0, 20.0)};
}

at::Tensor AutoencoderKLImpl::decode(const at::Tensor& latent) {
  auto& p = *parts_;
  const at::Tensor z = latent.to(p.dec_conv_in->weight.scalar_type());
  at::Tensor h = p.dec_mid(p.dec_conv_in(p.post_quant_conv ? p.post_quant_conv(z) : z));
  for (auto& b : p.dec_blocks) h = b(h);
  return p.dec_conv_out(at::silu(p.dec_norm_out(h)));
}

at::Tensor patchify_2x2(const at::Tensor& z) {
  const auto b = z.size(0), c = z.size(1), h = z.size(2), w = z.size(3);
  return z.reshape({b, c, h / 2, 2, w / 2, 2}).permute({0, 1, 3, 5, 2, 4}).reshape({b, c * 4, h / 2, w / 2});
}

at::Tensor unpatchify_2x2(const at::Tensor& x) {
  const auto b = x.size(0), c = x.size(1) / 4, h = x.size(2), w = x.size(3);
  return x.reshape({b, c, 2, 2, h, w}).permute({0, 1, 4, 2, 5, 3}).reshape({b, c, h * 2, w * 2});
}

at::Tensor flux2_normalize_patched(const at::Tensor& z, const at::Tensor& mean, const at::Tensor& var, double eps) {
  const at::Tensor m = mean.to(z.options()).view({1, -1, 1, 1});
  const at::Tensor std = at::sqrt(var.to(z.options()).view({1, -1, 1, 1}) + eps);
  return (patchify_2x2(z) - m) / std;
}

at::Tensor flux2_denormalize_patched(const at::Tensor& x, const at::Tensor& mean, const at::Tensor& var, double eps) {
  const at::Tensor m = mean.to(x.options()).view({1, -1, 1, 1});
  const at::Tensor std = at::sqrt(var.to(x.options()).view({1, -1, 1, 1}) + eps);
  return unpatchify_2x2(x * std + m);
}

at::Tensor AutoencoderKLImpl::normalize_patched(const at::Tensor& z) const {
  if (!config_.flux2()) throw Error(ErrorKind::config, "normalize_patched: this VAE has no BatchNorm statistics (not FLUX.2's)");
  return flux2_normalize_patched(z, bn_running_mean, bn_running_var, *config_.batch_norm_eps);
}

at::Tensor AutoencoderKLImpl::denormalize_patched(const at::Tensor& x) const {
  if (!config_.flux2()) throw Error(ErrorKind::config, "denormalize_patched: this VAE has no BatchNorm statistics (not FLUX.2's)");
  return flux2_denormalize_patched(x, bn_running_mean, bn_running_var, *config_.batch_norm_eps);
}

void load_vae_weights(AutoencoderKLImpl& vae, const std::vector<const io::SafetensorsReader*>& readers,
                      const std::string& prefix) {
  static const std::pair<std::string, std::string> kOldNames[] = {
      {".to_q.", ".query."}, {".to_k.", ".key."}, {".to_v.", ".value."}, {".to_out.0.", ".proj_attn."}};
  load_weights(vae, readers, prefix, [](const std::string& name) {
    std::vector<std::string> out;
    for (const auto& [now, old] : kOldNames)
      if (const auto at = name.find(now); at != std::string::npos)
        out.push_back(name.substr(0, at) + old + name.substr(at + now.size()));
    return out;
  });
}

AutoencoderKL load_vae_file(const AutoencoderKLConfig& config, const std::string& file) {
  AutoencoderKL vae(config);
  const io::SafetensorsReader r(file);
  // FLUX.2's VAE looks like Flux.1's but for its 32 latent channels and BatchNorm statistics.
  if (!config.flux2() && (r.contains("bn.running_mean") || r.contains(std::string(kSingleFileVae) + "bn.running_mean")))
    throw Error(ErrorKind::config, file + ": a FLUX.2 VAE (AutoencoderKLFlux2: bn.running_mean, 32 latent channels); this "
                                          "model needs Flux.1's 16-channel VAE (ae.safetensors)");
  std::string prefix;
  bool ldm = false;
  for (const std::string p : {"", kSingleFileVae})
    if (r.contains(p + "encoder.conv_in.weight") && r.contains(p + "decoder.up.0.block.0.conv1.weight")) {
      prefix = p;
      ldm = true;
    }
  if (!ldm) {
    load_weights(*vae, r);
    return vae;
  }
  std::vector<std::string> names;
  for (const auto& p : vae->named_parameters(true)) names.push_back(p.key());
  std::map<std::string, std::string> to_ldm;
  for (auto& [d, l] : single_file_vae_names(names, static_cast<int>(config.block_out_channels.size()))) to_ldm[d] = l;
  load_weights(*vae, [&](const std::string& n) -> at::Tensor {
    const auto it = to_ldm.find(n);
    if (it == to_ldm.end() || !r.contains(prefix + it->second)) return {};
    at::Tensor t = r.weight(prefix + it->second);
    if (single_file_vae_is_conv(it->second) && t.dim() == 4) t = t.flatten(1);  // [C, C, 1, 1] -> [C, C]
    return t;
  }, file + " (VAE)");
  return vae;
}

}  // namespace zs::models
