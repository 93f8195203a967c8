#pragma once
// The Qwen language models the families use as text encoders, shared by them (no family owns
// this folder): Qwen2.5-VL-7B-Instruct's language model (transformers' models/qwen2_5_vl/
// modeling_qwen2_5_vl.py, Qwen2_5_VLTextModel; no vision tower: Qwen-Image) and Qwen3
// (models/qwen3/modeling_qwen3.py, Qwen3Model: Z-Image's Qwen3-4B, FLUX.2 [klein]'s next). One
// decoder: token embeddings, layers of RMS norm, grouped-query self-attention (Qwen2.5-VL: q/k/v
// bias; Qwen3: per-head RMS norms on q and k before RoPE, no bias, a head size of its own) and
// SwiGLU, the final norm. Causal attention with the padding mask. Parameter names are
// transformers'; weights load from the layouts the pipelines' folders carry (load_qwen_text_weights).
//
// RoPE is the plain 1-D kind (rotate_half): for text, Qwen2.5-VL's get_rope_index gives the
// temporal, height and width sections one and the same position, so the sections' frequencies
// recombine into exactly the 1-D table (tst_qwen_text checks this against transformers'
// multimodal RoPE); Qwen3's is 1-D to begin with. Attention is models::multi_head_attention with
// GQA's key/value heads repeated; padding (right, as the pipelines' tokenizers pad) makes a
// per-sample mask, so a batch with different lengths runs attention sample by sample.

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>
#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/embedding.h>

#include "models/attention.h"
#include "models/lora.h"

namespace zs::models {

/// text_encoder/config.json of a Qwen2_5_VLForConditionalGeneration (its text part; the keys
/// sit at the top level or under "text_config") or of a Qwen3 model (Qwen3ForCausalLM,
/// Qwen3Model: model_type "qwen3"). Errors name `source` and the key.
struct QwenTextConfig {
  enum class Kind { qwen2_5_vl, qwen3, mistral };
  Kind kind = Kind::qwen2_5_vl;
  std::int64_t vocab_size = 152064;
  std::int64_t hidden_size = 3584;
  std::int64_t intermediate_size = 18944;
  std::int64_t num_hidden_layers = 28;
  std::int64_t num_attention_heads = 28;
  std::int64_t num_key_value_heads = 4;
  double rms_norm_eps = 1e-6;
  double rope_theta = 1000000.0;
  std::vector<std::int64_t> mrope_section = {16, 24, 24};  ///< Qwen2.5-VL only
  std::int64_t head_size = 0;  ///< Qwen3's head_dim; 0: hidden_size / num_attention_heads
  bool qkv_bias = true;        ///< Qwen2.5-VL: q/k/v with bias; Qwen3: attention_bias (o_proj too)
  bool o_bias = false;
  bool qk_norm = false;        ///< Qwen3: RMS norms of each head's q and k
  std::int64_t sliding_window = 0;  ///< Mistral: the attention window (0: none); longer inputs are refused

