#pragma once
// Flux.1's denoiser, diffusers' FluxTransformer2DModel (src/diffusers/models/transformers/
// transformer_flux.py): 2×2-packed latent tokens and T5 tokens through `num_layers` double-stream
// blocks (separate weights per stream, joint attention with RMS qk-norm) and `num_single_layers`
// single-stream blocks (one stream, attention and MLP in parallel), RoPE over three axes (text
// ids, latent row, latent column), AdaLN modulation from the timestep, CLIP's pooled embedding
// and, for [dev], the guidance embedding. Parameter names are diffusers'; every Linear is an
// AdaptedLinear (LoRA); attention goes through models::multi_head_attention (training.attention).

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>
#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>

#include "models/attention.h"
#include "models/diffusers_blocks.h"
#include "models/lora.h"
#include "models/denoiser_module.h"
#include "models/param_unit.h"

namespace zs::models {

/// transformer/config.json of a FluxTransformer2DModel.
struct FluxConfig {
  std::int64_t patch_size = 1;
  std::int64_t in_channels = 64;
  std::int64_t out_channels = 64;
  std::int64_t num_layers = 19;
  std::int64_t num_single_layers = 38;
  std::int64_t attention_head_dim = 128;
  std::int64_t num_attention_heads = 24;
  std::int64_t joint_attention_dim = 4096;
  std::int64_t pooled_projection_dim = 768;
  bool guidance_embeds = false;
  std::vector<std::int64_t> axes_dims_rope = {16, 56, 56};

  std::int64_t inner_dim() const { return attention_head_dim * num_attention_heads; }
  /// Parses a config.json object; `source` names the file in errors, which name the key.
  static FluxConfig from_json(const nlohmann::json& j, const std::string& source);
  static FluxConfig from_file(const std::string& path);
  nlohmann::json to_json() const;
};

/// FluxAttention: q/k/v of one stream (and, in double blocks, add_q/k/v_proj of the text stream)
/// with per-head RMS norms, RoPE, joint attention; to_out.0 and to_add_out in double blocks.
class FluxAttentionImpl : public torch::nn::Module, public AttentionSite {
 public:
  FluxAttentionImpl(std::int64_t dim, std::int64_t heads, std::int64_t head_dim, bool joint);
  /// Double block (`context` defined): returns {image, text}; single block: {joint output, {}}.
  std::pair<at::Tensor, at::Tensor> forward(const at::Tensor& x, const at::Tensor& context, const at::Tensor& cos,
                                            const at::Tensor& sin);
  std::int64_t heads, head_dim;
  RmsNorm norm_q{nullptr}, norm_k{nullptr}, norm_added_q{nullptr}, norm_added_k{nullptr};
  AdaptedLinear to_q{nullptr}, to_k{nullptr}, to_v{nullptr}, add_q_proj{nullptr}, add_k_proj{nullptr},
      add_v_proj{nullptr}, to_add_out{nullptr};
  torch::nn::ModuleList to_out{nullptr};  ///< [0]: AdaptedLinear (double blocks only)
};
TORCH_MODULE(FluxAttention);

/// FluxTransformerBlock (double stream).
class FluxDoubleBlockImpl : public torch::nn::Module {
 public:
  FluxDoubleBlockImpl(std::int64_t dim, std::int64_t heads, std::int64_t head_dim);
  /// Returns {image, text}.
  std::pair<at::Tensor, at::Tensor> forward(const at::Tensor& x, const at::Tensor& context, const at::Tensor& temb,
                                            const at::Tensor& cos, const at::Tensor& sin);
  AdaModulation norm1{nullptr}, norm1_context{nullptr};
  FluxAttention attn{nullptr};
  GeluFeedForward ff{nullptr}, ff_context{nullptr};
};
TORCH_MODULE(FluxDoubleBlock);

/// FluxSingleTransformerBlock (one stream over text then image tokens).
class FluxSingleBlockImpl : public torch::nn::Module {
 public:
  FluxSingleBlockImpl(std::int64_t dim, std::int64_t heads, std::int64_t head_dim, std::int64_t mlp);
  /// `x`: the joint sequence [B, L + S, dim].
  at::Tensor forward(const at::Tensor& x, const at::Tensor& temb, const at::Tensor& cos, const at::Tensor& sin);
  AdaModulation norm{nullptr};
  AdaptedLinear proj_mlp{nullptr}, proj_out{nullptr};
  FluxAttention attn{nullptr};
};
TORCH_MODULE(FluxSingleBlock);

/// CombinedTimestep(Guidance)TextProjEmbeddings: "time_text_embed.{timestep,guidance,text}_embedder".
class FluxTimeTextEmbedImpl : public torch::nn::Module {
 public:
  FluxTimeTextEmbedImpl(std::int64_t dim, std::int64_t pooled_dim, bool guidance);
  /// `t` and `guidance` already scaled by 1000.
  at::Tensor forward(const at::Tensor& t, const at::Tensor& guidance, const at::Tensor& pooled);
  TimestepEmbedding timestep_embedder{nullptr}, guidance_embedder{nullptr}, text_embedder{nullptr};
};
TORCH_MODULE(FluxTimeTextEmbed);

class FluxTransformer2DModelImpl : public DenoiserModule {
 public:
  /// With `on_unit`, each block is handed over as soon as it is built (ZeRO-3's sharded init:
  /// models/param_unit.h); "io" stays whole, as the UNet's does.
  explicit FluxTransformer2DModelImpl(FluxConfig config, const UnitBuilt& on_unit = {});
  const FluxConfig& config() const { return config_; }

