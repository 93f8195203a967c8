#include "models/qwen_image/qwen_transformer.h"

#include <algorithm>
#include <stdexcept>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>
#include <torch/nn/modules/activation.h>

#include "core/error.h"
#include "io/json_file.h"
#include "models/activation_checkpoint.h"
#include "models/weights.h"

namespace zs::models {

using nlohmann::json;

namespace {

[[noreturn]] void fail(const std::string& source, const std::string& key, const std::string& what) {
  throw Error(ErrorKind::config, source + ": " + key + ": " + what);
}

}  // namespace

QwenImageConfig QwenImageConfig::from_json(const json& j, const std::string& source) {
  if (!j.is_object())
    throw Error(ErrorKind::config, source + ": expected a JSON object (diffusers transformer/config.json)");
  if (j.contains("_class_name") && j["_class_name"] != "QwenImageTransformer2DModel")
    fail(source, "_class_name", j["_class_name"].dump() + " is not QwenImageTransformer2DModel");
  // The Edit-2511 and layered variants: their extra conditioning is not implemented here.
  for (const char* key : {"guidance_embeds", "zero_cond_t", "use_additional_t_cond", "use_layer3d_rope"}) {
    if (!j.contains(key) || j[key].is_null()) continue;
    if (!j[key].is_boolean()) fail(source, key, "expected true or false, found " + j[key].dump());
    if (j[key].get<bool>())
      fail(source, key, "true is not supported (a Qwen-Image Edit or layered variant); use a text-to-image "
                        "Qwen-Image transformer, whose config has it false");
  }
  QwenImageConfig c;
  c.patch_size = io::config_int(j, "patch_size", c.patch_size, source);
  c.in_channels = io::config_int(j, "in_channels", c.in_channels, source);
  // diffusers: `out_channels or in_channels`, so null means in_channels; absent, the default 16.
  c.out_channels = j.contains("out_channels") && j["out_channels"].is_null()
                       ? c.in_channels
                       : io::config_int(j, "out_channels", c.out_channels, source);
  c.num_layers = io::config_int(j, "num_layers", c.num_layers, source);
  c.attention_head_dim = io::config_int(j, "attention_head_dim", c.attention_head_dim, source);
  c.num_attention_heads = io::config_int(j, "num_attention_heads", c.num_attention_heads, source);
  c.joint_attention_dim = io::config_int(j, "joint_attention_dim", c.joint_attention_dim, source);
  c.axes_dims_rope = io::config_int_list(j, "axes_dims_rope", c.axes_dims_rope, source, "expected a list of three integers");
  if (c.patch_size != 2)
    fail(source, "patch_size", "only 2 is supported (QwenImagePipeline packs 2×2 latents into a token)");
  for (const auto& [key, v] : {std::pair{"in_channels", c.in_channels}, {"out_channels", c.out_channels},
                               {"num_attention_heads", c.num_attention_heads},
                               {"attention_head_dim", c.attention_head_dim},
                               {"joint_attention_dim", c.joint_attention_dim}})
    if (v < 1) fail(source, key, "must be at least 1");
  if (c.num_layers < 0) fail(source, "num_layers", "cannot be negative");
  if (c.axes_dims_rope.size() != 3)
    fail(source, "axes_dims_rope", "expected three axes (frame, row, column), found " +
                                       std::to_string(c.axes_dims_rope.size()));
  check_rope_axes(c.axes_dims_rope, c.attention_head_dim, source);
  return c;
}

QwenImageConfig QwenImageConfig::from_file(const std::string& path) {
  return from_json(
      io::read_json_file(path, "Qwen-Image transformer config (expected diffusers' transformer/config.json)"), path);
}

json QwenImageConfig::to_json() const {
  return {{"_class_name", "QwenImageTransformer2DModel"},
          {"patch_size", patch_size},
          {"in_channels", in_channels},
          {"out_channels", out_channels},
          {"num_layers", num_layers},
          {"attention_head_dim", attention_head_dim},
          {"num_attention_heads", num_attention_heads},
          {"joint_attention_dim", joint_attention_dim},
          {"guidance_embeds", false},
          {"axes_dims_rope", axes_dims_rope}};
}

QwenAttentionImpl::QwenAttentionImpl(std::int64_t dim, std::int64_t heads_, std::int64_t head_dim_)
    : heads(heads_), head_dim(head_dim_) {
  const std::int64_t inner = heads * head_dim;
  // diffusers' Attention registration order (the units list parameters in it).
  norm_q = register_module("norm_q", RmsNorm(head_dim, 1e-6, RmsNormRounding::weight_dtype));
  norm_k = register_module("norm_k", RmsNorm(head_dim, 1e-6, RmsNormRounding::weight_dtype));
  to_q = register_module("to_q", AdaptedLinear(dim, inner));
  to_k = register_module("to_k", AdaptedLinear(dim, inner));
  to_v = register_module("to_v", AdaptedLinear(dim, inner));
  add_k_proj = register_module("add_k_proj", AdaptedLinear(dim, inner));
  add_v_proj = register_module("add_v_proj", AdaptedLinear(dim, inner));
  add_q_proj = register_module("add_q_proj", AdaptedLinear(dim, inner));
  to_out = register_module("to_out", torch::nn::ModuleList(AdaptedLinear(inner, dim)));
  to_add_out = register_module("to_add_out", AdaptedLinear(inner, dim));
  norm_added_q = register_module("norm_added_q", RmsNorm(head_dim, 1e-6, RmsNormRounding::weight_dtype));
  norm_added_k = register_module("norm_added_k", RmsNorm(head_dim, 1e-6, RmsNormRounding::weight_dtype));
}

std::pair<at::Tensor, at::Tensor> QwenAttentionImpl::forward(const at::Tensor& x, const at::Tensor& context,
                                                             const at::Tensor& cos, const at::Tensor& sin,
                                                             const std::vector<at::Tensor>& keys) {
  auto heads_of = [&](const at::Tensor& t) { return t.unflatten(-1, {heads, head_dim}); };
  // [B, L + S, H, head_dim], text first; RoPE over the joint positions (cos/sin rows text first).
  const at::Tensor q = apply_rope(
      at::cat({norm_added_q(heads_of(add_q_proj(context))), norm_q(heads_of(to_q(x)))}, 1), cos, sin);
  const at::Tensor k = apply_rope(
      at::cat({norm_added_k(heads_of(add_k_proj(context))), norm_k(heads_of(to_k(x)))}, 1), cos, sin);
  const at::Tensor v = at::cat({heads_of(add_v_proj(context)), heads_of(to_v(x))}, 1);
  const at::Tensor qf = q.flatten(2), kf = k.flatten(2), vf = v.flatten(2);
  at::Tensor out;
  if (keys.empty()) {
    out = multi_head_attention(qf, kf, vf, heads, {}, attention);
  } else {
    // diffusers masks padded text keys with −inf; leaving them out of the keys is the same softmax,
    // needs no [B, N, N] mask, and keeps every attention path (the fused kernels' included) usable.
    std::vector<at::Tensor> rows;
    rows.reserve(keys.size());
    for (std::int64_t b = 0; b < qf.size(0); ++b) {
      const at::Tensor& keep = keys[static_cast<std::size_t>(b)];
      rows.push_back(multi_head_attention(qf.narrow(0, b, 1), kf.narrow(0, b, 1).index_select(1, keep),
                                          vf.narrow(0, b, 1).index_select(1, keep), heads, {}, attention));
    }
    out = at::cat(rows, 0);
  }
  const std::int64_t text = context.size(1);
  const at::Tensor text_out = out.narrow(1, 0, text), image_out = out.narrow(1, text, out.size(1) - text);
  return {to_out[0]->as<AdaptedLinearImpl>()->forward(image_out.contiguous()), to_add_out(text_out.contiguous())};
}

QwenImageTransformerBlockImpl::QwenImageTransformerBlockImpl(std::int64_t dim, std::int64_t heads,
                                                             std::int64_t head_dim) {
  img_mod = register_module("img_mod", torch::nn::ModuleList(torch::nn::SiLU(), AdaptedLinear(dim, 6 * dim)));
  attn = register_module("attn", QwenAttention(dim, heads, head_dim));
  img_mlp = register_module("img_mlp", GeluFeedForward(dim, 4 * dim));
  txt_mod = register_module("txt_mod", torch::nn::ModuleList(torch::nn::SiLU(), AdaptedLinear(dim, 6 * dim)));
  txt_mlp = register_module("txt_mlp", GeluFeedForward(dim, 4 * dim));
}

std::pair<at::Tensor, at::Tensor> QwenImageTransformerBlockImpl::forward(const at::Tensor& x,
                                                                         const at::Tensor& context,
                                                                         const at::Tensor& temb, const at::Tensor& cos,
                                                                         const at::Tensor& sin,
                                                                         const std::vector<at::Tensor>& keys) {
  // _modulate: shift, scale, gate for the attention, then for the MLP.
  const auto m = img_mod[1]->as<AdaptedLinearImpl>()->forward(at::silu(temb)).chunk(6, 1);
  const auto c = txt_mod[1]->as<AdaptedLinearImpl>()->forward(at::silu(temb)).chunk(6, 1);
  const auto [attn_x, attn_c] =
      attn(ada_modulate(x, m[0], m[1]), ada_modulate(context, c[0], c[1]), cos, sin, keys);
  at::Tensor h = x + m[2].unsqueeze(1) * attn_x;
  at::Tensor e = context + c[2].unsqueeze(1) * attn_c;
  h = h + m[5].unsqueeze(1) * img_mlp(ada_modulate(h, m[3], m[4]));
  e = e + c[5].unsqueeze(1) * txt_mlp(ada_modulate(e, c[3], c[4]));
  if (h.scalar_type() == at::kHalf) {  // as diffusers: keep fp16 finite
    h = h.clamp(-65504, 65504);
    e = e.clamp(-65504, 65504);
  }
  return {h, e};
}

QwenTimestepProjEmbeddingsImpl::QwenTimestepProjEmbeddingsImpl(std::int64_t dim) {
  timestep_embedder = register_module("timestep_embedder", TimestepEmbedding(256, dim));
}

at::Tensor QwenTimestepProjEmbeddingsImpl::forward(const at::Tensor& sigma, at::ScalarType dtype) {
  // σ first in the model's dtype (diffusers' timestep.to(hidden_states.dtype)), then ·1000 exactly.
  return timestep_embedder(timestep_features(sigma.to(dtype).to(at::kDouble) * 1000, 256).to(dtype));
}

at::Tensor qwen_rope_ids(std::int64_t grid_h, std::int64_t grid_w, std::int64_t text_len, const at::Device& device) {
  const auto options = at::TensorOptions().dtype(at::kLong).device(device);
  at::Tensor image = at::zeros({grid_h, grid_w, 3}, options);
  image.select(2, 1).add_(at::arange(grid_h, options).sub(grid_h - grid_h / 2).unsqueeze(1));
  image.select(2, 2).add_(at::arange(grid_w, options).sub(grid_w - grid_w / 2).unsqueeze(0));
  const at::Tensor text =
      at::arange(text_len, options).add(std::max(grid_h / 2, grid_w / 2)).unsqueeze(1).expand({text_len, 3});
  return at::cat({text, image.reshape({grid_h * grid_w, 3})}, 0);
}

std::pair<at::Tensor, at::Tensor> qwen_rope(const at::Tensor& ids, const std::vector<std::int64_t>& axes_dims,
                                            double theta) {
  // rope_params: freqs = 1/θ^(arange(0, d, 2)/d) in float32, angles = position·freqs in float32.
  // The model learnt these float32 angles (6e-5 off the exact ones at position 1000), so they are
  // kept; pow, cos and sin, whose float32 results vary by an ulp between builds, run in float64.
  std::vector<at::Tensor> cos, sin;
  const auto f32 = at::TensorOptions().dtype(at::kFloat).device(ids.device());
  const at::Tensor pos = ids.to(at::kFloat);
  for (std::size_t i = 0; i < axes_dims.size(); ++i) {
    const auto d = axes_dims[i];
    const at::Tensor exponent = at::arange(0, d, 2, f32).div(static_cast<double>(d));
    const at::Tensor freqs = at::reciprocal(at::pow(theta, exponent.to(at::kDouble)).to(at::kFloat));
    const at::Tensor angles = at::outer(pos.select(1, static_cast<std::int64_t>(i)), freqs).to(at::kDouble);
    cos.push_back(angles.cos().repeat_interleave(2, 1));
    sin.push_back(angles.sin().repeat_interleave(2, 1));
  }
  return {at::cat(cos, -1).to(at::kFloat), at::cat(sin, -1).to(at::kFloat)};
}

QwenImageTransformer2DModelImpl::QwenImageTransformer2DModelImpl(QwenImageConfig config, const UnitBuilt& on_unit)
    : config_(std::move(config)) {
  const std::int64_t dim = config_.inner_dim(), heads = config_.num_attention_heads, hd = config_.attention_head_dim;
  // diffusers' registration order.
  time_text_embed = register_module("time_text_embed", QwenTimestepProjEmbeddings(dim));
  txt_norm = register_module("txt_norm", RmsNorm(config_.joint_attention_dim, 1e-6, RmsNormRounding::weight_dtype));
  img_in = register_module("img_in", AdaptedLinear(config_.in_channels, dim));
  txt_in = register_module("txt_in", AdaptedLinear(config_.joint_attention_dim, dim));
  transformer_blocks = register_module("transformer_blocks", torch::nn::ModuleList());
  for (std::int64_t i = 0; i < config_.num_layers; ++i) {
    transformer_blocks->push_back(QwenImageTransformerBlock(dim, heads, hd));
    const std::string name = "transformer_blocks." + std::to_string(i);
    if (on_unit) on_unit(name, name, *transformer_blocks[static_cast<std::size_t>(i)]);
  }
  norm_out = register_module("norm_out", AdaModulation(dim, 2));
  proj_out = register_module("proj_out",
                             AdaptedLinear(dim, config_.patch_size * config_.patch_size * config_.out_channels));
}

at::Tensor QwenImageTransformer2DModelImpl::forward(const at::Tensor& hidden, const at::Tensor& context,
                                                    const at::Tensor& context_mask, const at::Tensor& timestep,
                                                    std::int64_t grid_h, std::int64_t grid_w) {
  const std::string where = "QwenImageTransformer2DModel: ";
  if (hidden.dim() != 3 || hidden.size(1) != grid_h * grid_w || hidden.size(2) != config_.in_channels)
    throw std::invalid_argument(where + "latent tokens " + shape_text(hidden.sizes()) + " are not [B, " + std::to_string(grid_h) +
                                "·" + std::to_string(grid_w) + ", " + std::to_string(config_.in_channels) + "]");
  const std::int64_t batch = hidden.size(0);
  if (context.dim() != 3 || context.size(0) != batch || context.size(2) != config_.joint_attention_dim)
    throw std::invalid_argument(where + "text states " + shape_text(context.sizes()) + " are not [" + std::to_string(batch) +
                                ", L, " + std::to_string(config_.joint_attention_dim) + "]");
  const std::int64_t text = context.size(1), image = hidden.size(1);
  if (context_mask.defined() && (context_mask.dim() != 2 || context_mask.size(0) != batch ||
                                 context_mask.size(1) != text))
    throw std::invalid_argument(where + "text mask " + shape_text(context_mask.sizes()) + " is not [" + std::to_string(batch) +
                                ", " + std::to_string(text) + "]");
  if (timestep.dim() != 1 || timestep.size(0) != batch)
    throw std::invalid_argument(where + "timestep " + shape_text(timestep.sizes()) + " is not [" + std::to_string(batch) + "]");

  // The joint positions each sample may attend to (its valid text tokens, then every image token);
  // none listed when no token is padding. Worked out once for all blocks.
  std::vector<at::Tensor> keys;
  if (context_mask.defined()) {
    const at::Tensor valid = context_mask.ne(0).cpu();
    if (!valid.all().item<bool>()) {
      const at::Tensor image_positions = at::arange(text, text + image, at::TensorOptions().dtype(at::kLong));
      for (std::int64_t b = 0; b < batch; ++b)
        keys.push_back(at::cat({valid[b].nonzero().flatten(), image_positions}).to(hidden.device()));
    }
  }

  const at::Tensor input = enter(hidden);
  at::Tensor h = img_in(input);
  const at::Tensor temb = time_text_embed(timestep, h.scalar_type());
  at::Tensor e = txt_in(txt_norm(context));
  const auto rope = qwen_rope(qwen_rope_ids(grid_h, grid_w, text, h.device()), config_.axes_dims_rope);
  const at::Tensor cos = rope.first, sin = rope.second;
  // Each block is a unit whose one main tensor is the joint sequence (text tokens first), so the
  // stage-3 hooks and checkpointing see one input and one output; `fn` owns what it uses, since
  // with checkpointing it runs again during backward.
  auto unit = [&](std::size_t id, at::Tensor x, CheckpointedFn fn) { return run_unit(id, std::move(x), temb, std::move(fn)); };
  at::Tensor joint = at::cat({e, h}, 1);
  std::size_t id = 1;
  for (const auto& module : *transformer_blocks) {
    auto block = std::dynamic_pointer_cast<QwenImageTransformerBlockImpl>(module);
    joint = unit(id++, joint, [block, text, cos, sin, keys](const at::Tensor& x, const at::Tensor& emb) {
      const auto [img, txt] =
          block->forward(x.narrow(1, text, x.size(1) - text), x.narrow(1, 0, text), emb, cos, sin, keys);
      return at::cat({txt, img}, 1);
    });
  }
  h = joint.narrow(1, text, joint.size(1) - text);
  // AdaLayerNormContinuous: linear(SiLU(temb)) → (scale, shift).
  const auto ss = norm_out(temb.to(h.scalar_type()));
  const at::Tensor out = proj_out(ada_modulate(h, ss[1], ss[0]));
  return leave(out);
}

std::vector<ParamUnit> QwenImageTransformer2DModelImpl::units() const {
  std::vector<ParamUnit> out(1 + transformer_blocks->size());
  out[0].name = "io";
  for (std::size_t i = 0; i < transformer_blocks->size(); ++i)
    out[1 + i].name = "transformer_blocks." + std::to_string(i);
  for (const auto& item : named_parameters(true)) {
    std::size_t unit = 0;
    const std::string& key = item.key();
    const std::string prefix = "transformer_blocks.";
    if (key.compare(0, prefix.size(), prefix) == 0)
      unit = 1 + static_cast<std::size_t>(std::stoll(key.substr(prefix.size())));  // "N.attn…"
    out[unit].parameters.emplace_back(key, item.value());
  }
  return out;
}

}  // namespace zs::models
