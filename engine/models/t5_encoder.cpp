#include "models/t5_encoder.h"

#include <functional>

#include <cmath>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/json_file.h"

namespace zs::models {

using nlohmann::json;

T5Config T5Config::from_json(const json& j, const std::string& source) {
  if (!j.is_object()) throw Error(ErrorKind::config, source + ": expected a JSON object (a T5 config.json)");
  T5Config c;
  auto get = [&](const char* key, std::int64_t& v) {
    if (!j.contains(key) || j[key].is_null()) return;
    if (!j[key].is_number_integer()) throw Error(ErrorKind::config, source + ": " + key + ": expected an integer");
    v = j[key].get<std::int64_t>();
    if (v < 1) throw Error(ErrorKind::config, source + ": " + key + ": must be at least 1");
  };
  get("vocab_size", c.vocab_size);
  get("d_model", c.d_model);
  get("d_kv", c.d_kv);
  get("d_ff", c.d_ff);
  get("num_layers", c.num_layers);
  get("num_heads", c.num_heads);
  get("relative_attention_num_buckets", c.relative_attention_num_buckets);
  get("relative_attention_max_distance", c.relative_attention_max_distance);
  if (j.contains("layer_norm_epsilon") && j["layer_norm_epsilon"].is_number())
    c.layer_norm_epsilon = j["layer_norm_epsilon"].get<double>();
  const std::string ff = j.value("feed_forward_proj", std::string("relu"));
  if (ff != "gated-gelu")
    throw Error(ErrorKind::config, source + ": feed_forward_proj: \"" + ff +
                                       "\" is not supported; Flux's T5 v1.1 encoder uses \"gated-gelu\"");
  return c;
}

T5Config T5Config::from_file(const std::string& path) {
  return from_json(io::read_json_file(path, "T5 encoder config (text_encoder_2/config.json)"), path);
}

json T5Config::to_json() const {
  return {{"architectures", {"T5EncoderModel"}},
          {"model_type", "t5"},
          {"vocab_size", vocab_size},
          {"d_model", d_model},
          {"d_kv", d_kv},
          {"d_ff", d_ff},
          {"num_layers", num_layers},
          {"num_heads", num_heads},
          {"relative_attention_num_buckets", relative_attention_num_buckets},
          {"relative_attention_max_distance", relative_attention_max_distance},
          {"layer_norm_epsilon", layer_norm_epsilon},
          {"feed_forward_proj", "gated-gelu"},
          {"dense_act_fn", "gelu_new"},
          {"is_gated_act", true}};
}

at::Tensor t5_relative_position_bucket(const at::Tensor& relative, std::int64_t num_buckets, std::int64_t max_distance) {
  const std::int64_t half = num_buckets / 2;  // bidirectional: half for keys after the query
  at::Tensor buckets = (relative > 0).to(at::kLong) * half;
  const at::Tensor distance = relative.abs();
  const std::int64_t exact = half / 2;
  // As transformers: log(d / exact) / log(max / exact) · (half − exact), in float32, truncated.
  const at::Tensor large =
      (at::log(distance.to(at::kFloat) / static_cast<float>(exact)) /
           static_cast<float>(std::log(static_cast<double>(max_distance) / static_cast<double>(exact))) *
           static_cast<float>(half - exact))
          .to(at::kLong) +
      exact;
  buckets = buckets + at::where(distance < exact, distance, at::clamp_max(large, half - 1));
  return buckets;
}

T5LayerNormImpl::T5LayerNormImpl(std::int64_t dim, double eps_) : eps(eps_) {
  weight = register_parameter("weight", at::ones({dim}));
}

at::Tensor T5LayerNormImpl::forward(const at::Tensor& x) {
  const at::ScalarType up = at::promote_types(x.scalar_type(), at::kFloat);
  const at::Tensor variance = x.to(up).pow(2).mean(-1, /*keepdim=*/true);
  at::Tensor h = x * at::rsqrt(variance + eps);
  if (weight.scalar_type() == at::kHalf || weight.scalar_type() == at::kBFloat16) h = h.to(weight.scalar_type());
  return weight * h;
}

T5AttentionImpl::T5AttentionImpl(const T5Config& c, bool has_bias_table)
    : heads(c.num_heads),
      d_kv(c.d_kv),
      buckets(c.relative_attention_num_buckets),
      max_distance(c.relative_attention_max_distance) {
  const std::int64_t inner = c.num_heads * c.d_kv;
  q = register_module("q", AdaptedLinear(torch::nn::LinearOptions(c.d_model, inner).bias(false)));
  k = register_module("k", AdaptedLinear(torch::nn::LinearOptions(c.d_model, inner).bias(false)));
  v = register_module("v", AdaptedLinear(torch::nn::LinearOptions(c.d_model, inner).bias(false)));
  o = register_module("o", AdaptedLinear(torch::nn::LinearOptions(inner, c.d_model).bias(false)));
  if (has_bias_table)
    relative_attention_bias = register_module("relative_attention_bias", torch::nn::Embedding(buckets, heads));
}

at::Tensor T5AttentionImpl::position_bias(std::int64_t length, const at::Device& device) const {
  const at::Tensor pos = at::arange(length, at::TensorOptions().dtype(at::kLong).device(device));
  const at::Tensor relative = pos.unsqueeze(0) - pos.unsqueeze(1);  // [query, key]: key − query
  const at::Tensor table = relative_attention_bias->weight;
  return table.index_select(0, t5_relative_position_bucket(relative, buckets, max_distance).flatten())
      .view({length, length, heads})
      .permute({2, 0, 1})
      .unsqueeze(0);
}

at::Tensor T5AttentionImpl::forward(const at::Tensor& x, const at::Tensor& bias) {
  const std::int64_t b = x.size(0), l = x.size(1);
  auto split = [&](const at::Tensor& t) { return t.view({b, l, heads, d_kv}).transpose(1, 2); };
  const at::Tensor qh = split(q(x)), kh = split(k(x)), vh = split(v(x));
  const at::Tensor scores = at::matmul(qh, kh.transpose(-1, -2)) + bias.to(qh.scalar_type());  // no 1/√d
  const at::Tensor weights = at::softmax(scores.to(at::promote_types(scores.scalar_type(), at::kFloat)), -1)
                                 .to(scores.scalar_type());
  return o(at::matmul(weights, vh).transpose(1, 2).reshape({b, l, heads * d_kv}));
}

T5LayerSelfAttentionImpl::T5LayerSelfAttentionImpl(const T5Config& c, bool has_bias_table) {
  SelfAttention = register_module("SelfAttention", T5Attention(c, has_bias_table));
  layer_norm = register_module("layer_norm", T5LayerNorm(c.d_model, c.layer_norm_epsilon));
}

at::Tensor T5LayerSelfAttentionImpl::forward(const at::Tensor& x, const at::Tensor& bias) {
  return x + SelfAttention(layer_norm(x), bias);
}

T5GatedDenseImpl::T5GatedDenseImpl(const T5Config& c) {
  wi_0 = register_module("wi_0", AdaptedLinear(torch::nn::LinearOptions(c.d_model, c.d_ff).bias(false)));
  wi_1 = register_module("wi_1", AdaptedLinear(torch::nn::LinearOptions(c.d_model, c.d_ff).bias(false)));
  wo = register_module("wo", AdaptedLinear(torch::nn::LinearOptions(c.d_ff, c.d_model).bias(false)));
}

at::Tensor T5GatedDenseImpl::forward(const at::Tensor& x) {
  return wo((at::gelu(wi_0(x), "tanh") * wi_1(x)).to(wo->weight.scalar_type()));
}

T5LayerFFImpl::T5LayerFFImpl(const T5Config& c) {
  DenseReluDense = register_module("DenseReluDense", T5GatedDense(c));
  layer_norm = register_module("layer_norm", T5LayerNorm(c.d_model, c.layer_norm_epsilon));
}

at::Tensor T5LayerFFImpl::forward(const at::Tensor& x) { return x + DenseReluDense(layer_norm(x)); }

T5BlockImpl::T5BlockImpl(const T5Config& c, bool has_bias_table) {
  attention = T5LayerSelfAttention(c, has_bias_table);
  ff = T5LayerFF(c);
  layer = register_module("layer", torch::nn::ModuleList(attention, ff));
}

at::Tensor T5BlockImpl::forward(const at::Tensor& x, const at::Tensor& bias) {
  at::Tensor h = ff(attention(x, bias));
  if (h.scalar_type() == at::kHalf) {  // as transformers: keep fp16 finite
    const double m = 65504.0 - 1000.0;
    h = h.clamp(-m, m);
  }
  return h;
}

T5StackImpl::T5StackImpl(const T5Config& c) {
  block = register_module("block", torch::nn::ModuleList());
  for (std::int64_t i = 0; i < c.num_layers; ++i) block->push_back(T5Block(c, i == 0));
  final_layer_norm = register_module("final_layer_norm", T5LayerNorm(c.d_model, c.layer_norm_epsilon));
}

T5EncoderModelImpl::T5EncoderModelImpl(T5Config config) : config_(std::move(config)) {
  shared = register_module("shared", torch::nn::Embedding(config_.vocab_size, config_.d_model));
  encoder = register_module("encoder", T5Stack(config_));
}

at::Tensor T5EncoderModelImpl::forward(const at::Tensor& ids) {
  at::Tensor h = shared(ids);
  if (encoder->block->size() == 0) return encoder->final_layer_norm(h);
  const auto* first = encoder->block[0]->as<T5BlockImpl>();
  const at::Tensor bias = first->attention->SelfAttention->position_bias(ids.size(1), ids.device());
  for (const auto& b : *encoder->block) h = b->as<T5BlockImpl>()->forward(h, bias);
  return encoder->final_layer_norm(h);
}

at::Tensor T5EncoderModelImpl::forward_streamed(const at::Tensor& ids, const at::Device& device) {
  // Each piece visits the device for its part and goes back to CPU memory, where it lives.
  auto visiting = [&](torch::nn::Module& piece, const std::function<at::Tensor()>& fn) {
    piece.to(device);
    try {
      at::Tensor out = fn();
      piece.to(at::kCPU);
      return out;
    } catch (...) {
      piece.to(at::kCPU);
      throw;
    }
  };
  const at::Tensor on = ids.to(device);
  at::Tensor h = visiting(*shared, [&] { return shared(on); });
  at::Tensor bias;
  for (std::size_t i = 0; i < encoder->block->size(); ++i) {
    auto* block = encoder->block[i]->as<T5BlockImpl>();
    h = visiting(*block, [&] {
      // The first block's table gives every block's relative position bias, kept on the device.
      if (i == 0) bias = block->attention->SelfAttention->position_bias(on.size(1), device);
      return block->forward(h, bias);
    });
  }
  return visiting(*encoder->final_layer_norm, [&] { return encoder->final_layer_norm(h); });
}

}  // namespace zs::models