  /// The velocity for packed latent tokens `hidden` [B, S, in_channels] at `timestep` σ [B] in
  /// [0, 1] (scaled by 1000 inside, as diffusers), T5 states `context` [B, L, joint_attention_dim],
  /// CLIP's pooled `pooled` [B, pooled_projection_dim], position ids `img_ids` [S, 3] and
  /// `txt_ids` [L, 3], and for guidance-embedding models `guidance` [B] (the distilled guidance
  /// scale; required there, ignored otherwise). Returns [B, S, patch²·out_channels].
  at::Tensor forward(const at::Tensor& hidden, const at::Tensor& context, const at::Tensor& pooled,
                     const at::Tensor& timestep, const at::Tensor& img_ids, const at::Tensor& txt_ids,
                     const at::Tensor& guidance = {});

  /// ZeRO units in forward order: "io" (embedders, norm_out, proj_out), then
  /// "transformer_blocks.N" and "single_transformer_blocks.N"; parameters by their names here.
  std::vector<ParamUnit> units() const override;

  FluxTimeTextEmbed time_text_embed{nullptr};
  AdaptedLinear context_embedder{nullptr}, x_embedder{nullptr}, proj_out{nullptr};
  AdaModulation norm_out{nullptr};  ///< AdaLayerNormContinuous: (scale, shift), in that order
  torch::nn::ModuleList transformer_blocks{nullptr}, single_transformer_blocks{nullptr};

 private:
  FluxConfig config_;
};
TORCH_MODULE(FluxTransformer2DModel);

/// RoPE's cos and sin [N, Σ axes] for position ids [N, axes] (FluxPosEmbed: per axis
/// 1/θ^(2i/d) in float64, repeat-interleaved pairs), as float32.
std::pair<at::Tensor, at::Tensor> flux_rope(const at::Tensor& ids, const std::vector<std::int64_t>& axes_dims,
                                            double theta = 10000.0);

/// FluxPipeline's _prepare_latent_image_ids: (0, row, column) for an (h × w) token grid: [h·w, 3].
at::Tensor flux_image_ids(std::int64_t h, std::int64_t w, const at::TensorOptions& options);

}  // namespace zs::models
