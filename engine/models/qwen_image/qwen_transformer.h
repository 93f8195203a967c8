#pragma once
// Qwen-Image's denoiser, diffusers' QwenImageTransformer2DModel (src/diffusers/models/transformers/
// transformer_qwenimage.py): 2×2-packed latent tokens and Qwen2.5-VL text states (RMS-normed, then
// projected) through `num_layers` dual-stream MMDiT blocks (img_mod/txt_mod modulation, joint
// attention with RMS qk-norm and a text mask, img_mlp/txt_mlp), RoPE over (frame, row, column)
// with scale_rope (centred grid) and the text positions after the grid's largest index; output
// through AdaLayerNormContinuous and proj_out. Parameter names are diffusers'; every Linear is an
// AdaptedLinear (LoRA); attention goes through models::multi_head_attention (training.attention).

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
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

/// transformer/config.json of a QwenImageTransformer2DModel. The Edit-2511 / layered variants'
/// keys (zero_cond_t, use_additional_t_cond, use_layer3d_rope, guidance_embeds) are refused when true.
struct QwenImageConfig {
  std::int64_t patch_size = 2;
  std::int64_t in_channels = 64;
  std::int64_t out_channels = 16;
  std::int64_t num_layers = 60;
  std::int64_t attention_head_dim = 128;
  std::int64_t num_attention_heads = 24;
  std::int64_t joint_attention_dim = 3584;
  std::vector<std::int64_t> axes_dims_rope = {16, 56, 56};

  std::int64_t inner_dim() const { return attention_head_dim * num_attention_heads; }
  /// Parses a config.json object; `source` names the file in errors, which name the key.
  static QwenImageConfig from_json(const nlohmann::json& j, const std::string& source);
  static QwenImageConfig from_file(const std::string& path);
  nlohmann::json to_json() const;
};

/// Attention with QwenDoubleStreamAttnProcessor2_0: q/k/v of the image stream (to_q/k/v) and of
/// the text stream (add_q/k/v_proj), per-head RMS norms, RoPE, one attention over [text, image]
/// in which padded text tokens are no keys; to_out.0 (image) and to_add_out (text).
class QwenAttentionImpl : public torch::nn::Module, public AttentionSite {
 public:
  QwenAttentionImpl(std::int64_t dim, std::int64_t heads, std::int64_t head_dim);
  /// `x` [B, S, dim] image, `context` [B, L, dim] text; cos/sin [L + S, head_dim] (text rows
  /// first); `keys`: per sample the joint positions that may be attended to (valid text tokens
  /// and every image token, int64), or empty when every text token is valid. Returns {image, text}.
  std::pair<at::Tensor, at::Tensor> forward(const at::Tensor& x, const at::Tensor& context, const at::Tensor& cos,
                                            const at::Tensor& sin, const std::vector<at::Tensor>& keys);
  std::int64_t heads, head_dim;
  RmsNorm norm_q{nullptr}, norm_k{nullptr}, norm_added_q{nullptr}, norm_added_k{nullptr};
  AdaptedLinear to_q{nullptr}, to_k{nullptr}, to_v{nullptr}, add_k_proj{nullptr}, add_v_proj{nullptr},
      add_q_proj{nullptr}, to_add_out{nullptr};
  torch::nn::ModuleList to_out{nullptr};  ///< [0]: AdaptedLinear
};
TORCH_MODULE(QwenAttention);

/// QwenImageTransformerBlock: img_mod/txt_mod (SiLU → Linear(dim, 6·dim), "img_mod.1": shift,
/// scale, gate for the attention, then for the MLP), LayerNorms without affine (eps 1e-6), joint
/// attention, img_mlp/txt_mlp (GELU-tanh, 4·dim).
class QwenImageTransformerBlockImpl : public torch::nn::Module {
 public:
  QwenImageTransformerBlockImpl(std::int64_t dim, std::int64_t heads, std::int64_t head_dim);
  /// `x` [B, S, dim], `context` [B, L, dim], `temb` [B, dim]; the rest as QwenAttention's.
  /// Returns {image, text}.
  std::pair<at::Tensor, at::Tensor> forward(const at::Tensor& x, const at::Tensor& context, const at::Tensor& temb,
                                            const at::Tensor& cos, const at::Tensor& sin,
                                            const std::vector<at::Tensor>& keys);
  torch::nn::ModuleList img_mod{nullptr}, txt_mod{nullptr};  ///< [0] SiLU, [1] AdaptedLinear
  QwenAttention attn{nullptr};
  GeluFeedForward img_mlp{nullptr}, txt_mlp{nullptr};
};
TORCH_MODULE(QwenImageTransformerBlock);

