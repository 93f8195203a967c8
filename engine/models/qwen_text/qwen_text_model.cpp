#include "models/qwen_text/qwen_text_model.h"

#include <algorithm>
#include <functional>
#include <limits>
#include <map>
#include <tuple>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/meta_tensors.h"
#include "io/json_file.h"
#include "io/safetensors.h"
#include "models/weights.h"

namespace zs::models {

using nlohmann::json;

// ---- config ----

QwenTextConfig QwenTextConfig::from_json(const json& j, const std::string& source) {
  if (!j.is_object())
    throw Error(ErrorKind::config, source + ": expected a JSON object (text_encoder/config.json of Qwen2.5-VL or Qwen3)");
  // transformers 5 writes the language model's keys under "text_config"; 4.49 wrote them at the
  // top level only, and 4.5x wrote both. text_config wins where it has a key.
  const json empty = json::object();
  const json& text = j.contains("text_config") && j["text_config"].is_object() ? j["text_config"] : empty;
  const std::string text_where = source + ": text_config.";
  auto find = [&](const char* key) -> std::pair<const json*, std::string> {
    if (text.contains(key) && !text[key].is_null()) return {&text[key], text_where + key};
    if (j.contains(key) && !j[key].is_null()) return {&j[key], source + ": " + key};
    return {nullptr, {}};
  };
  std::vector<std::string> problems;
  QwenTextConfig c;
  // Qwen3 (model_type "qwen3", architectures Qwen3ForCausalLM / Qwen3Model): its own head size,
  // q/k norms, attention_bias for all four projections, plain 1-D RoPE.
  const bool qwen3 = j.value("model_type", std::string()) == "qwen3" ||
                     (j.contains("architectures") && j["architectures"].is_array() &&
                      std::any_of(j["architectures"].begin(), j["architectures"].end(),
                                  [](const json& a) { return a.is_string() && a.get<std::string>().starts_with("Qwen3"); }));
  // Mistral (FLUX.2 [dev]'s Mistral-Small-3.x: Mistral3ForConditionalGeneration, whose language
  // model is a MistralModel under text_config; or a MistralModel / MistralForCausalLM): Qwen3's
  // decoder without q/k norms or biases, transformers' MistralConfig defaults.
  const auto model_type = [&](const json& o) { return o.is_object() ? o.value("model_type", std::string()) : std::string(); };
  const bool mistral = model_type(j) == "mistral" || model_type(j) == "mistral3" || model_type(text) == "mistral" ||
                       (j.contains("architectures") && j["architectures"].is_array() &&
                        std::any_of(j["architectures"].begin(), j["architectures"].end(),
                                    [](const json& a) { return a.is_string() && a.get<std::string>().starts_with("Mistral"); }));
  if (mistral) {
    c = QwenTextConfig{};
    c.kind = Kind::mistral;
    c.vocab_size = 32000;
    c.hidden_size = 4096;
    c.intermediate_size = 14336;
    c.num_hidden_layers = 32;
    c.num_attention_heads = 32;
    c.num_key_value_heads = 8;
    c.rope_theta = 10000.0;
    c.qkv_bias = c.o_bias = false;
    c.sliding_window = 4096;
  }
  if (qwen3 && !mistral) {
    c = QwenTextConfig{};
    c.kind = Kind::qwen3;
    c.vocab_size = 151936;
    c.hidden_size = 4096;
    c.intermediate_size = 22016;
    c.num_hidden_layers = 32;
    c.num_attention_heads = 32;
    c.num_key_value_heads = 32;
    c.rope_theta = 10000.0;
    c.qkv_bias = c.o_bias = false;
    c.qk_norm = true;
    c.head_size = 128;
  }
  auto get_int = [&](const char* key, std::int64_t& v) {
    const auto [value, where] = find(key);
    if (!value) return;
    if (!value->is_number_integer() || value->get<std::int64_t>() < 1)
      problems.push_back(where + ": expected an integer of at least 1");
    else
      v = value->get<std::int64_t>();
  };
  get_int("vocab_size", c.vocab_size);
  get_int("hidden_size", c.hidden_size);
  get_int("intermediate_size", c.intermediate_size);
  get_int("num_hidden_layers", c.num_hidden_layers);
  get_int("num_attention_heads", c.num_attention_heads);
  c.num_key_value_heads = c.num_attention_heads;  // transformers' default when absent
  get_int("num_key_value_heads", c.num_key_value_heads);
  if (mistral) {
    get_int("head_dim", c.head_size);
    if (const auto [value, where] = find("sliding_window"); value) {
      if (!value->is_number_integer() || value->get<std::int64_t>() < 1)
        problems.push_back(where + ": expected a positive integer or null");
      else
        c.sliding_window = value->get<std::int64_t>();
    } else if ((text.contains("sliding_window") && text["sliding_window"].is_null()) ||
               (j.contains("sliding_window") && j["sliding_window"].is_null())) {
      c.sliding_window = 0;  // null: every token attends to every earlier one
    }
  }
  if (qwen3 && !mistral) {
    get_int("head_dim", c.head_size);
    if (const auto [value, where] = find("attention_bias"); value) {
      if (!value->is_boolean())
        problems.push_back(where + ": expected true or false");
      else
        c.qkv_bias = c.o_bias = value->get<bool>();
    }
    if (const auto [value, where] = find("layer_types"); value && value->is_array())
      for (const auto& t : *value)
        if (t != "full_attention") {
          problems.push_back(where + ": " + t.dump() + " is not supported (every layer attends to every token)");
          break;
        }
  }
  if (const auto [value, where] = find("rms_norm_eps"); value) {
    if (!value->is_number() || value->get<double>() <= 0)
      problems.push_back(where + ": expected a positive number");
    else
      c.rms_norm_eps = value->get<double>();
  }
  if (const auto [value, where] = find("hidden_act"); value && (!value->is_string() || value->get<std::string>() != "silu"))
    problems.push_back(where + ": " + value->dump() + " is not supported; " + c.name() + " uses \"silu\"");
  if (const auto [value, where] = find("use_sliding_window"); value && value->is_boolean() && value->get<bool>())
    problems.push_back(where + ": true is not supported (" + c.name() + "'s language model attends to every token)");
  // RoPE: transformers 5's rope_parameters, or 4.x's rope_scaling beside a top-level rope_theta.
  if (const auto [theta, where] = find("rope_theta"); theta) {
    if (!theta->is_number() || theta->get<double>() <= 0)
      problems.push_back(where + ": expected a positive number");
    else
      c.rope_theta = theta->get<double>();
  }
  for (const char* key : {"rope_scaling", "rope_parameters"}) {
    const auto [rope, where] = find(key);
    if (!rope) continue;
    if (!rope->is_object()) {
      problems.push_back(where + ": expected an object");
      continue;
    }
    const std::string type = rope->value("rope_type", rope->value("type", std::string("default")));
    if (type != "default" && type != "mrope")
      problems.push_back(where + ".rope_type: \"" + type + "\" is not supported (" + c.name() + " uses the default RoPE)");
    if (rope->contains("rope_theta")) {
      if (!(*rope)["rope_theta"].is_number() || (*rope)["rope_theta"].get<double>() <= 0)
        problems.push_back(where + ".rope_theta: expected a positive number");
      else
        c.rope_theta = (*rope)["rope_theta"].get<double>();
    }
    if (rope->contains("mrope_section")) {
      const json& m = (*rope)["mrope_section"];
      if (!m.is_array() || m.size() != 3 ||
          !std::all_of(m.begin(), m.end(), [](const json& v) { return v.is_number_integer() && v.get<std::int64_t>() >= 0; }))
        problems.push_back(where + ".mrope_section: expected three integers (temporal, height, width)");
      else
        c.mrope_section = m.get<std::vector<std::int64_t>>();
    }
  }
  if (problems.empty() && (qwen3 || mistral)) {
    if (c.head_dim() % 2 != 0)
      problems.push_back(source + ": head_dim " + std::to_string(c.head_dim()) + " must be even (RoPE rotates pairs)");
    else if (c.num_attention_heads % c.num_key_value_heads != 0)
      problems.push_back(source + ": num_attention_heads " + std::to_string(c.num_attention_heads) +
                         " is not a multiple of num_key_value_heads " + std::to_string(c.num_key_value_heads));
  } else if (problems.empty()) {
    if (c.hidden_size % c.num_attention_heads != 0 || c.head_dim() % 2 != 0)
      problems.push_back(source + ": hidden_size " + std::to_string(c.hidden_size) + " is not an even head size times num_attention_heads " +
                         std::to_string(c.num_attention_heads));
    else if (c.num_attention_heads % c.num_key_value_heads != 0)
      problems.push_back(source + ": num_attention_heads " + std::to_string(c.num_attention_heads) +
                         " is not a multiple of num_key_value_heads " + std::to_string(c.num_key_value_heads));
    else if (c.mrope_section[0] + c.mrope_section[1] + c.mrope_section[2] != c.head_dim() / 2)
      problems.push_back(source + ": mrope_section sums to " +
                         std::to_string(c.mrope_section[0] + c.mrope_section[1] + c.mrope_section[2]) +
                         ", not half the head size " + std::to_string(c.head_dim()));
  }
  if (!problems.empty()) {
    std::string msg = std::string(c.name()) + " text encoder config:";
    for (const auto& p : problems) msg += "\n  " + p;
    throw Error(ErrorKind::config, msg);
  }
  return c;
}

QwenTextConfig QwenTextConfig::from_file(const std::string& path) {
  return from_json(io::read_json_file(path, "Qwen text encoder config (text_encoder/config.json)"), path);
}

QwenTextConfig QwenTextConfig::qwen3_4b() {
  QwenTextConfig c;
  c.kind = Kind::qwen3;
  c.vocab_size = 151936;
  c.hidden_size = 2560;
  c.intermediate_size = 9728;
  c.num_hidden_layers = 36;
  c.num_attention_heads = 32;
  c.num_key_value_heads = 8;
  c.head_size = 128;
  c.rope_theta = 1000000.0;
  c.qkv_bias = c.o_bias = false;
  c.qk_norm = true;
  return c;
}

QwenTextConfig QwenTextConfig::qwen3_8b() {
  QwenTextConfig c = qwen3_4b();
  c.hidden_size = 4096;
  c.intermediate_size = 12288;
  return c;
}

QwenTextConfig QwenTextConfig::mistral_small_3_1() {
  QwenTextConfig c;
  c.kind = Kind::mistral;
  c.vocab_size = 131072;
  c.hidden_size = 5120;
  c.intermediate_size = 32768;
  c.num_hidden_layers = 40;
  c.num_attention_heads = 32;
  c.num_key_value_heads = 8;
  c.head_size = 128;
  c.rms_norm_eps = 1e-5;
  c.rope_theta = 1e9;
  c.qkv_bias = c.o_bias = false;
  c.qk_norm = false;
  return c;
}

json QwenTextConfig::to_json() const {
  // The keys both share; Qwen3's at the top level, Qwen2.5-VL's in transformers 5's shape (under
  // text_config), each as from_json reads them back.
  json text = {{"vocab_size", vocab_size},
               {"hidden_size", hidden_size},
               {"intermediate_size", intermediate_size},
               {"num_hidden_layers", num_hidden_layers},
               {"num_attention_heads", num_attention_heads},
               {"num_key_value_heads", num_key_value_heads},
               {"hidden_act", "silu"},
               {"rms_norm_eps", rms_norm_eps},
               {"use_sliding_window", false},
               {"rope_parameters", {{"rope_type", "default"}, {"rope_theta", rope_theta}}}};
  if (kind == Kind::mistral) {
    text["architectures"] = {"MistralForCausalLM"};
    text["model_type"] = "mistral";
    text["head_dim"] = head_dim();
    text["sliding_window"] = sliding_window > 0 ? json(sliding_window) : json(nullptr);
    text.erase("use_sliding_window");
    return text;
  }
  if (kind == Kind::qwen3) {
    text["architectures"] = {"Qwen3ForCausalLM"};
    text["model_type"] = "qwen3";
    text["head_dim"] = head_dim();
    text["attention_bias"] = qkv_bias;
    return text;
  }
  text["model_type"] = "qwen2_5_vl_text";
  text["rope_parameters"]["mrope_section"] = mrope_section;
  return {{"architectures", {"Qwen2_5_VLForConditionalGeneration"}}, {"model_type", "qwen2_5_vl"}, {"text_config", text}};
}

// ---- RoPE and masks ----

std::pair<at::Tensor, at::Tensor> qwen_text_rope(const at::Tensor& positions, std::int64_t head_dim, double theta,
                                            at::ScalarType dtype) {
  const auto f32 = at::TensorOptions().dtype(at::kFloat).device(positions.device());
  // As transformers: 1 / θ^(arange(0, d, 2) / d) in float32, angles in float32.
  const at::Tensor inv_freq = at::reciprocal(at::pow(theta, at::arange(0, head_dim, 2, f32) / static_cast<double>(head_dim)));
  const at::Tensor angles = positions.to(at::kFloat).unsqueeze(-1) * inv_freq;  // [B, L, d/2]
  const at::Tensor emb = at::cat({angles, angles}, -1);                         // [B, L, d]
  return {emb.cos().to(dtype), emb.sin().to(dtype)};
}

std::vector<at::Tensor> qwen_text_attention_masks(const at::Tensor& mask, at::ScalarType dtype, const at::Device& device) {
  if (mask.dim() != 2) throw Error(ErrorKind::data, "Qwen text encoder: the attention mask must be [B, L]");
  const at::Tensor m = mask.to(at::kCPU).to(at::kLong);
  const std::int64_t b = m.size(0), l = m.size(1);
  // Right padding: each row 1…1 0…0 with at least one 1 (a row's cumulative product equals it).
  const bool binary = ((m == 0) | (m == 1)).all().item<bool>();
  if (!binary || !at::equal(m.cumprod(1), m) || (l > 0 && !(m.select(1, 0) == 1).all().item<bool>()))
    throw Error(ErrorKind::data, "Qwen text encoder: the attention mask must be right padding (each row 1…1 0…0, "
                                 "at least one 1), as QwenImagePipeline's tokenizer gives it");
  const at::Tensor lengths = m.sum(1);
  const at::Tensor causal = causal_mask(l, dtype, device);
  auto padded = [&](std::int64_t n) {
    if (n == l) return causal;
    at::Tensor out = causal.clone();
    out.narrow(1, n, l - n).fill_(-std::numeric_limits<double>::infinity());
    return out;
  };
  if (b == 0 || (lengths == lengths[0]).all().item<bool>()) return {padded(b == 0 ? l : lengths[0].item<std::int64_t>())};
  std::vector<at::Tensor> out;
  out.reserve(static_cast<std::size_t>(b));
  for (std::int64_t i = 0; i < b; ++i) out.push_back(padded(lengths[i].item<std::int64_t>()));
  return out;
}

// ---- modules ----

QwenTextRmsNormImpl::QwenTextRmsNormImpl(std::int64_t dim, double eps_) : eps(eps_) {
  weight = register_parameter("weight", at::ones({dim}));
}

at::Tensor QwenTextRmsNormImpl::forward(const at::Tensor& x) {
  const at::Tensor h = x.to(at::kFloat);
  const at::Tensor variance = h.pow(2).mean(-1, /*keepdim=*/true);
  return weight * (h * at::rsqrt(variance + eps)).to(x.scalar_type());
}

QwenTextAttentionImpl::QwenTextAttentionImpl(const QwenTextConfig& c)
    : heads(c.num_attention_heads), kv_heads(c.num_key_value_heads), head_dim(c.head_dim()) {
  const std::int64_t d = c.hidden_size;
  q_proj = register_module("q_proj", AdaptedLinear(torch::nn::LinearOptions(d, heads * head_dim).bias(c.qkv_bias)));
  k_proj = register_module("k_proj", AdaptedLinear(torch::nn::LinearOptions(d, kv_heads * head_dim).bias(c.qkv_bias)));
  v_proj = register_module("v_proj", AdaptedLinear(torch::nn::LinearOptions(d, kv_heads * head_dim).bias(c.qkv_bias)));
  o_proj = register_module("o_proj", AdaptedLinear(torch::nn::LinearOptions(heads * head_dim, d).bias(c.o_bias)));
  if (c.qk_norm) {
    q_norm = register_module("q_norm", QwenTextRmsNorm(head_dim, c.rms_norm_eps));
    k_norm = register_module("k_norm", QwenTextRmsNorm(head_dim, c.rms_norm_eps));
  }
}

namespace {

/// rotate_half: (x1, x2) → (−x2, x1) over the last dimension's halves.
at::Tensor qwen_rotate_half(const at::Tensor& x) {
  const std::int64_t half = x.size(-1) / 2;
  return at::cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1);
}

}  // namespace