  std::int64_t head_dim() const { return head_size > 0 ? head_size : hidden_size / num_attention_heads; }
  /// "Qwen2.5-VL", "Qwen3" or "Mistral", for messages.
  const char* name() const { return kind == Kind::qwen3 ? "Qwen3" : kind == Kind::mistral ? "Mistral" : "Qwen2.5-VL"; }
  static QwenTextConfig from_json(const nlohmann::json& j, const std::string& source);
  static QwenTextConfig from_file(const std::string& path);
  /// Qwen3-4B (Z-Image's text encoder, FLUX.2 [klein 4B]'s): hidden 2560, 36 layers, 32 heads of 128
  /// over 8 key/value heads, SwiGLU 9728, vocabulary 151936, θ 10⁶.
  static QwenTextConfig qwen3_4b();
  /// Qwen3-8B (FLUX.2 [klein 9B]'s): hidden 4096, 36 layers, 32 heads of 128 over 8, SwiGLU 12288.
  static QwenTextConfig qwen3_8b();
  /// Mistral-Small-3.1-24B's language model (FLUX.2 [dev]'s): hidden 5120, 40 layers, 32 heads of
  /// 128 over 8, SwiGLU 32768, vocabulary 131072, θ 10⁹, RMS eps 1e-5, no sliding window.
  static QwenTextConfig mistral_small_3_1();
  nlohmann::json to_json() const;
};

/// cos and sin [B, L, head_dim] of 1-D RoPE at `positions` [B, L] (int64), as transformers'
/// rotary embedding computes them (float32, then `dtype`): the angles position·θ^(−2i/d), twice over.
std::pair<at::Tensor, at::Tensor> qwen_text_rope(const at::Tensor& positions, std::int64_t head_dim, double theta,
                                            at::ScalarType dtype);

/// The additive attention masks for a right-padded `mask` [B, L] (1 valid): causal, and each
/// sample's padding keys hidden. One [L, L] mask when every sample has the same length, else one
/// per sample. Throws zs::Error when a row is not 1…1 0…0 with at least one 1.
std::vector<at::Tensor> qwen_text_attention_masks(const at::Tensor& mask, at::ScalarType dtype, const at::Device& device);

/// Qwen2_5_VLRMSNorm: x·rsqrt(mean(x²) + eps) in float32, back to x's dtype, times the weight.
class QwenTextRmsNormImpl : public torch::nn::Module {
 public:
  QwenTextRmsNormImpl(std::int64_t dim, double eps);
  at::Tensor forward(const at::Tensor& x);
  at::Tensor weight;
  double eps;
};
TORCH_MODULE(QwenTextRmsNorm);

/// "layers.N.self_attn": q/k/v (bias per the config), o; with qk_norm, q_norm and k_norm on each
/// head before RoPE (Qwen3); num_key_value_heads shared by the query heads.
class QwenTextAttentionImpl : public torch::nn::Module, public AttentionSite {
 public:
  explicit QwenTextAttentionImpl(const QwenTextConfig& c);
  /// x [B, L, hidden]; cos, sin [B, L, head_dim]; `masks` from qwen_text_attention_masks.
  at::Tensor forward(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin,
                     const std::vector<at::Tensor>& masks);
  AdaptedLinear q_proj{nullptr}, k_proj{nullptr}, v_proj{nullptr}, o_proj{nullptr};
  QwenTextRmsNorm q_norm{nullptr}, k_norm{nullptr};  ///< null without qk_norm
  std::int64_t heads, kv_heads, head_dim;
};
TORCH_MODULE(QwenTextAttention);

/// "layers.N.mlp": down_proj(silu(gate_proj x) · up_proj x), no biases.
class QwenTextMlpImpl : public torch::nn::Module {
 public:
  explicit QwenTextMlpImpl(const QwenTextConfig& c);
  at::Tensor forward(const at::Tensor& x);
  AdaptedLinear gate_proj{nullptr}, up_proj{nullptr}, down_proj{nullptr};
};
TORCH_MODULE(QwenTextMlp);

/// "layers.N": x + self_attn(input_layernorm x), then h + mlp(post_attention_layernorm h).
class QwenTextDecoderLayerImpl : public torch::nn::Module {
 public:
  explicit QwenTextDecoderLayerImpl(const QwenTextConfig& c);
  at::Tensor forward(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin,
                     const std::vector<at::Tensor>& masks);
  QwenTextAttention self_attn{nullptr};
  QwenTextMlp mlp{nullptr};
  QwenTextRmsNorm input_layernorm{nullptr}, post_attention_layernorm{nullptr};
};
TORCH_MODULE(QwenTextDecoderLayer);

/// Parameters named as transformers' Qwen2_5_VLTextModel's and Qwen3Model's: embed_tokens.weight,
/// layers.N.{self_attn,mlp,input_layernorm,post_attention_layernorm}.…, norm.weight.
class QwenTextModelImpl : public torch::nn::Module {
 public:
  explicit QwenTextModelImpl(QwenTextConfig config);
  const QwenTextConfig& config() const { return config_; }
  /// The last hidden state after the final norm [B, L, hidden] for token ids [B, L] and the
  /// attention mask [B, L] (1 valid, 0 padding; right padding). Positions 0..L−1 in every row,
  /// as transformers 5's language model gives them when the pipeline passes none.
  at::Tensor forward(const at::Tensor& ids, const at::Tensor& mask);
  /// The same at RoPE positions [B, L] (int64; e.g. get_rope_index's, which give padding 0).
  at::Tensor forward(const at::Tensor& ids, const at::Tensor& mask, const at::Tensor& positions);
  /// transformers' hidden_states[n] (output_hidden_states): the state after the first `n` decoder
  /// layers, without the final norm, except n = layers: the last hidden state, after it, as
  /// transformers replaces it (Z-Image's encode_prompt takes hidden_states[-2], n = layers − 1).
  at::Tensor hidden_state(const at::Tensor& ids, const at::Tensor& mask, std::int64_t n);
  /// hidden_state for each n of `ns` in one pass up to the deepest (FLUX.2 [klein] stacks 9, 18
  /// and 27). `streamed_on`: as forward_streamed, the weights in CPU memory, the computation there.
  std::vector<at::Tensor> hidden_states(const at::Tensor& ids, const at::Tensor& mask, const std::vector<std::int64_t>& ns,
                                        const std::optional<at::Device>& streamed_on = std::nullopt);
  /// forward (`n` < 0) or hidden_state with the weights in CPU memory and the computation on
  /// `device`, one decoder layer's weights on the device at a time (7B in bf16 is 13 GiB; a layer
  /// about 0.43 GiB). The token embedding is looked up in CPU memory; the result is on `device`.
  at::Tensor forward_streamed(const at::Tensor& ids, const at::Tensor& mask, const at::Device& device,
                              std::int64_t n = -1);