/// QwenTimestepProjEmbeddings ("time_text_embed"): Timesteps(256, flip_sin_to_cos, shift 0,
/// scale 1000) then TimestepEmbedding ("timestep_embedder.linear_1/2").
class QwenTimestepProjEmbeddingsImpl : public torch::nn::Module {
 public:
  explicit QwenTimestepProjEmbeddingsImpl(std::int64_t dim);
  /// σ [B] (in [0, 1]; the sinusoid takes σ·1000, in float64) → [B, dim] in `dtype`.
  at::Tensor forward(const at::Tensor& sigma, at::ScalarType dtype);
  TimestepEmbedding timestep_embedder{nullptr};
};
TORCH_MODULE(QwenTimestepProjEmbeddings);

/// QwenEmbedRope's positions (scale_rope) for `text_len` text tokens and an (h × w) token grid of
/// one frame, as (frame, row, column) [text_len + h·w, 3] int64, text first: image rows
/// −(h − h/2) … h/2 − 1, columns likewise, frame 0; text token i at max(h/2, w/2) + i on all three axes.
at::Tensor qwen_rope_ids(std::int64_t grid_h, std::int64_t grid_w, std::int64_t text_len, const at::Device& device);

/// RoPE's cos and sin [N, Σ axes] (repeat-interleaved pairs, float32) for position ids [N, 3].
/// The angles are diffusers' float32 ones (rope_params: float32 frequencies 1/θ^(2i/d) times the
/// position, rounded to float32), their cos and sin evaluated in float64.
std::pair<at::Tensor, at::Tensor> qwen_rope(const at::Tensor& ids, const std::vector<std::int64_t>& axes_dims,
                                            double theta = 10000.0);

class QwenImageTransformer2DModelImpl : public DenoiserModule {
 public:
  /// With `on_unit`, each block is handed over as soon as it is built (ZeRO-3's sharded init:
  /// models/param_unit.h); "io" stays whole.
  explicit QwenImageTransformer2DModelImpl(QwenImageConfig config, const UnitBuilt& on_unit = {});
  const QwenImageConfig& config() const { return config_; }

  /// The velocity for packed latent tokens `hidden` [B, S, in_channels] (S = grid_h · grid_w) at
  /// `timestep` σ [B] in [0, 1] (scaled by 1000 inside), text states `context`
  /// [B, L, joint_attention_dim] with `context_mask` [B, L] (1 valid, 0 padding; undefined = all
  /// valid). Returns [B, S, patch²·out_channels].
  at::Tensor forward(const at::Tensor& hidden, const at::Tensor& context, const at::Tensor& context_mask,
                     const at::Tensor& timestep, std::int64_t grid_h, std::int64_t grid_w);

  /// ZeRO units in forward order: "io" (time_text_embed, txt_norm, img_in, txt_in, norm_out,
  /// proj_out), then "transformer_blocks.N"; parameters by their names here.
  std::vector<ParamUnit> units() const override;

  QwenTimestepProjEmbeddings time_text_embed{nullptr};
  RmsNorm txt_norm{nullptr};  ///< diffusers' RMSNorm (RmsNormRounding::weight_dtype), as the qk norms
  AdaptedLinear img_in{nullptr}, txt_in{nullptr}, proj_out{nullptr};
  torch::nn::ModuleList transformer_blocks{nullptr};
  AdaModulation norm_out{nullptr};  ///< AdaLayerNormContinuous: (scale, shift), in that order

 private:
  QwenImageConfig config_;
};
TORCH_MODULE(QwenImageTransformer2DModel);

}  // namespace zs::models