at::Tensor QwenTextAttentionImpl::forward(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin,
                                      const std::vector<at::Tensor>& masks) {
  const std::int64_t b = x.size(0), l = x.size(1);
  const at::Tensor c = cos.unsqueeze(2), s = sin.unsqueeze(2);  // [B, L, 1, d] over the heads
  auto rope = [&](const at::Tensor& t) { return t * c + qwen_rotate_half(t) * s; };
  auto normed = [](QwenTextRmsNorm& norm, const at::Tensor& t) { return norm ? norm(t) : t; };
  const at::Tensor q = rope(normed(q_norm, q_proj(x).view({b, l, heads, head_dim})));
  // Grouped-query attention: key/value head j serves query heads j·g … j·g + g − 1 (repeat_kv).
  const std::int64_t groups = heads / kv_heads;
  const at::Tensor k = rope(normed(k_norm, k_proj(x).view({b, l, kv_heads, head_dim}))).repeat_interleave(groups, 2);
  const at::Tensor v = v_proj(x).view({b, l, kv_heads, head_dim}).repeat_interleave(groups, 2);
  const std::int64_t inner = heads * head_dim;
  const at::Tensor qf = q.reshape({b, l, inner}), kf = k.reshape({b, l, inner}), vf = v.reshape({b, l, inner});
  at::Tensor out;
  if (masks.size() == 1) {
    out = multi_head_attention(qf, kf, vf, heads, masks[0], attention);
  } else {
    std::vector<at::Tensor> rows;
    rows.reserve(masks.size());
    for (std::int64_t i = 0; i < b; ++i)
      rows.push_back(multi_head_attention(qf.narrow(0, i, 1), kf.narrow(0, i, 1), vf.narrow(0, i, 1), heads,
                                          masks[static_cast<std::size_t>(i)], attention));
    out = at::cat(rows, 0);
  }
  return o_proj(out);
}

