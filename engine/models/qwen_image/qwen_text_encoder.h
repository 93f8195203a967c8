#pragma once
// Qwen-Image's text encoder: the language model of Qwen2.5-VL-7B-Instruct (transformers'
// models/qwen2_5_vl/modeling_qwen2_5_vl.py, Qwen2_5_VLTextModel; no vision tower): token
// embeddings, decoder layers (RMS norm, grouped-query self-attention with q/k/v bias, multimodal
// RoPE — for text-only positions every section carries the same position — and SwiGLU), the final
// norm. Causal attention with the padding mask. Parameter names are transformers'; weights load
// from both layouts Qwen-Image folders carry (see the .cpp). And QwenImagePipeline's prompt
// encoding on top (pipelines/qwenimage/pipeline_qwenimage.py, _get_qwen_prompt_embeds).

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>
#include <torch/nn/module.h>

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

class QwenTextModelImpl : public torch::nn::Module {
 public:
  explicit QwenTextModelImpl(QwenTextConfig config);
  const QwenTextConfig& config() const { return config_; }
  /// The last hidden state after the final norm [B, L, hidden] for token ids [B, L] and the
  /// attention mask [B, L] (1 valid, 0 padding; right padding).
  at::Tensor forward(const at::Tensor& ids, const at::Tensor& mask);
  /// The same with the weights in CPU memory and the computation on `device`, one decoder layer's
  /// weights on the device at a time (7B in bf16 is 13 GiB; a layer about 0.43 GiB).
  at::Tensor forward_streamed(const at::Tensor& ids, const at::Tensor& mask, const at::Device& device);

 private:
  QwenTextConfig config_;
};
TORCH_MODULE(QwenTextModel);

/// A text_encoder/ folder's model: its config.json and its weights from `weight_files` (one file or
/// a sharded set), in either name layout; the vision tower and lm_head are skipped.
QwenTextModel load_qwen_text_model(const std::string& dir, const std::vector<std::string>& weight_files);

/// QwenImagePipeline's prompt template and the number of its leading tokens dropped (34).
extern const char* const kQwenImagePromptTemplate;
constexpr std::int64_t kQwenImagePromptDrop = 34;

/// One prompt's kept states: the valid tokens after the dropped template prefix, truncated to
/// `max_sequence_length` ([n, hidden], n ≥ 1), as encode_prompt returns them before batch padding.
at::Tensor qwen_image_prompt_states(QwenTextModelImpl& model, const QwenTokenizer& tokenizer,
                                    const std::string& prompt, std::int64_t max_sequence_length,
                                    const at::Device& device, bool streamed = false);

/// Batches per-prompt states as encode_prompt does: right-padded with zeros to the longest, and
/// the mask [B, L] (int64; 1 valid). Every prompt full → the mask is still returned (all ones).
std::pair<at::Tensor, at::Tensor> qwen_image_pad_states(const std::vector<at::Tensor>& states);

}  // namespace zs::models
