#pragma once
// Qwen-Image's text encoder: the language model of Qwen2.5-VL-7B-Instruct (transformers'
// models/qwen2_5_vl/modeling_qwen2_5_vl.py, Qwen2_5_VLTextModel; no vision tower): token
// embeddings, decoder layers (RMS norm, grouped-query self-attention with q/k/v bias, multimodal
// RoPE — for text-only positions every section carries the same position — and SwiGLU), the final
// norm. Causal attention with the padding mask. Parameter names are transformers'; weights load
// from both layouts Qwen-Image folders carry (load_qwen_text_weights). And QwenImagePipeline's
// prompt encoding on top (pipelines/qwenimage/pipeline_qwenimage.py, _get_qwen_prompt_embeds).
//
// RoPE is the plain 1-D kind: for text, transformers' get_rope_index gives the temporal, height and
// width sections one and the same position, so the sections' frequencies recombine into exactly
// the 1-D table (tst_qwen_text checks this against transformers' multimodal RoPE). Attention is
// models::multi_head_attention with GQA's key/value heads repeated; padding (right, as the
// pipeline's tokenizer pads) makes a per-sample mask, so a batch with different lengths runs
// attention sample by sample.

#include <cstdint>
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

class QwenTokenizer;

/// text_encoder/config.json of a Qwen2_5_VLForConditionalGeneration (its text part; the keys
/// sit at the top level or under "text_config"). Errors name `source` and the key.
struct QwenTextConfig {
  std::int64_t vocab_size = 152064;
  std::int64_t hidden_size = 3584;
  std::int64_t intermediate_size = 18944;
  std::int64_t num_hidden_layers = 28;
  std::int64_t num_attention_heads = 28;
  std::int64_t num_key_value_heads = 4;
  double rms_norm_eps = 1e-6;
  double rope_theta = 1000000.0;
  std::vector<std::int64_t> mrope_section = {16, 24, 24};

  std::int64_t head_dim() const { return hidden_size / num_attention_heads; }
  static QwenTextConfig from_json(const nlohmann::json& j, const std::string& source);
  static QwenTextConfig from_file(const std::string& path);
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

/// "layers.N.self_attn": q/k/v with bias, o without; num_key_value_heads shared by the query heads.
class QwenTextAttentionImpl : public torch::nn::Module, public AttentionSite {
 public:
  explicit QwenTextAttentionImpl(const QwenTextConfig& c);
  /// x [B, L, hidden]; cos, sin [B, L, head_dim]; `masks` from qwen_text_attention_masks.
  at::Tensor forward(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin,
                     const std::vector<at::Tensor>& masks);
  AdaptedLinear q_proj{nullptr}, k_proj{nullptr}, v_proj{nullptr}, o_proj{nullptr};
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

/// Parameters named as transformers' Qwen2_5_VLTextModel's: embed_tokens.weight,
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
  /// The same with the weights in CPU memory and the computation on `device`, one decoder layer's
  /// weights on the device at a time (7B in bf16 is 13 GiB; a layer about 0.43 GiB). The token
  /// embedding is looked up in CPU memory; the result is on `device`.
  at::Tensor forward_streamed(const at::Tensor& ids, const at::Tensor& mask, const at::Device& device);

  torch::nn::Embedding embed_tokens{nullptr};
  torch::nn::ModuleList layers{nullptr};
  QwenTextRmsNorm norm{nullptr};

 private:
  QwenTextConfig config_;
};
TORCH_MODULE(QwenTextModel);

/// A text_encoder/ folder's model: its config.json and its weights from `weight_files` (one file or
/// a sharded set), in either name layout; the vision tower and lm_head are skipped.
QwenTextModel load_qwen_text_model(const std::string& dir, const std::vector<std::string>& weight_files);

/// Loads `model`'s weights from a text_encoder folder's safetensors files (one file, or every
/// shard of model.safetensors.index.json) in whichever layout they have: older transformers'
/// (what Qwen-Image ships and transformers 5's save_pretrained still writes) "model.embed_tokens.weight",
/// "model.layers.N.…", "model.norm.weight", or transformers 5's module names
/// "model.language_model.…", or the bare language model's "embed_tokens.weight". The vision
/// tower ("visual.…", "model.visual.…") and lm_head are not read. Throws zs::Error(checkpoint)
/// naming the file and every missing or mis-shaped tensor.
void load_qwen_text_weights(QwenTextModelImpl& model, const std::vector<std::string>& files);

/// QwenImagePipeline's prompt template ("{}" stands for the prompt) and the number of its leading
/// tokens dropped (34: the system part up to "<|im_start|>user\n" in Qwen2.5-VL's vocabulary).
extern const char* const kQwenImagePromptTemplate;
constexpr std::int64_t kQwenImagePromptDrop = 34;
/// The pipeline's tokenizer_max_length: the tokenizer truncates at this + kQwenImagePromptDrop.
constexpr std::int64_t kQwenImageTokenizerMaxLength = 1024;

/// One prompt's kept states: the valid tokens after the dropped template prefix, truncated to
/// `max_sequence_length` ([n, hidden], n ≥ 1, on `device`), as encode_prompt returns them before
/// batch padding (with causal attention and right padding, a prompt's states do not depend on the
/// others in its batch). `streamed`: forward_streamed (the weights stay in CPU memory). Runs with
/// whatever grad mode the caller set.
at::Tensor qwen_image_prompt_states(QwenTextModelImpl& model, const QwenTokenizer& tokenizer,
                                    const std::string& prompt, std::int64_t max_sequence_length,
                                    const at::Device& device, bool streamed = false);

/// Batches per-prompt states as encode_prompt does: right-padded with zeros to the longest, and
/// the mask [B, L] (int64; 1 valid). Every prompt full → the mask is still returned (all ones).
std::pair<at::Tensor, at::Tensor> qwen_image_pad_states(const std::vector<at::Tensor>& states);

}  // namespace zs::models