QwenTextMlpImpl::QwenTextMlpImpl(const QwenTextConfig& c) {
  gate_proj = register_module("gate_proj", AdaptedLinear(torch::nn::LinearOptions(c.hidden_size, c.intermediate_size).bias(false)));
  up_proj = register_module("up_proj", AdaptedLinear(torch::nn::LinearOptions(c.hidden_size, c.intermediate_size).bias(false)));
  down_proj = register_module("down_proj", AdaptedLinear(torch::nn::LinearOptions(c.intermediate_size, c.hidden_size).bias(false)));
}

at::Tensor QwenTextMlpImpl::forward(const at::Tensor& x) { return down_proj(at::silu(gate_proj(x)) * up_proj(x)); }

QwenTextDecoderLayerImpl::QwenTextDecoderLayerImpl(const QwenTextConfig& c) {
  self_attn = register_module("self_attn", QwenTextAttention(c));
  mlp = register_module("mlp", QwenTextMlp(c));
  input_layernorm = register_module("input_layernorm", QwenTextRmsNorm(c.hidden_size, c.rms_norm_eps));
  post_attention_layernorm = register_module("post_attention_layernorm", QwenTextRmsNorm(c.hidden_size, c.rms_norm_eps));
}

at::Tensor QwenTextDecoderLayerImpl::forward(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin,
                                         const std::vector<at::Tensor>& masks) {
  const at::Tensor h = x + self_attn(input_layernorm(x), cos, sin, masks);
  return h + mlp(post_attention_layernorm(h));
}

