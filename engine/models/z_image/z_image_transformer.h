#pragma once
// Z-Image's denoiser, diffusers' ZImageTransformer2DModel (src/diffusers/models/transformers/
// transformer_z_image.py), text-to-image mode: 2×2 latent patches (features ordered patch row,
// patch column, channel) and caption features, each padded to a multiple of 32 tokens with learned
// pad tokens; the image tokens through `n_refiner_layers` modulated blocks (noise_refiner), the
// caption through as many unmodulated ones (context_refiner), then [image, caption] through
// `n_layers` single-stream blocks (layers) and the final layer; RoPE over (frame, row, column) with
// caption token j at (1 + j, 0, 0) and image token (r, c) at (caption tokens + 1, r, c), pad image
// tokens at (0, 0, 0). A batch whose samples have other padded lengths is padded to the longest
// and its padding masked as keys. Parameter names are diffusers'; every Linear is an
// AdaptedLinear (LoRA); attention goes through models::multi_head_attention (training.attention).

#include <cstdint>
#include <string>
#include <utility>
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

/// transformer/config.json of a ZImageTransformer2DModel. Only patch 2 (frames 1) and
/// n_kv_heads = n_heads are supported (the released models'); the Omni variant (siglip_feat_dim)
/// is refused.
struct ZImageConfig {
  std::int64_t in_channels = 16;
  std::int64_t dim = 3840;
  std::int64_t n_layers = 30;
  std::int64_t n_refiner_layers = 2;
  std::int64_t n_heads = 30;
  double norm_eps = 1e-5;
  bool qk_norm = true;
  std::int64_t cap_feat_dim = 2560;
  double rope_theta = 256.0;
  double t_scale = 1000.0;
  std::vector<std::int64_t> axes_dims = {32, 48, 48};
  std::vector<std::int64_t> axes_lens = {1024, 512, 512};

  std::int64_t head_dim() const { return dim / n_heads; }
  /// The modulation's input width: min(dim, 256) (ADALN_EMBED_DIM).
  std::int64_t adaln_dim() const { return dim < 256 ? dim : 256; }
  /// Parses a config.json object; `source` names the file in errors, which name the key.
  static ZImageConfig from_json(const nlohmann::json& j, const std::string& source);
  static ZImageConfig from_file(const std::string& path);
  nlohmann::json to_json() const;
};

/// The tokens of the sequence a block runs over, per sample: how many are real (the rest is batch
/// padding, masked as keys). Empty: every sample fills the whole sequence.
using SequenceLengths = std::vector<std::int64_t>;

/// Attention with ZSingleStreamAttnProcessor: to_q/k/v (no bias), per-head RMS norms (eps 1e-5),
/// RoPE on pairs of adjacent features, to_out.0 (no bias).
class ZImageAttentionImpl : public torch::nn::Module, public AttentionSite {
 public:
  ZImageAttentionImpl(std::int64_t dim, std::int64_t heads, bool qk_norm);
  /// `x` [B, S, dim]; cos/sin [B, S, head_dim]; `lengths` as SequenceLengths.
  at::Tensor forward(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin, const SequenceLengths& lengths);
  std::int64_t heads, head_dim;
  AdaptedLinear to_q{nullptr}, to_k{nullptr}, to_v{nullptr};
  RmsNorm norm_q{nullptr}, norm_k{nullptr};
  torch::nn::ModuleList to_out{nullptr};  ///< [0]: AdaptedLinear
};
TORCH_MODULE(ZImageAttention);

/// FeedForward: w2(SiLU(w1 x) · w3 x), hidden int(dim / 3 · 8), no biases.
class ZImageFeedForwardImpl : public torch::nn::Module {
 public:
  ZImageFeedForwardImpl(std::int64_t dim, std::int64_t hidden);
  at::Tensor forward(const at::Tensor& x);
  AdaptedLinear w1{nullptr}, w2{nullptr}, w3{nullptr};
};
TORCH_MODULE(ZImageFeedForward);

