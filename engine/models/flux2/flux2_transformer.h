#pragma once
// FLUX.2's denoiser, diffusers' Flux2Transformer2DModel (src/diffusers/models/transformers/
// transformer_flux2.py, 0.42.1), training path: 2×2-patchified 32-channel latents (128 features a
// token) and the stacked text-encoder states through `num_layers` double-stream blocks (separate
// weights per stream, joint attention with RMS qk-norm) and `num_single_layers` single-stream blocks
// (one fused projection to q, k, v and the SwiGLU MLP's gate and input; one fused output). What
// differs from Flux.1 (models/flux/flux_transformer.h): no Linear has a bias; the AdaLN modulation
// is global — three Linears on SiLU(temb) computed once (double image, double text, single) and
// shared by every block, each split as (shift, scale, gate) triples; the feed-forwards are SwiGLU
// (ratio 3, the gate the first half); RoPE has four axes (T, H, W, L) at θ 2000; no pooled text
// embedding; eps from the config (1e-6). The KV-cache paths (klein-kv) are inference only and left out.

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>
#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>

#include "models/attention.h"
#include "models/denoiser_module.h"
#include "models/diffusers_blocks.h"
#include "models/lora.h"
#include "models/param_unit.h"

namespace zs::models {

/// transformer/config.json of a Flux2Transformer2DModel (defaults: FLUX.2 [dev]).
struct Flux2Config {
  std::int64_t patch_size = 1;
  std::int64_t in_channels = 128;
  std::int64_t out_channels = 128;
  std::int64_t num_layers = 8;
  std::int64_t num_single_layers = 48;
  std::int64_t attention_head_dim = 128;
  std::int64_t num_attention_heads = 48;
  std::int64_t joint_attention_dim = 15360;
  std::int64_t timestep_guidance_channels = 256;
  double mlp_ratio = 3.0;
  std::vector<std::int64_t> axes_dims_rope = {32, 32, 32, 32};
  double rope_theta = 2000.0;
  double eps = 1e-6;
  bool guidance_embeds = true;

  std::int64_t inner_dim() const { return attention_head_dim * num_attention_heads; }
  /// The SwiGLU's hidden width: int(inner_dim · mlp_ratio), as diffusers truncates it.
  std::int64_t mlp_hidden() const;
  /// Parses a config.json object; `source` names the file in errors, which name the key.
  static Flux2Config from_json(const nlohmann::json& j, const std::string& source);
  static Flux2Config from_file(const std::string& path);
  nlohmann::json to_json() const;
  /// The released models' transformers: klein 4B (5 + 20 blocks, 3072 wide, Qwen3-4B's 3 × 2560
  /// text features, no guidance embedding), klein 9B (8 + 24, 4096, Qwen3-8B's 3 × 4096), dev
  /// (8 + 48, 6144, Mistral-Small's 3 × 5120, guidance embedding).
  static Flux2Config klein_4b();
  static Flux2Config klein_9b();
  static Flux2Config dev();
};

/// Flux2SwiGLU feed-forward: linear_in → (gate, up) halves → SiLU(gate)·up → linear_out; no biases.
class Flux2FeedForwardImpl : public torch::nn::Module {
 public:
  Flux2FeedForwardImpl(std::int64_t dim, std::int64_t hidden);
  at::Tensor forward(const at::Tensor& x);
  AdaptedLinear linear_in{nullptr}, linear_out{nullptr};
};
TORCH_MODULE(Flux2FeedForward);

/// Flux2Attention (double blocks): q/k/v of the image stream and add_q/k/v_proj of the text stream,
/// per-head RMS norms, RoPE over the joint sequence (text first), to_out.0 and to_add_out.
class Flux2AttentionImpl : public torch::nn::Module, public AttentionSite {
 public:
  Flux2AttentionImpl(std::int64_t dim, std::int64_t heads, std::int64_t head_dim, double eps);
  /// Returns {image, text}.
  std::pair<at::Tensor, at::Tensor> forward(const at::Tensor& x, const at::Tensor& context, const at::Tensor& cos,
                                            const at::Tensor& sin);
  std::int64_t heads, head_dim;
  RmsNorm norm_q{nullptr}, norm_k{nullptr}, norm_added_q{nullptr}, norm_added_k{nullptr};
  AdaptedLinear to_q{nullptr}, to_k{nullptr}, to_v{nullptr}, add_q_proj{nullptr}, add_k_proj{nullptr},
      add_v_proj{nullptr}, to_add_out{nullptr};
  torch::nn::ModuleList to_out{nullptr};  ///< [0]: AdaptedLinear
};
TORCH_MODULE(Flux2Attention);

/// Flux2TransformerBlock (double stream); its modulation comes from the model's shared Linears.
class Flux2DoubleBlockImpl : public torch::nn::Module {
 public:
  Flux2DoubleBlockImpl(std::int64_t dim, std::int64_t heads, std::int64_t head_dim, std::int64_t mlp, double eps);
  /// `mod_img`, `mod_txt`: [B, 6·dim] each, (shift, scale, gate) for attention then for the MLP.
  /// Returns {image, text}.
  std::pair<at::Tensor, at::Tensor> forward(const at::Tensor& x, const at::Tensor& context, const at::Tensor& mod_img,
                                            const at::Tensor& mod_txt, const at::Tensor& cos, const at::Tensor& sin);
  Flux2Attention attn{nullptr};
  Flux2FeedForward ff{nullptr}, ff_context{nullptr};
  double eps;
};
TORCH_MODULE(Flux2DoubleBlock);

/// Flux2ParallelSelfAttention: to_qkv_mlp_proj's rows are q | k | v | gate | up; attention and
/// the SwiGLU MLP in parallel; to_out over [attention (dim) | MLP (hidden)].
class Flux2ParallelAttentionImpl : public torch::nn::Module, public AttentionSite {
 public:
  Flux2ParallelAttentionImpl(std::int64_t dim, std::int64_t heads, std::int64_t head_dim, std::int64_t mlp, double eps);
  at::Tensor forward(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin);
  std::int64_t heads, head_dim, mlp;
  AdaptedLinear to_qkv_mlp_proj{nullptr}, to_out{nullptr};
  RmsNorm norm_q{nullptr}, norm_k{nullptr};
};
TORCH_MODULE(Flux2ParallelAttention);

/// Flux2SingleTransformerBlock over the joint sequence (text tokens first).
class Flux2SingleBlockImpl : public torch::nn::Module {
 public:
  Flux2SingleBlockImpl(std::int64_t dim, std::int64_t heads, std::int64_t head_dim, std::int64_t mlp, double eps);
  /// `mod`: [B, 3·dim], (shift, scale, gate).
  at::Tensor forward(const at::Tensor& x, const at::Tensor& mod, const at::Tensor& cos, const at::Tensor& sin);
  Flux2ParallelAttention attn{nullptr};
  double eps;
};
TORCH_MODULE(Flux2SingleBlock);

/// Flux2TimestepGuidanceEmbeddings: "time_guidance_embed.{timestep,guidance}_embedder", no biases.
class Flux2TimeGuidanceEmbedImpl : public torch::nn::Module {
 public:
  Flux2TimeGuidanceEmbedImpl(std::int64_t channels, std::int64_t dim, bool guidance);
  /// `t` and `guidance` already scaled by 1000; returns temb in `dtype`.
  at::Tensor forward(const at::Tensor& t, const at::Tensor& guidance, at::ScalarType dtype);
  std::int64_t channels;
  TimestepEmbedding timestep_embedder{nullptr}, guidance_embedder{nullptr};
};
TORCH_MODULE(Flux2TimeGuidanceEmbed);

class Flux2Transformer2DModelImpl : public DenoiserModule {
 public:
  /// With `on_unit`, each block is handed over as soon as it is built (ZeRO-3's sharded init:
  /// models/param_unit.h); "io" stays whole.
  explicit Flux2Transformer2DModelImpl(Flux2Config config, const UnitBuilt& on_unit = {});
  const Flux2Config& config() const { return config_; }

