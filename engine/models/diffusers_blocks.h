#pragma once
// diffusers' building blocks that more than one family's denoiser uses, owned by none: the
// timestep's sinusoid and embedding, RMS norms, AdaLN modulation, the gelu-tanh feed-forward,
// rotary embeddings and 2×2 latent packing (diffusers' embeddings.py, normalization.py,
// attention.py; FluxPipeline's _pack_latents). Parameter names are diffusers'; every Linear is an
// AdaptedLinear (LoRA).

#include <cstdint>
#include <string>
#include <vector>

#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>

#include "models/lora.h"

namespace zs::models {

/// Whether an RMS norm rounds before its scale.
enum class RmsNormRounding {
  once,          ///< torch.nn.RMSNorm (Flux's qk-norm): normed and scaled in float32, rounded once
  weight_dtype,  ///< diffusers' RMSNorm (Qwen-Image): normed in float32, rounded to the weight's dtype
                 ///< when that is fp16/bf16, then scaled there
};

/// RMS norm with a learned scale over the last dimension; the mean square in float32 (or wider),
/// returned in x's dtype.
class RmsNormImpl : public torch::nn::Module {
 public:
  RmsNormImpl(std::int64_t dim, double eps, RmsNormRounding rounding = RmsNormRounding::once);
  at::Tensor forward(const at::Tensor& x);
  at::Tensor weight;
  double eps;
  RmsNormRounding rounding;
};
TORCH_MODULE(RmsNorm);

/// A modulation's projection: "<norm>.linear" of AdaLayerNormZero(Single) and AdaLayerNormContinuous.
class AdaModulationImpl : public torch::nn::Module {
 public:
  /// `bias`: false for FLUX.2's (whose linears have none).
  AdaModulationImpl(std::int64_t dim, std::int64_t chunks, bool bias = true);
  /// linear(SiLU(temb)) in `chunks` pieces [B, dim] each.
  std::vector<at::Tensor> forward(const at::Tensor& temb);
  AdaptedLinear linear{nullptr};
  std::int64_t chunks;
};
TORCH_MODULE(AdaModulation);

/// diffusers' GELU(approximate="tanh") with its projection ("net.0.proj").
class GeluTanhProjImpl : public torch::nn::Module {
 public:
  GeluTanhProjImpl(std::int64_t dim, std::int64_t inner);
  at::Tensor forward(const at::Tensor& x);
  AdaptedLinear proj{nullptr};
};
TORCH_MODULE(GeluTanhProj);

/// diffusers' FeedForward with gelu-approximate: net.0 (GeluTanhProj), net.1 (dropout, no
/// weights), net.2.
class GeluFeedForwardImpl : public torch::nn::Module {
 public:
  GeluFeedForwardImpl(std::int64_t dim, std::int64_t inner);
  at::Tensor forward(const at::Tensor& x);
  torch::nn::ModuleList net{nullptr};
  GeluTanhProj gelu{nullptr};
  AdaptedLinear out{nullptr};
};
TORCH_MODULE(GeluFeedForward);

/// diffusers' TimestepEmbedding: linear_1, SiLU, linear_2.
class TimestepEmbeddingImpl : public torch::nn::Module {
 public:
  TimestepEmbeddingImpl(std::int64_t in, std::int64_t dim, bool bias = true);
  at::Tensor forward(const at::Tensor& x);
  AdaptedLinear linear_1{nullptr}, linear_2{nullptr};
};
TORCH_MODULE(TimestepEmbedding);

/// diffusers' sinusoidal timestep features (get_timestep_embedding with flip_sin_to_cos, shift 0,
/// max period 10000): [cos, sin] of t·freqs, `dim` features per value of `t` [B], evaluated in
/// float64 (diffusers uses float32, which is 3e-4 off at guidance 3500; see tst_flux).
at::Tensor timestep_features(const at::Tensor& t, std::int64_t dim);

/// AdaLN's modulation: LayerNorm without affine (eps 1e-6) of x [B, N, dim], then
/// · (1 + scale) + shift, per sample (shift and scale [B, dim]).
at::Tensor ada_modulate(const at::Tensor& x, const at::Tensor& shift, const at::Tensor& scale, double eps = 1e-6);

/// diffusers' apply_rotary_emb (use_real, unbind dim −1; the same as the complex product over pairs of
/// adjacent features) on x [B, S, H, D] with cos/sin [S, D] or, per sample, [B, S, D]
/// (repeat-interleaved pairs), computed in
/// float32 or wider, returned in x's dtype.
at::Tensor apply_rope(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin);

/// RoPE axes (Flux's and Qwen-Image's axes_dims_rope) against the head size: each axis an even
/// number of dimensions, together the head's. Throws zs::Error(config) naming `source` and the key.
/// `axes_key` and `head_dim_key` name the two in the family's config (Z-Image: axes_dims, and the
/// head size dim / n_heads).
void check_rope_axes(const std::vector<std::int64_t>& axes, std::int64_t head_dim, const std::string& source,
                     const std::string& axes_key = "axes_dims_rope", const std::string& head_dim_key = "attention_head_dim");

/// FluxPipeline's _pack_latents (QwenImagePipeline's too): [B, C, H, W] → [B, (H/2)·(W/2), 4C]
/// (H and W even).
at::Tensor pack_latents_2x2(const at::Tensor& latents);
/// The inverse: [B, (H/2)·(W/2), 4C] → [B, C, H, W].
at::Tensor unpack_latents_2x2(const at::Tensor& tokens, std::int64_t height, std::int64_t width);

}  // namespace zs::models
