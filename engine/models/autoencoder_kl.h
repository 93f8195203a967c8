#pragma once
// diffusers' AutoencoderKL (the Stable Diffusion VAE): encoder to a diagonal Gaussian over
// latents, decoder back to pixels, with diffusers' module names. Loads weights whose mid-block
// attention uses the current names (to_q/to_k/to_v/to_out.0) or the older ones many SD 1.x files
// carry (query/key/value/proj_attn), as [C, C] or 1x1-conv [C, C, 1, 1] matrices.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>
#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

namespace zs::io {
class SafetensorsReader;
}

namespace zs::models {

struct AutoencoderKLConfig {
  std::int64_t in_channels = 3;
  std::int64_t out_channels = 3;
  std::int64_t latent_channels = 4;
  std::vector<std::int64_t> block_out_channels = {128, 256, 512, 512};
  std::int64_t layers_per_block = 2;
  std::int64_t norm_num_groups = 32;
  std::int64_t sample_size = 512;
  double scaling_factor = 0.18215;   ///< latents for the denoiser are (posterior samples − shift) × this
  std::optional<double> shift_factor;  ///< Flux: subtracted before scaling (0.1159); SD: none
  bool force_upcast = true;          ///< run in fp32 even when the rest is fp16 (SDXL's VAE)
  bool mid_block_add_attention = true;
  bool use_quant_conv = true;        ///< the 1×1 convolution after the encoder (Flux: none)
  bool use_post_quant_conv = true;   ///< the 1×1 convolution before the decoder (Flux: none)
  /// FLUX.2's AutoencoderKLFlux2: the eps of the BatchNorm statistics ("bn.running_mean/var", over
  /// the 2×2-patchified latent channels) that its pipelines normalize latents with instead of a
  /// scaling and shift factor (normalize_patched). Unset: AutoencoderKL.
  std::optional<double> batch_norm_eps;
  bool flux2() const { return batch_norm_eps.has_value(); }

  /// diffusers' vae/config.json (`source` names the file in errors); unknown block types and
  /// activations are refused naming the key. "_class_name": "AutoencoderKLFlux2" starts from that
  /// class's defaults (32 latent channels, quant convolutions, batch_norm_eps 1e-4).
  static AutoencoderKLConfig from_json(const nlohmann::json& j, const std::string& source);
  static AutoencoderKLConfig from_file(const std::string& path);
  /// Flux.1's VAE (16 latent channels, scaling 0.3611, shift 0.1159, no quant convolutions), which
  /// Z-Image uses too.
  static AutoencoderKLConfig flux1();
  /// diffusers-compatible vae/config.json content.
  nlohmann::json to_json() const;
  /// Pixels per latent pixel (2^(blocks − 1)).
  std::int64_t downsample_factor() const;
  /// The denoiser's latents from raw latents: (z − shift_factor) · scaling_factor.
  at::Tensor to_model_latents(const at::Tensor& z) const;
  /// The inverse: latents / scaling_factor + shift_factor.
  at::Tensor from_model_latents(const at::Tensor& latents) const;
};

struct VaeParts;  // encoder and decoder modules (autoencoder_kl.cpp)

/// The latent distribution: mean and log-variance (clamped to [−30, 20] as diffusers does).
struct DiagonalGaussian {
  at::Tensor mean;    ///< [B, latent, H/f, W/f]
  at::Tensor logvar;  ///< same
  /// mean + exp(logvar/2)·ε with ε ~ N(0, 1) from `generator` (default generator when undefined).
  at::Tensor sample(c10::optional<at::Generator> generator = c10::nullopt) const;
};

class AutoencoderKLImpl : public torch::nn::Module {
 public:
  explicit AutoencoderKLImpl(AutoencoderKLConfig config);
  ~AutoencoderKLImpl() override;

  /// image [B, in_channels, H, W] in [−1, 1] → posterior over [B, latent, H/f, W/f] (raw latents,
  /// not multiplied by scaling_factor).
  DiagonalGaussian encode(const at::Tensor& image);
  /// latent [B, latent, h, w] (raw) → image [B, out_channels, h·f, w·f].
  at::Tensor decode(const at::Tensor& latent);
  /// FLUX.2 (config().flux2()): raw latents [B, C, h, w] → 2×2-patchified [B, 4C, h/2, w/2]
  /// (channel c·4 + dy·2 + dx) normalized by the BatchNorm statistics, (x − mean) / sqrt(var + eps),
  /// as Flux2Pipeline._encode_vae_image; throws zs::Error(config) for another VAE.
  at::Tensor normalize_patched(const at::Tensor& z) const;
  /// The inverse: denormalized and unpatchified, ready for decode().
  at::Tensor denormalize_patched(const at::Tensor& x) const;
  at::Tensor bn_running_mean, bn_running_var;  ///< FLUX.2: [4·latent] buffers "bn.running_mean/var"

  const AutoencoderKLConfig& config() const { return config_; }

 private:
  AutoencoderKLConfig config_;
  std::unique_ptr<VaeParts> parts_;
};
TORCH_MODULE(AutoencoderKL);

/// Flux2Pipeline._patchify_latents: [B, C, h, w] → [B, 4C, h/2, w/2], channel c·4 + dy·2 + dx.
at::Tensor patchify_2x2(const at::Tensor& z);
/// _unpatchify_latents, the inverse.
at::Tensor unpatchify_2x2(const at::Tensor& x);
/// FLUX.2's latent normalization by the VAE's BatchNorm statistics `mean`, `var` [4C] and `eps`:
/// raw latents → patchified (x − mean) / sqrt(var + eps), and back (what normalize_patched and
/// denormalize_patched do with the VAE's own buffers, for a model that keeps only the statistics).
at::Tensor flux2_normalize_patched(const at::Tensor& z, const at::Tensor& mean, const at::Tensor& var, double eps);
at::Tensor flux2_denormalize_patched(const at::Tensor& x, const at::Tensor& mean, const at::Tensor& var, double eps);

/// Copies the VAE's weights from `readers` (one file or the shards of one; names as in
/// vae/diffusion_pytorch_model.safetensors, behind `prefix`), accepting the older attention
/// names. Throws zs::Error(checkpoint) naming the file and every missing or mis-shaped tensor.
void load_vae_weights(AutoencoderKLImpl& vae, const std::vector<const io::SafetensorsReader*>& readers,
                      const std::string& prefix = "");

/// The VAE of `config` from one file in diffusers' names or in the original LDM layout (Black Forest
/// Labs' ae.safetensors, ComfyUI's vae/*.safetensors: no prefix or first_stage_model.), as
/// model.vae_path gives it. Throws zs::Error naming the file and what is missing.
AutoencoderKL load_vae_file(const AutoencoderKLConfig& config, const std::string& file);

}  // namespace zs::models
