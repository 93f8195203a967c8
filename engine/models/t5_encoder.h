#pragma once
// The T5 v1.1 encoder (transformers' T5EncoderModel, models/t5/modeling_t5.py) as Flux's second
// text encoder: token embeddings ("shared"), blocks of self-attention with relative position
// buckets (the bias table in the first block, shared by all) and no 1/√d score scaling, gated-GELU
// feed-forward (wi_0, wi_1, wo; tanh GELU), RMS layer norms with a float32 variance, a final norm.
// No attention mask: FluxPipeline passes none (padding tokens are attended to). Parameter names
// are transformers'; every Linear is an AdaptedLinear.

#include <cstdint>
#include <string>

#include <nlohmann/json_fwd.hpp>
#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/embedding.h>

#include "models/lora.h"

namespace zs::models {

/// text_encoder_2/config.json of a T5EncoderModel (the keys the encoder uses).
struct T5Config {
  std::int64_t vocab_size = 32128;
  std::int64_t d_model = 4096;
  std::int64_t d_kv = 64;
  std::int64_t d_ff = 10240;
  std::int64_t num_layers = 24;
  std::int64_t num_heads = 64;
  std::int64_t relative_attention_num_buckets = 32;
  std::int64_t relative_attention_max_distance = 128;
  double layer_norm_epsilon = 1e-6;

  /// Refuses what this encoder does not implement (feed_forward_proj other than gated-gelu),
  /// naming `source` and the key.
  static T5Config from_json(const nlohmann::json& j, const std::string& source);
  static T5Config from_file(const std::string& path);
  nlohmann::json to_json() const;
};

/// T5's relative position bucket (bidirectional) of `relative` = key position − query position.
at::Tensor t5_relative_position_bucket(const at::Tensor& relative, std::int64_t num_buckets, std::int64_t max_distance);

/// RMS norm without mean or bias; variance in float32, the result in the weight's dtype.
class T5LayerNormImpl : public torch::nn::Module {
 public:
  T5LayerNormImpl(std::int64_t dim, double eps);
  at::Tensor forward(const at::Tensor& x);
  at::Tensor weight;
  double eps;
};
TORCH_MODULE(T5LayerNorm);

class T5AttentionImpl : public torch::nn::Module {
 public:
  T5AttentionImpl(const T5Config& c, bool has_bias_table);
  /// `bias` [1, H, L, L] (from the first block's table).
  at::Tensor forward(const at::Tensor& x, const at::Tensor& bias);
  /// The first block's position bias for `length` tokens: [1, H, L, L].
  at::Tensor position_bias(std::int64_t length, const at::Device& device) const;
  AdaptedLinear q{nullptr}, k{nullptr}, v{nullptr}, o{nullptr};
  torch::nn::Embedding relative_attention_bias{nullptr};
  std::int64_t heads, d_kv, buckets, max_distance;
};
TORCH_MODULE(T5Attention);

/// "layer.0": layer_norm then SelfAttention, added to the input.
class T5LayerSelfAttentionImpl : public torch::nn::Module {
 public:
  T5LayerSelfAttentionImpl(const T5Config& c, bool has_bias_table);
  at::Tensor forward(const at::Tensor& x, const at::Tensor& bias);
  T5Attention SelfAttention{nullptr};
  T5LayerNorm layer_norm{nullptr};
};
TORCH_MODULE(T5LayerSelfAttention);

/// "layer.1.DenseReluDense": wo(gelu_tanh(wi_0 x) · wi_1 x).
class T5GatedDenseImpl : public torch::nn::Module {
 public:
  explicit T5GatedDenseImpl(const T5Config& c);
  at::Tensor forward(const at::Tensor& x);
  AdaptedLinear wi_0{nullptr}, wi_1{nullptr}, wo{nullptr};
};
TORCH_MODULE(T5GatedDense);

/// "layer.1": layer_norm then DenseReluDense, added to the input.
class T5LayerFFImpl : public torch::nn::Module {
 public:
  explicit T5LayerFFImpl(const T5Config& c);
  at::Tensor forward(const at::Tensor& x);
  T5GatedDense DenseReluDense{nullptr};
  T5LayerNorm layer_norm{nullptr};
};
TORCH_MODULE(T5LayerFF);

/// "encoder.block.N": its "layer" list [self-attention, feed-forward].
class T5BlockImpl : public torch::nn::Module {
 public:
  T5BlockImpl(const T5Config& c, bool has_bias_table);
  at::Tensor forward(const at::Tensor& x, const at::Tensor& bias);
  torch::nn::ModuleList layer{nullptr};
  T5LayerSelfAttention attention{nullptr};
  T5LayerFF ff{nullptr};
};
TORCH_MODULE(T5Block);

/// "encoder": the blocks and the final norm.
class T5StackImpl : public torch::nn::Module {
 public:
  explicit T5StackImpl(const T5Config& c);
  torch::nn::ModuleList block{nullptr};
  T5LayerNorm final_layer_norm{nullptr};
};
TORCH_MODULE(T5Stack);

class T5EncoderModelImpl : public torch::nn::Module {
 public:
  explicit T5EncoderModelImpl(T5Config config);
  const T5Config& config() const { return config_; }
  /// The last hidden state [B, L, d_model] for token ids [B, L].
  at::Tensor forward(const at::Tensor& ids);
  /// The same with the weights in CPU memory and the computation on `device`: the embedding, each
  /// block and the final norm go to the device for their part and back, so the device holds one
  /// block's weights at a time (T5-XXL is 8.9 GiB in bf16; a block about 0.4 GiB).
  at::Tensor forward_streamed(const at::Tensor& ids, const at::Device& device);
  torch::nn::Embedding shared{nullptr};
  T5Stack encoder{nullptr};

 private:
  T5Config config_;
};
TORCH_MODULE(T5EncoderModel);

}  // namespace zs::models