QwenTextModelImpl::QwenTextModelImpl(QwenTextConfig config) : config_(std::move(config)) {
  embed_tokens = register_module("embed_tokens", torch::nn::Embedding(config_.vocab_size, config_.hidden_size));
  layers = register_module("layers", torch::nn::ModuleList());
  for (std::int64_t i = 0; i < config_.num_hidden_layers; ++i) layers->push_back(QwenTextDecoderLayer(config_));
  norm = register_module("norm", QwenTextRmsNorm(config_.hidden_size, config_.rms_norm_eps));
}

namespace {

void qwen_check_inputs(const at::Tensor& ids, const at::Tensor& mask) {
  if (ids.dim() != 2 || mask.sizes() != ids.sizes())
    throw Error(ErrorKind::data, "Qwen text encoder: token ids and attention mask must both be [B, L]");
}

at::Tensor qwen_default_positions(const at::Tensor& ids, const at::Device& device) {
  return at::arange(ids.size(1), at::TensorOptions().dtype(at::kLong).device(device)).unsqueeze(0).expand({ids.size(0), ids.size(1)});
}

}  // namespace

at::Tensor QwenTextModelImpl::forward(const at::Tensor& ids, const at::Tensor& mask) {
  return forward(ids, mask, qwen_default_positions(ids, ids.device()));
}