  /// The velocity for packed latent tokens `hidden` [B, S, in_channels] at `timestep` σ [B] in
  /// [0, 1] (scaled by 1000 inside, after the cast to the model's dtype, as diffusers), stacked
  /// text states `context` [B, L, joint_attention_dim] (no mask: the pipelines attend to the
  /// padding too), position ids `img_ids` [S, 4] and `txt_ids` [L, 4] (T, H, W, L), and for
  /// guidance-embedding models ([dev]) `guidance` [B] (required there, ignored otherwise).
  /// Returns [B, S, patch²·out_channels].
  at::Tensor forward(const at::Tensor& hidden, const at::Tensor& context, const at::Tensor& timestep,
                     const at::Tensor& img_ids, const at::Tensor& txt_ids, const at::Tensor& guidance = {});

  /// ZeRO units in forward order: "io" (embedders, the three shared modulations, norm_out,
  /// proj_out), then "transformer_blocks.N" and "single_transformer_blocks.N".
  std::vector<ParamUnit> units() const override;

  Flux2TimeGuidanceEmbed time_guidance_embed{nullptr};
  AdaModulation double_stream_modulation_img{nullptr}, double_stream_modulation_txt{nullptr},
      single_stream_modulation{nullptr};
  AdaptedLinear x_embedder{nullptr}, context_embedder{nullptr}, proj_out{nullptr};
  AdaModulation norm_out{nullptr};  ///< AdaLayerNormContinuous: (scale, shift), in that order
  torch::nn::ModuleList transformer_blocks{nullptr}, single_transformer_blocks{nullptr};

 private:
  Flux2Config config_;
};
TORCH_MODULE(Flux2Transformer2DModel);

/// Flux2Pipeline's _prepare_latent_ids: (0, row, column, 0) for an (h × w) token grid: [h·w, 4].
at::Tensor flux2_image_ids(std::int64_t h, std::int64_t w, const at::TensorOptions& options);
/// Flux2Pipeline's _prepare_text_ids: (0, 0, 0, i) for `length` text tokens: [length, 4].
at::Tensor flux2_text_ids(std::int64_t length, const at::TensorOptions& options);

}  // namespace zs::models
