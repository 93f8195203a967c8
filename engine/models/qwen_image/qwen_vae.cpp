#include "models/qwen_image/qwen_vae.h"

#include <cmath>
#include <set>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/conv.h>

#include "core/error.h"
#include "io/json_file.h"
#include "io/safetensors.h"
#include "models/attention.h"
#include "models/weights.h"

namespace zs::models {

// A named namespace, not an anonymous one: a unity batch (CMakeLists.txt, zs_unity) compiles this
// file with others that have their own ResidualBlock, Encoder, ...
namespace qwen_vae_detail {

using std::int64_t;
using torch::nn::Conv2d;
using torch::nn::Conv2dOptions;
using torch::nn::Module;
using torch::nn::ModuleList;

/// QwenImageCausalConv3d on one frame: the frame is preceded by 2·p_t zero frames, so the output is
/// the 2-D convolution with the kernel's last temporal slice (see qwen_vae.h).
struct CausalConvImpl : Module {
  CausalConvImpl(int64_t in, int64_t out, int64_t k_t, int64_t k) : padding(k / 2) {
    // Conv3d's own initialisation (a VAE is loaded, but a fresh one should be PyTorch's).
    torch::nn::Conv3d c(torch::nn::Conv3dOptions(in, out, torch::ExpandingArray<3>({k_t, k, k})));
    weight = register_parameter("weight", c->weight);  // [out, in, k_t, k, k]
    bias = register_parameter("bias", c->bias);
  }
  CausalConvImpl(int64_t in, int64_t out, int64_t k) : CausalConvImpl(in, out, k, k) {}
  at::Tensor forward(const at::Tensor& x) {  // [N, in, H, W] -> [N, out, H, W]
    return at::conv2d(x, weight.select(2, weight.size(2) - 1), bias, {1, 1}, {padding, padding});
  }
  int64_t padding;
  at::Tensor weight, bias;
};
TORCH_MODULE(CausalConv);

/// QwenImageRMS_norm (bias false): F.normalize over channels × sqrt(dim) × gamma; half types are
/// normalised in float32 as diffusers does.
struct ChannelRmsNormImpl : Module {
  ChannelRmsNormImpl(int64_t dim, bool images) : scale(std::sqrt(static_cast<double>(dim))) {
    gamma = register_parameter("gamma", images ? at::ones({dim, 1, 1}) : at::ones({dim, 1, 1, 1}));
  }
  at::Tensor forward(const at::Tensor& x) {  // [N, C, H, W]
    const bool upcast = x.scalar_type() == at::kHalf || x.scalar_type() == at::kBFloat16;
    const at::Tensor xf = upcast ? x.to(at::kFloat) : x;
    const at::Tensor normalized = (xf / xf.norm(2, {1}, true).clamp_min(1e-12)).to(x.scalar_type());
    return normalized * scale * gamma.view({gamma.size(0), 1, 1});
  }
  double scale;
  at::Tensor gamma;
};
TORCH_MODULE(ChannelRmsNorm);

/// An entry of the encoder's flat down_blocks list (residual blocks and resamplers).
struct DownLayer : Module {
  virtual at::Tensor forward(const at::Tensor& x) = 0;
};

/// QwenImageResidualBlock: norm1, conv1, norm2, conv2 (dropout is inference-off), conv_shortcut
/// when the width changes.
struct ResidualBlockImpl : DownLayer {
  ResidualBlockImpl(int64_t in, int64_t out)
      : norm1(register_module("norm1", ChannelRmsNorm(in, false))),
        conv1(register_module("conv1", CausalConv(in, out, 3))),
        norm2(register_module("norm2", ChannelRmsNorm(out, false))),
        conv2(register_module("conv2", CausalConv(out, out, 3))) {
    if (in != out) conv_shortcut = register_module("conv_shortcut", CausalConv(in, out, 1));
  }
  at::Tensor forward(const at::Tensor& x) override {  // [N, in, H, W] -> [N, out, H, W]
    const at::Tensor h = conv_shortcut ? conv_shortcut(x) : x;
    return conv2(at::silu(norm2(conv1(at::silu(norm1(x)))))) + h;
  }
  ChannelRmsNorm norm1;
  CausalConv conv1;
  ChannelRmsNorm norm2;
  CausalConv conv2;
  CausalConv conv_shortcut{nullptr};
};
TORCH_MODULE(ResidualBlock);

/// QwenImageAttentionBlock: one head over the frame's pixels, 1×1 to_qkv and proj, residual.
struct AttentionBlockImpl : Module, AttentionSite {
  explicit AttentionBlockImpl(int64_t dim)
      : norm(register_module("norm", ChannelRmsNorm(dim, true))),
        to_qkv(register_module("to_qkv", Conv2d(Conv2dOptions(dim, 3 * dim, 1)))),
        proj(register_module("proj", Conv2d(Conv2dOptions(dim, dim, 1)))) {}
  at::Tensor forward(const at::Tensor& x) {  // [N, C, H, W]
    const int64_t n = x.size(0), c = x.size(1), h = x.size(2), w = x.size(3);
    const at::Tensor qkv = to_qkv(norm(x)).reshape({n, 3 * c, h * w}).transpose(1, 2);  // [N, HW, 3C]
    const auto parts = qkv.chunk(3, -1);
    const at::Tensor out = multi_head_attention(parts[0], parts[1], parts[2], 1, {}, attention);  // [N, HW, C]
    return proj(out.transpose(1, 2).reshape({n, c, h, w})) + x;
  }
  ChannelRmsNorm norm;
  Conv2d to_qkv, proj;
};
TORCH_MODULE(AttentionBlock);

/// QwenImageMidBlock: resnets.0, attentions.0, resnets.1.
struct MidBlockImpl : Module {
  explicit MidBlockImpl(int64_t dim) : r0(dim, dim), r1(dim, dim), attn(dim) {
    auto resnets = ModuleList();
    resnets->push_back(r0);
    resnets->push_back(r1);
    register_module("resnets", resnets);
    auto attentions = ModuleList();
    attentions->push_back(attn);
    register_module("attentions", attentions);
  }
  at::Tensor forward(const at::Tensor& x) { return r1(attn(r0(x))); }
  ResidualBlock r0, r1;
  AttentionBlock attn;
};
TORCH_MODULE(MidBlock);

/// QwenImageResample on the first frame: `resample` (Sequential: 0 is the pad or the ×2 nearest
/// upsampling, 1 the Conv2d); the 3-D modes' time_conv only fills diffusers' cache on the first
/// chunk, so it is held, never run.
struct ResampleImpl : DownLayer {
  ResampleImpl(int64_t dim, bool up, bool temporal) : up(up) {
    struct Sequential : Module {};
    auto seq = std::make_shared<Sequential>();
    conv = seq->register_module("1", up ? Conv2d(Conv2dOptions(dim, dim / 2, 3).padding(1))
                                        : Conv2d(Conv2dOptions(dim, dim, 3).stride(2)));
    register_module("resample", seq);
    if (temporal) time_conv = register_module("time_conv", up ? CausalConv(dim, dim * 2, 3, 1) : CausalConv(dim, dim, 3, 1));
  }
  at::Tensor forward(const at::Tensor& x) override {
    // Nearest ×2 (diffusers' nearest-exact picks the same source pixels at an integer factor);
    // down: ZeroPad2d((0, 1, 0, 1)), then stride 2.
    return up ? conv(at::upsample_nearest2d(x, {x.size(2) * 2, x.size(3) * 2}))
              : conv(at::constant_pad_nd(x, {0, 1, 0, 1}));
  }
  bool up;
  Conv2d conv{nullptr};
  CausalConv time_conv{nullptr};
};
TORCH_MODULE(Resample);

/// QwenImageUpBlock: num_res_blocks + 1 residual blocks, then `upsamplers.0` unless last.
struct UpBlockImpl : Module {
  UpBlockImpl(int64_t in, int64_t out, int64_t num_res_blocks, int upsample /* 0 none, 2 2-D, 3 3-D */) {
    auto list = ModuleList();
    for (int64_t j = 0; j <= num_res_blocks; ++j) {
      resnets.push_back(ResidualBlock(j == 0 ? in : out, out));
      list->push_back(resnets.back());
    }
    register_module("resnets", list);
    if (upsample != 0) {
      upsampler = Resample(out, true, upsample == 3);
      auto ups = ModuleList();
      ups->push_back(upsampler);
      register_module("upsamplers", ups);
    }
  }
  at::Tensor forward(at::Tensor x) {
    for (auto& r : resnets) x = r(x);
    return upsampler ? upsampler(x) : x;
  }
  std::vector<ResidualBlock> resnets;
  Resample upsampler{nullptr};
};
TORCH_MODULE(UpBlock);

/// QwenImageEncoder3d: conv_in, down_blocks (per level num_res_blocks residual blocks, then a
/// resampler but after the last), mid_block, norm_out, conv_out to 2·z_dim.
struct EncoderImpl : Module {
  explicit EncoderImpl(const QwenVaeConfig& c) {
    std::vector<int64_t> dims = {c.base_dim};
    for (int64_t m : c.dim_mult) dims.push_back(c.base_dim * m);
    conv_in = register_module("conv_in", CausalConv(3, dims[0], 3));
    auto list = ModuleList();
    int64_t out = dims[0];
    for (std::size_t i = 0; i < c.dim_mult.size(); ++i) {
      int64_t in = dims[i];
      out = dims[i + 1];
      for (int64_t j = 0; j < c.num_res_blocks; ++j, in = out) layers.push_back(std::make_shared<ResidualBlockImpl>(in, out));
      if (i + 1 != c.dim_mult.size()) layers.push_back(std::make_shared<ResampleImpl>(out, false, c.temperal_downsample[i]));
    }
    for (const auto& l : layers) list->push_back(l);
    register_module("down_blocks", list);
    mid_block = register_module("mid_block", MidBlock(out));
    norm_out = register_module("norm_out", ChannelRmsNorm(out, false));
    conv_out = register_module("conv_out", CausalConv(out, 2 * c.z_dim, 3));
  }
  at::Tensor forward(const at::Tensor& image) {  // [B, 3, H, W] -> [B, 2·z, H/f, W/f]
    at::Tensor x = conv_in(image);
    for (const auto& l : layers) x = l->forward(x);
    return conv_out(at::silu(norm_out(mid_block(x))));
  }
  CausalConv conv_in{nullptr}, conv_out{nullptr};
  std::vector<std::shared_ptr<DownLayer>> layers;
  MidBlock mid_block{nullptr};
  ChannelRmsNorm norm_out{nullptr};
};
TORCH_MODULE(Encoder);

/// QwenImageDecoder3d: conv_in, mid_block, up_blocks (widths from dim_mult reversed; a block after
/// an upsampler takes half the width it produced), norm_out, conv_out to 3.
struct DecoderImpl : Module {
  explicit DecoderImpl(const QwenVaeConfig& c) {
    const std::size_t levels = c.dim_mult.size();
    std::vector<int64_t> dims = {c.base_dim * c.dim_mult.back()};
    for (std::size_t i = levels; i-- > 0;) dims.push_back(c.base_dim * c.dim_mult[i]);
    conv_in = register_module("conv_in", CausalConv(c.z_dim, dims[0], 3));
    mid_block = register_module("mid_block", MidBlock(dims[0]));
    auto list = ModuleList();
    for (std::size_t i = 0; i < levels; ++i) {
      const int64_t in = i > 0 ? dims[i] / 2 : dims[i];
      const bool temporal = i + 1 < levels && c.temperal_downsample[levels - 2 - i];  // temperal_upsample[i]
      blocks.push_back(UpBlock(in, dims[i + 1], c.num_res_blocks, i + 1 == levels ? 0 : temporal ? 3 : 2));
      list->push_back(blocks.back());
    }
    register_module("up_blocks", list);
    norm_out = register_module("norm_out", ChannelRmsNorm(dims.back(), false));
    conv_out = register_module("conv_out", CausalConv(dims.back(), 3, 3));
  }
  at::Tensor forward(const at::Tensor& z) {  // [B, z, h, w] -> [B, 3, h·f, w·f]
    at::Tensor x = mid_block(conv_in(z));
    for (auto& b : blocks) x = b(x);
    return conv_out(at::silu(norm_out(x)));
  }
  CausalConv conv_in{nullptr}, conv_out{nullptr};
  MidBlock mid_block{nullptr};
  std::vector<UpBlock> blocks;
  ChannelRmsNorm norm_out{nullptr};
};
TORCH_MODULE(Decoder);

}  // namespace qwen_vae_detail

struct QwenVaeParts {
  qwen_vae_detail::Encoder encoder{nullptr};
  qwen_vae_detail::CausalConv quant_conv{nullptr}, post_quant_conv{nullptr};
  qwen_vae_detail::Decoder decoder{nullptr};
};

// ---- config ----

QwenVaeConfig QwenVaeConfig::from_json(const nlohmann::json& j, const std::string& source) {
  if (!j.is_object())
    throw Error(ErrorKind::config, source + ": expected a JSON object (the vae/config.json of an AutoencoderKLQwenImage)");
  QwenVaeConfig c;
  std::vector<std::string> problems;
  auto bad = [&](const std::string& key, const std::string& why) { problems.push_back(source + ": " + key + ": " + why); };
  auto has = [&](const char* key) { return j.contains(key) && !j[key].is_null(); };
  auto integer = [&](const char* key, std::int64_t& v, std::int64_t least) {
    if (!has(key)) return;
    if (!j[key].is_number_integer()) return bad(key, "expected an integer, got " + j[key].dump());
    v = j[key].get<std::int64_t>();
    if (v < least) bad(key, "must be at least " + std::to_string(least) + ", got " + std::to_string(v));
  };
  // A list of `T`s whose elements pass `ok`; `what` names the element kind.
  auto list = [&](const char* key, auto& v, auto ok, const char* what) {
    if (!has(key)) return;
    const auto& a = j[key];
    if (!a.is_array()) return bad(key, std::string("expected a list of ") + what + ", got " + a.dump());
    v.clear();
    for (const auto& e : a) {
      if (!ok(e)) return bad(key, std::string("expected a list of ") + what + ", got " + a.dump());
      v.push_back(e.template get<typename std::decay_t<decltype(v)>::value_type>());
    }
  };
  const auto is_int = [](const nlohmann::json& e) { return e.is_number_integer() && e.get<std::int64_t>() >= 1; };
  const auto is_number = [](const nlohmann::json& e) { return e.is_number(); };
  const auto is_bool = [](const nlohmann::json& e) { return e.is_boolean(); };

  if (has("_class_name") && j["_class_name"] != "AutoencoderKLQwenImage")
    bad("_class_name", "expected \"AutoencoderKLQwenImage\", got " + j["_class_name"].dump());
  integer("base_dim", c.base_dim, 1);
  integer("z_dim", c.z_dim, 1);
  integer("num_res_blocks", c.num_res_blocks, 1);
  std::int64_t input_channels = 3;
  integer("input_channels", input_channels, 1);
  if (input_channels != 3) bad("input_channels", "only 3 (RGB) is supported, got " + std::to_string(input_channels));
  if (has("dropout") && !j["dropout"].is_number()) bad("dropout", "expected a number, got " + j["dropout"].dump());
  list("dim_mult", c.dim_mult, is_int, "positive integers");
  list("attn_scales", c.attn_scales, is_number, "numbers");
  list("temperal_downsample", c.temperal_downsample, is_bool, "true/false");
  list("latents_mean", c.latents_mean, is_number, "numbers");
  list("latents_std", c.latents_std, is_number, "numbers");

  if (c.dim_mult.empty()) bad("dim_mult", "must not be empty");
  else if (c.temperal_downsample.size() + 1 != c.dim_mult.size())
    bad("temperal_downsample", "needs len(dim_mult) - 1 = " + std::to_string(c.dim_mult.size() - 1) + " entries, has " +
                                   std::to_string(c.temperal_downsample.size()));
  if (!c.attn_scales.empty())
    bad("attn_scales", "only [] is supported (Qwen-Image's; diffusers' encoder cannot run attention among its down blocks)");
  const auto z = static_cast<std::size_t>(c.z_dim);
  if (c.latents_mean.size() != z)
    bad("latents_mean", "has " + std::to_string(c.latents_mean.size()) + " values, z_dim is " + std::to_string(c.z_dim) +
                            " (one per latent channel)");
  if (c.latents_std.size() != z)
    bad("latents_std", "has " + std::to_string(c.latents_std.size()) + " values, z_dim is " + std::to_string(c.z_dim) +
                           " (one per latent channel)");
  for (double s : c.latents_std)
    if (!(s > 0.0)) {
      bad("latents_std", "every value must be positive (latents are divided by it)");
      break;
    }
  if (!problems.empty()) {
    std::string msg;
    for (const auto& p : problems) msg += (msg.empty() ? "" : "\n") + p;
    throw Error(ErrorKind::config, msg);
  }
  return c;
}

QwenVaeConfig QwenVaeConfig::from_file(const std::string& path) {
  return from_json(io::read_json_file(path, "VAE config"), path);
}

nlohmann::json QwenVaeConfig::to_json() const {
  return {{"_class_name", "AutoencoderKLQwenImage"},
          {"attn_scales", attn_scales},
          {"base_dim", base_dim},
          {"dim_mult", dim_mult},
          {"dropout", 0.0},
          {"input_channels", 3},
          {"latents_mean", latents_mean},
          {"latents_std", latents_std},
          {"num_res_blocks", num_res_blocks},
          {"temperal_downsample", temperal_downsample},
          {"z_dim", z_dim}};
}

std::int64_t QwenVaeConfig::downsample_factor() const { return std::int64_t{1} << (dim_mult.size() - 1); }

namespace qwen_vae_detail {

/// `values` as [1, z, 1, 1] (or one trailing 1 per further dimension of `like`), in `like`'s options.
at::Tensor per_channel(const std::vector<double>& values, const at::Tensor& like, const char* what, std::int64_t z_dim) {
  if (like.dim() < 2 || like.size(1) != z_dim)
    throw Error(ErrorKind::config, std::string(what) + ": expected latents [B, " + std::to_string(z_dim) +
                                     ", h, w], got " + std::to_string(like.dim()) + " dimensions with " +
                                     (like.dim() >= 2 ? std::to_string(like.size(1)) : std::string("no")) + " channels");
  std::vector<std::int64_t> shape(static_cast<std::size_t>(like.dim()), 1);
  shape[1] = z_dim;
  return at::tensor(values, at::kDouble).view(shape).to(like.options());
}

}  // namespace qwen_vae_detail

at::Tensor QwenVaeConfig::to_model_latents(const at::Tensor& z) const {
  using qwen_vae_detail::per_channel;
  return (z - per_channel(latents_mean, z, "to_model_latents", z_dim)) / per_channel(latents_std, z, "to_model_latents", z_dim);
}

at::Tensor QwenVaeConfig::from_model_latents(const at::Tensor& latents) const {
  using qwen_vae_detail::per_channel;
  return latents * per_channel(latents_std, latents, "from_model_latents", z_dim) +
         per_channel(latents_mean, latents, "from_model_latents", z_dim);
}

// ---- the model ----

QwenVaeImpl::QwenVaeImpl(QwenVaeConfig config) : config_(std::move(config)), parts_(std::make_unique<QwenVaeParts>()) {
  using namespace qwen_vae_detail;
  auto& p = *parts_;
  // diffusers' order: encoder, quant_conv, post_quant_conv, decoder.
  p.encoder = register_module("encoder", Encoder(config_));
  p.quant_conv = register_module("quant_conv", CausalConv(2 * config_.z_dim, 2 * config_.z_dim, 1));
  p.post_quant_conv = register_module("post_quant_conv", CausalConv(config_.z_dim, config_.z_dim, 1));
  p.decoder = register_module("decoder", Decoder(config_));
}

QwenVaeImpl::~QwenVaeImpl() = default;

DiagonalGaussian QwenVaeImpl::encode(const at::Tensor& image) {
  auto& p = *parts_;
  const std::int64_t f = config_.downsample_factor();
  if (image.dim() != 4 || image.size(1) != 3 || image.size(2) % f != 0 || image.size(3) % f != 0)
    throw Error(ErrorKind::config, "Qwen-Image VAE: an image must be [B, 3, H, W] with H and W divisible by " +
                                     std::to_string(f) + ", got " + std::to_string(image.dim()) + " dimensions " +
                                     (image.dim() == 4 ? "[" + std::to_string(image.size(0)) + ", " + std::to_string(image.size(1)) +
                                                             ", " + std::to_string(image.size(2)) + ", " +
                                                             std::to_string(image.size(3)) + "]"
                                                       : std::string()));
  const at::Tensor moments = p.quant_conv(p.encoder(image.to(p.quant_conv->weight.scalar_type())));
  const auto parts = moments.chunk(2, 1);
  return {parts[0], parts[1].clamp(-30.0, 20.0)};
}

at::Tensor QwenVaeImpl::decode(const at::Tensor& latent) {
  auto& p = *parts_;
  if (latent.dim() != 4 || latent.size(1) != config_.z_dim)
    throw Error(ErrorKind::config, "Qwen-Image VAE: latents must be [B, " + std::to_string(config_.z_dim) + ", h, w], got " +
                                     std::to_string(latent.dim()) + " dimensions" +
                                     (latent.dim() >= 2 ? " with " + std::to_string(latent.size(1)) + " channels" : std::string()));
  const at::Tensor z = latent.to(p.post_quant_conv->weight.scalar_type());
  return p.decoder(p.post_quant_conv(z)).clamp(-1.0, 1.0);
}

void load_qwen_vae_weights(QwenVaeImpl& vae, const std::vector<const io::SafetensorsReader*>& readers,
                           const std::string& prefix) {
  // Tensors of the VAE's own modules that this config does not make are refused before anything is
  // copied (load_weights then refuses missing and mis-shaped ones, also before copying).
  std::set<std::string> ours;
  for (const auto& item : vae.named_parameters(true)) ours.insert(prefix + item.key());
  std::vector<std::string> extra;
  for (const auto* r : readers)
    for (const auto& e : r->entries()) {
      if (e.name.rfind(prefix, 0) != 0 || ours.count(e.name)) continue;
      const std::string rest = e.name.substr(prefix.size());
      for (const char* scope : {"encoder.", "decoder.", "quant_conv.", "post_quant_conv."})
        if (rest.rfind(scope, 0) == 0) {
          extra.push_back(e.name);
          break;
        }
    }
  if (!extra.empty()) {
    std::string msg = (readers.empty() ? std::string("VAE weights") : readers.front()->path()) + ": " +
                      std::to_string(extra.size()) + " tensor" + (extra.size() == 1 ? "" : "s") +
                      " that this VAE config does not make (more levels or residual blocks than dim_mult and"
                      " num_res_blocks say):";
    for (std::size_t i = 0; i < extra.size() && i < 20; ++i) msg += "\n  " + extra[i];
    if (extra.size() > 20) msg += "\n  ... and " + std::to_string(extra.size() - 20) + " more";
    msg += "\nCheck that the weights belong to this vae/config.json.";
    throw Error(ErrorKind::checkpoint, msg);
  }
  load_weights(vae, readers, prefix);
}

}  // namespace zs::models