at::Tensor QwenTextModelImpl::forward(const at::Tensor& ids, const at::Tensor& mask, const at::Tensor& positions) {
  return run(ids, mask, positions, -1);
}

at::Tensor QwenTextModelImpl::hidden_state(const at::Tensor& ids, const at::Tensor& mask, std::int64_t n) {
  return hidden_states(ids, mask, {n}).front();
}

std::vector<at::Tensor> QwenTextModelImpl::hidden_states(const at::Tensor& ids, const at::Tensor& mask,
                                                         const std::vector<std::int64_t>& ns,
                                                         const std::optional<at::Device>& streamed_on) {
  const at::Device device = streamed_on ? *streamed_on : ids.device();
  return states(ids, mask, qwen_default_positions(ids, device), ns, streamed_on);
}

at::Tensor QwenTextModelImpl::run(const at::Tensor& ids, const at::Tensor& mask, const at::Tensor& positions,
                                  std::int64_t n) {
  return states(ids, mask, positions, {n < 0 ? config_.num_hidden_layers : n}, std::nullopt).front();
}

std::vector<at::Tensor> QwenTextModelImpl::states(const at::Tensor& ids, const at::Tensor& mask, const at::Tensor& positions,
                                                  const std::vector<std::int64_t>& ns,
                                                  const std::optional<at::Device>& streamed_on) {
  qwen_check_inputs(ids, mask);
  if (config_.sliding_window > 0 && ids.size(1) > config_.sliding_window)
    throw Error(ErrorKind::data, std::string(config_.name()) + " text encoder: " + std::to_string(ids.size(1)) +
                                     " tokens are more than its sliding window of " +
                                     std::to_string(config_.sliding_window) + ", which is not supported");
  const std::int64_t total = config_.num_hidden_layers;
  std::int64_t deepest = 0;
  for (const std::int64_t n : ns) {
    if (n < 0 || n > total)
      throw Error(ErrorKind::config, std::string(config_.name()) + " text encoder: hidden state " + std::to_string(n) +
                                         " asked of a model with " + std::to_string(total) + " layers");
    deepest = std::max(deepest, n);
  }
  // Streamed: each piece visits the device for its part and goes back to CPU memory, where it lives.
  auto visiting = [&](torch::nn::Module& piece, const std::function<at::Tensor()>& fn) {
    if (!streamed_on) return fn();
    piece.to(*streamed_on);
    try {
      at::Tensor out = fn();
      piece.to(at::kCPU);
      return out;
    } catch (...) {
      piece.to(at::kCPU);
      throw;
    }
  };
  // Streamed, the embedding (1 GiB at full size) is only looked up in CPU memory; the rows go over.
  at::Tensor h = streamed_on ? embed_tokens(ids.to(at::kCPU)).to(*streamed_on) : embed_tokens(ids);  // [B, L, hidden]
  at::Tensor cos, sin;
  std::tie(cos, sin) = qwen_text_rope(positions.to(h.device()), config_.head_dim(), config_.rope_theta, h.scalar_type());
  const std::vector<at::Tensor> masks = qwen_text_attention_masks(mask, h.scalar_type(), h.device());
  std::vector<at::Tensor> out(ns.size());
  auto keep = [&](std::int64_t count) {
    for (std::size_t i = 0; i < ns.size(); ++i)
      if (ns[i] == count) out[i] = count == total ? visiting(*norm, [&] { return norm(h); }) : h;
  };
  keep(0);
  for (std::int64_t i = 0; i < deepest; ++i) {
    auto* l = layers[static_cast<std::size_t>(i)]->as<QwenTextDecoderLayerImpl>();
    h = visiting(*l, [&] { return l->forward(h, cos, sin, masks); });
    keep(i + 1);
  }
  return out;
}

