#pragma once
// Qwen-Image's VAE, diffusers' AutoencoderKLQwenImage (src/diffusers/models/autoencoders/
// autoencoder_kl_qwenimage.py; Wan 2.1's causal 3-D VAE) used on one frame, as QwenImagePipeline
// uses it: images enter as [B, 3, 1, H, W]; causal 3-D convolutions, RMS norms, residual blocks,
// mid-block attention, spatial ×8; latents normalised per channel with latents_mean/latents_std.
// Parameter names are diffusers'.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>
#include <torch/nn/module.h>

#include "models/autoencoder_kl.h"  // DiagonalGaussian

namespace zs::models {

/// vae/config.json of an AutoencoderKLQwenImage. Errors name `source` and the key (a z_dim that
/// does not match latents_mean/latents_std, an input channel count other than 3, …).
struct QwenVaeConfig {
  std::int64_t base_dim = 96;
  std::int64_t z_dim = 16;
  std::vector<std::int64_t> dim_mult = {1, 2, 4, 4};
  std::int64_t num_res_blocks = 2;
  std::vector<double> attn_scales = {};
  std::vector<bool> temperal_downsample = {false, true, true};
  std::vector<double> latents_mean, latents_std;  ///< z_dim values each

  static QwenVaeConfig from_json(const nlohmann::json& j, const std::string& source);
  static QwenVaeConfig from_file(const std::string& path);
  nlohmann::json to_json() const;
  /// Pixels per latent pixel (8 for Qwen-Image).
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
  /// image [B, 3, H, W] in [−1, 1] (one frame) → posterior over raw latents [B, z_dim, H/8, W/8].
  DiagonalGaussian encode(const at::Tensor& image);
  /// raw latents [B, z_dim, h, w] → image [B, 3, 8h, 8w].
  at::Tensor decode(const at::Tensor& latent);
  const QwenVaeConfig& config() const { return config_; }

 private:
  QwenVaeConfig config_;
  std::unique_ptr<QwenVaeParts> parts_;
};
TORCH_MODULE(QwenVae);

}  // namespace zs::models