  torch::nn::Embedding embed_tokens{nullptr};
  torch::nn::ModuleList layers{nullptr};
  QwenTextRmsNorm norm{nullptr};

 private:
  /// Embeddings, the first `n` layers (all when n < 0, then the final norm).
  at::Tensor run(const at::Tensor& ids, const at::Tensor& mask, const at::Tensor& positions, std::int64_t n);
  /// The states after each n of `ns` layers (n = layers: after the final norm), optionally streamed.
  std::vector<at::Tensor> states(const at::Tensor& ids, const at::Tensor& mask, const at::Tensor& positions,
                                 const std::vector<std::int64_t>& ns, const std::optional<at::Device>& streamed_on);
  QwenTextConfig config_;
};
TORCH_MODULE(QwenTextModel);

/// A text_encoder/ folder's model: its config.json and its weights from `weight_files` (one file or
/// a sharded set), in either name layout; the vision tower and lm_head are skipped.
QwenTextModel load_qwen_text_model(const std::string& dir, const std::vector<std::string>& weight_files);
/// Checks the weight files' headers (nothing is read) against the model `config` (from `config_file`)
/// describes: every parameter there with its shape. Throws zs::Error(config) naming the file, the key
/// and both shapes when the config and the weights are of different sizes, before anything loads.
void check_qwen_text_files(const QwenTextConfig& config, const std::string& config_file,
                           const std::vector<std::string>& weight_files);

/// Loads `model`'s weights from a text_encoder folder's safetensors files (one file, or every
/// shard of model.safetensors.index.json) in whichever layout they have: older transformers'
/// (what Qwen-Image ships and transformers 5's save_pretrained still writes) "model.embed_tokens.weight",
/// "model.layers.N.…", "model.norm.weight", or transformers 5's module names
/// "model.language_model.…", or the bare language model's "embed_tokens.weight". The vision
/// tower ("visual.…", "model.visual.…") and lm_head are not read. Throws zs::Error(checkpoint)
/// naming the file and every missing or mis-shaped tensor.
void load_qwen_text_weights(QwenTextModelImpl& model, const std::vector<std::string>& files);

}  // namespace zs::models