at::Tensor QwenTextModelImpl::forward_streamed(const at::Tensor& ids, const at::Tensor& mask, const at::Device& device,
                                               std::int64_t n) {
  return hidden_states(ids, mask, {n < 0 ? config_.num_hidden_layers : n}, device).front();
}

void load_qwen_text_weights(QwenTextModelImpl& model, const std::vector<std::string>& files) {
  if (files.empty()) throw Error(ErrorKind::checkpoint, "Qwen text encoder: no weight files given");
  const WeightFiles r(files);
  // Names: transformers 5's Qwen2.5-VL and Mistral3 ("model.language_model."), a causal LM's
  // ("model."), a bare model's, and older Mistral3 files ("language_model.model.").
  for (const char* prefix : {"model.language_model.", "model.", "", "language_model.model."}) {
    if (!r.find(std::string(prefix) + "embed_tokens.weight").defined()) continue;
    load_weights(model, r.view, prefix);
    return;
  }
  throw Error(ErrorKind::checkpoint,
              files.front() + (files.size() > 1 ? " (and " + std::to_string(files.size() - 1) + " more shards)" : std::string()) +
                  ": no " + model.config().name() + " language model in it (neither model.embed_tokens.weight nor "
                  "model.language_model.embed_tokens.weight); is this the pipeline's text_encoder folder?");
}

