#pragma once
// Qwen-Image's VAE, diffusers' AutoencoderKLQwenImage (src/diffusers/models/autoencoders/
// autoencoder_kl_qwenimage.py; Wan 2.1's causal 3-D VAE) used on one frame, as QwenImagePipeline
// uses it: images enter as [B, 3, 1, H, W]; causal 3-D convolutions, RMS norms, residual blocks,
// mid-block attention, spatial ×8; latents normalised per channel with latents_mean/latents_std.
// Parameter names are diffusers'.
//
// One frame, computed in 2-D. diffusers encodes a single frame as its first chunk (an empty
// feature cache): each causal convolution pads 2·p_t zero frames in front, so only the last
// temporal slice of its kernel meets the frame, and downsample3d/upsample3d skip their time_conv
// (the first chunk only fills the cache; upsample3d marks it "Rep"). So every causal convolution
// here is a 2-D convolution with weight[:, :, k_t − 1] of the 5-D kernel (stored and loaded as
// diffusers has it, [out, in, k_t, k_h, k_w]); the time_convs are parameters only. The golden
// test (tests/engine/tst_qwen_vae.cpp) checks this against diffusers' 3-D path within 1e-5.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>
#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include "models/autoencoder_kl.h"  // DiagonalGaussian

namespace zs::io {
class SafetensorsReader;
}

namespace zs::models {

/// vae/config.json of an AutoencoderKLQwenImage. Errors name `source` and the key (a z_dim that
/// does not match latents_mean/latents_std, an input channel count other than 3, …). The defaults
/// are diffusers' (Qwen-Image's VAE).
struct QwenVaeConfig {
  std::int64_t base_dim = 96;                           ///< channels of the first level
  std::int64_t z_dim = 16;                              ///< latent channels
  std::vector<std::int64_t> dim_mult = {1, 2, 4, 4};    ///< channels per level, × base_dim
  std::int64_t num_res_blocks = 2;                      ///< per encoder level (decoder: one more)
  std::vector<double> attn_scales = {};                 ///< only [] (diffusers cannot run others)
  std::vector<bool> temperal_downsample = {false, true, true};  ///< len(dim_mult) − 1 entries
  /// Per-channel statistics of the raw latents, z_dim values each.
  std::vector<double> latents_mean = {-0.7571, -0.7089, -0.9113, 0.1075, -0.1745, 0.9653, -0.1517, 1.5508,
                                      0.4134,  -0.0715, 0.5517,  -0.3632, -0.1922, -0.9497, 0.2503, -0.2921};
  std::vector<double> latents_std = {2.8184, 1.4541, 2.3275, 2.6558, 1.2196, 1.7708, 2.6052, 2.0743,
                                     3.2687, 2.1526, 2.8652, 1.5579, 1.6382, 1.1253, 2.8251, 1.9160};

  /// Every problem of `j` is listed in one zs::Error(config), a line each: "<source>: <key>: …".
  static QwenVaeConfig from_json(const nlohmann::json& j, const std::string& source);
  static QwenVaeConfig from_file(const std::string& path);
  /// diffusers-compatible vae/config.json content.
  nlohmann::json to_json() const;
  /// Pixels per latent pixel (8 for Qwen-Image): 2^(len(dim_mult) − 1).
  std::int64_t downsample_factor() const;
  /// The denoiser's latents from raw ones [B, z, h, w]: (z − mean) / std per channel.
  at::Tensor to_model_latents(const at::Tensor& z) const;
  /// The inverse: latents · std + mean.
  at::Tensor from_model_latents(const at::Tensor& latents) const;
};

struct QwenVaeParts;  // encoder and decoder (qwen_vae.cpp)

class QwenVaeImpl : public torch::nn::Module {
 public:
  explicit QwenVaeImpl(QwenVaeConfig config);
  ~QwenVaeImpl() override;
  /// image [B, 3, H, W] in [−1, 1] (one frame; H and W multiples of 8) → posterior over raw latents
  /// [B, z_dim, H/8, W/8], log-variance clamped to [−30, 20]. Runs in the weights' dtype.
  DiagonalGaussian encode(const at::Tensor& image);
  /// raw latents [B, z_dim, h, w] → image [B, 3, 8h, 8w], clamped to [−1, 1] as diffusers' decode.
  at::Tensor decode(const at::Tensor& latent);
  const QwenVaeConfig& config() const { return config_; }

 private:
  QwenVaeConfig config_;
  std::unique_ptr<QwenVaeParts> parts_;
};
TORCH_MODULE(QwenVae);

/// Copies the VAE's weights from `readers` (vae/diffusion_pytorch_model.safetensors or its shards;
/// diffusers' names behind `prefix`). A missing or mis-shaped tensor (channel counts of another
/// config), or a tensor under `prefix` + "encoder."/"decoder." that this config does not make (more
/// residual blocks or levels), throws zs::Error(checkpoint) naming the file and the tensors.
void load_qwen_vae_weights(QwenVaeImpl& vae, const std::vector<const io::SafetensorsReader*>& readers,
                           const std::string& prefix = "");

}  // namespace zs::models