/// ZImageTransformerBlock: RMS norms before and after attention and feed-forward; with modulation,
/// adaLN_modulation.0 (a Linear on the time embedding, no SiLU) gives (scale_msa, gate_msa,
/// scale_mlp, gate_mlp): inputs · (1 + scale), residuals · tanh(gate).
class ZImageTransformerBlockImpl : public torch::nn::Module {
 public:
  ZImageTransformerBlockImpl(const ZImageConfig& c, bool modulation);
  /// `x` [B, S, dim]; `temb` [B, adaln_dim] (undefined without modulation); the rest as the attention's.
  at::Tensor forward(const at::Tensor& x, const at::Tensor& temb, const at::Tensor& cos, const at::Tensor& sin,
                     const SequenceLengths& lengths);
  ZImageAttention attention{nullptr};
  ZImageFeedForward feed_forward{nullptr};
  RmsNorm attention_norm1{nullptr}, ffn_norm1{nullptr}, attention_norm2{nullptr}, ffn_norm2{nullptr};
  torch::nn::ModuleList adaLN_modulation{nullptr};  ///< [0]: AdaptedLinear(adaln_dim, 4·dim); null without modulation
};
TORCH_MODULE(ZImageTransformerBlock);

/// RoPE's cos and sin [N, Σ axes] (repeat-interleaved pairs, float32) for position ids [N, 3], as
/// RopeEmbedder: float32 angles (float64 frequencies 1/θ^(2i/d) times the position, rounded),
/// their cos and sin evaluated in float64.
std::pair<at::Tensor, at::Tensor> z_image_rope(const at::Tensor& ids, const std::vector<std::int64_t>& axes_dims,
                                               double theta);

class ZImageTransformer2DModelImpl : public DenoiserModule {
 public:
  /// With `on_unit`, each block is handed over as soon as it is built (ZeRO-3's sharded init:
  /// models/param_unit.h); "io" stays whole.
  explicit ZImageTransformer2DModelImpl(ZImageConfig config, const UnitBuilt& on_unit = {});
  const ZImageConfig& config() const { return config_; }

  /// The model's output for latents [B, in_channels, H, W] (H, W even) at the model's time `t` [B]
  /// (ZImagePipeline's (1000 − timestep) / 1000, i.e. 1 − σ; scaled by t_scale inside), caption
  /// features `context` [B, L, cap_feat_dim] with `context_mask` [B, L] (1 for the sample's tokens,
  /// which come first; undefined = all). Returns [B, in_channels, H, W] (the pipeline negates it).
  at::Tensor forward(const at::Tensor& latents, const at::Tensor& context, const at::Tensor& context_mask,
                     const at::Tensor& t);

  /// ZeRO units in forward order: "io" (all_x_embedder, all_final_layer, t_embedder, cap_embedder,
  /// the pad tokens), "noise_refiner.N", "context_refiner.N", "layers.N".
  std::vector<ParamUnit> units() const override;

  AdaptedLinear x_embedder{nullptr};                                 ///< "all_x_embedder.2-1"
  AdaptedLinear final_linear{nullptr}, final_modulation{nullptr};    ///< "all_final_layer.2-1.linear", ".adaLN_modulation.1"
  torch::nn::ModuleList noise_refiner{nullptr}, context_refiner{nullptr}, layers{nullptr};
  AdaptedLinear t_mlp_0{nullptr}, t_mlp_2{nullptr};                  ///< "t_embedder.mlp.0", ".mlp.2"
  RmsNorm cap_norm{nullptr};                                         ///< "cap_embedder.0"
  AdaptedLinear cap_linear{nullptr};                                 ///< "cap_embedder.1"
  at::Tensor x_pad_token, cap_pad_token;                            ///< [1, dim]

 private:
  ZImageConfig config_;
};
TORCH_MODULE(ZImageTransformer2DModel);

}  // namespace zs::models