QwenTextModel load_qwen_text_model(const std::string& dir, const std::vector<std::string>& weight_files) {
  QwenTextModel model(QwenTextConfig::from_file(dir + "/config.json"));
  load_qwen_text_weights(*model, weight_files);
  return model;
}

void check_qwen_text_files(const QwenTextConfig& config, const std::string& config_file,
                           const std::vector<std::string>& weight_files) {
  std::map<std::string, std::pair<std::string, std::vector<std::int64_t>>> entries;  // name → (file, shape)
  for (const auto& file : weight_files) {
    const io::SafetensorsReader reader(file);
    for (const auto& e : reader.entries()) entries.emplace(e.name, std::make_pair(file, e.shape));
  }
  std::string prefix;
  bool found = false;
  for (const char* p : {"model.language_model.", "model.", "", "language_model.model."})
    if (!found && entries.contains(std::string(p) + "embed_tokens.weight")) {
      prefix = p;
      found = true;
    }
  if (!found) return;  // load_qwen_text_weights says what is missing
  const MetaTensorScope meta;
  const QwenTextModel skeleton(config);
  for (const auto& p : skeleton->named_parameters()) {
    const auto it = entries.find(prefix + p.key());
    const auto want = p.value().sizes().vec();
    if (it == entries.end())
      throw Error(ErrorKind::config, weight_files.front() + ": has no " + prefix + p.key() + ", which the " + config.name() +
                                         " model of " + config_file + " (" + std::to_string(config.num_hidden_layers) +
                                         " layers, hidden size " + std::to_string(config.hidden_size) +
                                         ") has; the config and the weights are of different models");
    if (it->second.second != want)
      throw Error(ErrorKind::config, it->second.first + ": " + prefix + p.key() + " has shape " + shape_text(it->second.second) +
                                         ", but " + config_file + " describes " + shape_text(want) + " (hidden size " +
                                         std::to_string(config.hidden_size) + ", " +
                                         std::to_string(config.num_hidden_layers) +
                                         " layers); the config and the weights are of different sizes");
  }
}

}  // namespace zs::models
