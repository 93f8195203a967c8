#pragma once
// CLIP text transformer with Hugging Face CLIPTextModel's module names
// (text_model.embeddings.*, text_model.encoder.layers.{i}.*, text_model.final_layer_norm).

#include <cstdint>
#include <memory>
#include <string>

#include <ATen/core/Tensor.h>
#include <nlohmann/json_fwd.hpp>
#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

namespace zs::models {

/// HF CLIPTextConfig keys.
struct ClipTextConfig {
  std::int64_t vocab_size = 49408;
  std::int64_t hidden_size = 768;
  std::int64_t intermediate_size = 3072;
  std::int64_t num_attention_heads = 12;
  std::int64_t num_hidden_layers = 12;
  std::int64_t max_position_embeddings = 77;
  std::string hidden_act = "quick_gelu";  ///< quick_gelu | gelu
  double layer_norm_eps = 1e-5;
  std::int64_t eos_token_id = 49407;      ///< the tokenizer's end id; the pooled output is taken there
  /// CLIPTextModelWithProjection (SDXL's text_encoder_2): `text_projection` (no bias) maps the
  /// pooled output to projection_dim `text_embeds`.
  bool with_projection = false;
  std::int64_t projection_dim = 0;

  static ClipTextConfig from_json(const nlohmann::json& j, const std::string& source);
  static ClipTextConfig from_file(const std::string& path);
  nlohmann::json to_json() const;
};

/// Outputs of one forward pass.
struct ClipTextOutput {
  at::Tensor last_hidden_state;         ///< [B, T, hidden], after the final layer norm
  at::Tensor penultimate_hidden_state;  ///< [B, T, hidden], output of the second-to-last layer ("clip skip 2")
  at::Tensor pooled;                    ///< [B, hidden], last_hidden_state at each row's first end token
                                        ///< (the largest id: transformers' argmax pooling)
  at::Tensor text_embeds;               ///< [B, projection_dim] with_projection only: text_projection(pooled)
};

namespace detail {
struct ClipParts;
}

class ClipTextModelImpl : public torch::nn::Module {
 public:
  explicit ClipTextModelImpl(ClipTextConfig config);
  ~ClipTextModelImpl() override;
  /// input_ids [B, T] (int64, T <= max_position_embeddings), causal attention as in CLIP.
  ClipTextOutput forward(const at::Tensor& input_ids);
  const ClipTextConfig& config() const { return config_; }

 private:
  ClipTextConfig config_;
  std::unique_ptr<detail::ClipParts> parts_;
};
TORCH_MODULE(ClipTextModel);

}  // namespace zs::models
