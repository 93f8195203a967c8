#include "models/clip_text_model.h"


#include <ATen/ATen.h>
#include <nlohmann/json.hpp>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>

#include "core/error.h"
#include "io/json_file.h"
#include "models/attention.h"
#include "models/lora.h"

namespace zs::models {

using nlohmann::json;
using torch::nn::Embedding;
using torch::nn::LayerNorm;
using torch::nn::LayerNormOptions;

ClipTextConfig ClipTextConfig::from_json(const json& j, const std::string& source) {
  ClipTextConfig c;
  try {
    auto get = [&](const char* key, std::int64_t& out) {
      if (j.contains(key) && !j[key].is_null()) out = j[key].get<std::int64_t>();
    };
    get("vocab_size", c.vocab_size);
    get("hidden_size", c.hidden_size);
    get("intermediate_size", c.intermediate_size);
    get("num_attention_heads", c.num_attention_heads);
    get("num_hidden_layers", c.num_hidden_layers);
    get("max_position_embeddings", c.max_position_embeddings);
    if (j.contains("hidden_act")) c.hidden_act = j["hidden_act"].get<std::string>();
    if (j.contains("layer_norm_eps")) c.layer_norm_eps = j["layer_norm_eps"].get<double>();
    // Older HF configs carry transformers' placeholder ids (bos 0, eos 2), for which transformers
    // pools at the largest id (argmax): with CLIP's vocabulary the first end token, 49407, the
    // default here. Any other eos_token_id is where transformers pools (modeling_clip.py), as in
    // newer configs and tiny vocabularies. Our own configs set zerostudio_eos_token_id.
    if (j.contains("eos_token_id") && j["eos_token_id"].is_number_integer() && j["eos_token_id"].get<std::int64_t>() != 2)
      c.eos_token_id = j["eos_token_id"].get<std::int64_t>();
    if (j.contains("zerostudio_eos_token_id")) c.eos_token_id = j["zerostudio_eos_token_id"].get<std::int64_t>();
    if (j.contains("architectures") && j["architectures"].is_array())
      for (const auto& a : j["architectures"]) c.with_projection |= a == "CLIPTextModelWithProjection";
    get("projection_dim", c.projection_dim);
    if (c.with_projection && c.projection_dim <= 0) c.projection_dim = c.hidden_size;
  } catch (const json::exception& e) {
    throw Error(ErrorKind::config, source + ": " + e.what());
  }
  if (c.hidden_act != "quick_gelu" && c.hidden_act != "gelu")
    throw Error(ErrorKind::config, source + ": hidden_act: \"" + c.hidden_act + "\" is not quick_gelu or gelu");
  if (c.num_attention_heads < 1 || c.hidden_size % c.num_attention_heads != 0)
    throw Error(ErrorKind::config, source + ": num_attention_heads: must divide hidden_size");
  if (c.num_hidden_layers < 2)
    throw Error(ErrorKind::config, source + ": num_hidden_layers: needs at least 2 (the penultimate layer is an output)");
  return c;
}

ClipTextConfig ClipTextConfig::from_file(const std::string& path) {
  return from_json(io::read_json_file(path, "text encoder config"), path);
}

json ClipTextConfig::to_json() const {
  return json{{"architectures", {with_projection ? "CLIPTextModelWithProjection" : "CLIPTextModel"}},
              {"model_type", "clip_text_model"},
              {"vocab_size", vocab_size}, {"hidden_size", hidden_size}, {"intermediate_size", intermediate_size},
              {"num_attention_heads", num_attention_heads}, {"num_hidden_layers", num_hidden_layers},
              {"max_position_embeddings", max_position_embeddings}, {"hidden_act", hidden_act},
              {"layer_norm_eps", layer_norm_eps}, {"projection_dim", with_projection ? projection_dim : hidden_size},
              {"zerostudio_eos_token_id", eos_token_id}, {"torch_dtype", "float32"}};
}

namespace {

struct ClipAttentionImpl : torch::nn::Module, AttentionSite {
  ClipAttentionImpl(std::int64_t dim, std::int64_t heads_) : heads(heads_) {
    q_proj = register_module("q_proj", AdaptedLinear(dim, dim));
    k_proj = register_module("k_proj", AdaptedLinear(dim, dim));
    v_proj = register_module("v_proj", AdaptedLinear(dim, dim));
    out_proj = register_module("out_proj", AdaptedLinear(dim, dim));
  }
  at::Tensor forward(const at::Tensor& x, const at::Tensor& mask) {
    return out_proj(multi_head_attention(q_proj(x), k_proj(x), v_proj(x), heads, mask, attention));
  }
  std::int64_t heads;
  AdaptedLinear q_proj{nullptr}, k_proj{nullptr}, v_proj{nullptr}, out_proj{nullptr};
};
TORCH_MODULE(ClipAttention);

struct ClipMlpImpl : torch::nn::Module {
  ClipMlpImpl(std::int64_t dim, std::int64_t inner, bool quick_)
      : quick(quick_), fc1(register_module("fc1", AdaptedLinear(dim, inner))), fc2(register_module("fc2", AdaptedLinear(inner, dim))) {}
  at::Tensor forward(const at::Tensor& x) {
    at::Tensor h = fc1(x);
    h = quick ? h * at::sigmoid(1.702 * h) : at::gelu(h);
    return fc2(h);
  }
  bool quick;
  AdaptedLinear fc1, fc2;
};
TORCH_MODULE(ClipMlp);

struct ClipLayerImpl : torch::nn::Module {
  explicit ClipLayerImpl(const ClipTextConfig& c)
      : self_attn(register_module("self_attn", ClipAttention(c.hidden_size, c.num_attention_heads))),
        layer_norm1(register_module("layer_norm1", LayerNorm(LayerNormOptions({c.hidden_size}).eps(c.layer_norm_eps)))),
        mlp(register_module("mlp", ClipMlp(c.hidden_size, c.intermediate_size, c.hidden_act == "quick_gelu"))),
        layer_norm2(register_module("layer_norm2", LayerNorm(LayerNormOptions({c.hidden_size}).eps(c.layer_norm_eps)))) {}
  at::Tensor forward(const at::Tensor& x, const at::Tensor& mask) {
    const at::Tensor h = x + self_attn(layer_norm1(x), mask);
    return h + mlp(layer_norm2(h));
  }
  ClipAttention self_attn;
  LayerNorm layer_norm1;
  ClipMlp mlp;
  LayerNorm layer_norm2;
};
TORCH_MODULE(ClipLayer);

}  // namespace

namespace detail {
struct ClipParts {
  Embedding token_embedding{nullptr}, position_embedding{nullptr};
  std::vector<ClipLayer> layers;
  LayerNorm final_layer_norm{nullptr};
  AdaptedLinear text_projection{nullptr};
};
}  // namespace detail

ClipTextModelImpl::ClipTextModelImpl(ClipTextConfig config)
    : config_(std::move(config)), parts_(std::make_unique<detail::ClipParts>()) {
  auto& p = *parts_;
  const auto& c = config_;
  auto text_model = std::make_shared<torch::nn::Module>();
  auto embeddings = std::make_shared<torch::nn::Module>();
  p.token_embedding = embeddings->register_module("token_embedding", Embedding(c.vocab_size, c.hidden_size));
  p.position_embedding = embeddings->register_module("position_embedding", Embedding(c.max_position_embeddings, c.hidden_size));
  text_model->register_module("embeddings", embeddings);
  auto encoder = std::make_shared<torch::nn::Module>();
  auto layers = torch::nn::ModuleList();
  for (std::int64_t i = 0; i < c.num_hidden_layers; ++i) {
    p.layers.push_back(ClipLayer(c));
    layers->push_back(p.layers.back());
  }
  encoder->register_module("layers", layers);
  text_model->register_module("encoder", encoder);
  p.final_layer_norm = text_model->register_module(
      "final_layer_norm", LayerNorm(LayerNormOptions({c.hidden_size}).eps(c.layer_norm_eps)));
  register_module("text_model", text_model);
  if (c.with_projection)
    p.text_projection = register_module("text_projection", AdaptedLinear(torch::nn::LinearOptions(c.hidden_size, c.projection_dim).bias(false)));
  // CLIP's initialisation: small normal embeddings (LibTorch's default N(0,1) would swamp the positions).
  c10::NoGradGuard no_grad;
  p.token_embedding->weight.normal_(0, 0.02);
  p.position_embedding->weight.normal_(0, 0.01);
}

ClipTextModelImpl::~ClipTextModelImpl() = default;

ClipTextOutput ClipTextModelImpl::forward(const at::Tensor& input_ids) {
  auto& p = *parts_;
  const auto b = input_ids.size(0), t = input_ids.size(1);
  if (t > config_.max_position_embeddings)
    throw Error(ErrorKind::config, "text encoder input has " + std::to_string(t) + " tokens; at most " +
                                       std::to_string(config_.max_position_embeddings) + " fit");
  const at::Tensor positions = at::arange(t, input_ids.options().dtype(at::kLong));
  at::Tensor h = p.token_embedding(input_ids) + p.position_embedding(positions).unsqueeze(0);  // [B, T, C]
  const at::Tensor mask = causal_mask(t, h.scalar_type(), h.device());
  ClipTextOutput out;
  for (std::size_t i = 0; i < p.layers.size(); ++i) {
    h = p.layers[i](h, mask);
    if (i + 2 == p.layers.size()) out.penultimate_hidden_state = h;
  }
  out.last_hidden_state = p.final_layer_norm(h);
  // First end token per row (argmax of a 0/1 mask returns the first maximum).
  const at::Tensor eos_pos = (input_ids == config_.eos_token_id).to(at::kFloat).argmax(1);  // [B]
  const at::Tensor rows = at::arange(b, eos_pos.options()) * t + eos_pos;
  out.pooled = out.last_hidden_state.reshape({b * t, -1}).index_select(0, rows);
  if (p.text_projection) out.text_embeds = p.text_projection(out.pooled);
  return out;
}

}  // namespace zs::models
