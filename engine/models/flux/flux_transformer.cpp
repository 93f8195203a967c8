#include "models/flux/flux_transformer.h"

#include <cmath>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/linear.h>

#include "core/error.h"
#include "io/json_file.h"
#include "models/activation_checkpoint.h"

namespace zs::models {

using nlohmann::json;

namespace {

[[noreturn]] void fail(const std::string& source, const std::string& key, const std::string& what) {
  throw Error(ErrorKind::config, source + ": " + key + ": " + what);
}

}  // namespace

FluxConfig FluxConfig::from_json(const json& j, const std::string& source) {
  if (!j.is_object()) throw Error(ErrorKind::config, source + ": expected a JSON object (diffusers transformer/config.json)");
  if (j.contains("_class_name") && j["_class_name"] != "FluxTransformer2DModel")
    fail(source, "_class_name", j["_class_name"].dump() + " is not FluxTransformer2DModel");
  FluxConfig c;
  c.patch_size = io::config_int(j, "patch_size", c.patch_size, source);
  c.in_channels = io::config_int(j, "in_channels", c.in_channels, source);
  c.out_channels = io::config_int(j, "out_channels", c.in_channels, source);
  c.num_layers = io::config_int(j, "num_layers", c.num_layers, source);
  c.num_single_layers = io::config_int(j, "num_single_layers", c.num_single_layers, source);
  c.attention_head_dim = io::config_int(j, "attention_head_dim", c.attention_head_dim, source);
  c.num_attention_heads = io::config_int(j, "num_attention_heads", c.num_attention_heads, source);
  c.joint_attention_dim = io::config_int(j, "joint_attention_dim", c.joint_attention_dim, source);
  c.pooled_projection_dim = io::config_int(j, "pooled_projection_dim", c.pooled_projection_dim, source);
  if (j.contains("guidance_embeds") && !j["guidance_embeds"].is_null()) {
    if (!j["guidance_embeds"].is_boolean()) fail(source, "guidance_embeds", "expected true or false");
    c.guidance_embeds = j["guidance_embeds"].get<bool>();
  }
  c.axes_dims_rope = io::config_int_list(j, "axes_dims_rope", c.axes_dims_rope, source, "expected a list of integers");
  if (c.patch_size != 1) fail(source, "patch_size", "only 1 is supported (Flux packs 2×2 latents into tokens itself)");
  for (const auto& [key, v] : {std::pair{"in_channels", c.in_channels}, {"num_attention_heads", c.num_attention_heads},
                               {"attention_head_dim", c.attention_head_dim}, {"joint_attention_dim", c.joint_attention_dim},
                               {"pooled_projection_dim", c.pooled_projection_dim}, {"out_channels", c.out_channels}})
    if (v < 1) fail(source, key, "must be at least 1");
  if (c.num_layers < 0 || c.num_single_layers < 0) fail(source, "num_layers", "block counts cannot be negative");
  check_rope_axes(c.axes_dims_rope, c.attention_head_dim, source);
  return c;
}

FluxConfig FluxConfig::from_file(const std::string& path) {
  return from_json(io::read_json_file(path, "Flux transformer config (expected diffusers' transformer/config.json)"), path);
}

json FluxConfig::to_json() const {
  return {{"_class_name", "FluxTransformer2DModel"},
          {"patch_size", patch_size},
          {"in_channels", in_channels},
          {"out_channels", out_channels},
          {"num_layers", num_layers},
          {"num_single_layers", num_single_layers},
          {"attention_head_dim", attention_head_dim},
          {"num_attention_heads", num_attention_heads},
          {"joint_attention_dim", joint_attention_dim},
          {"pooled_projection_dim", pooled_projection_dim},
          {"guidance_embeds", guidance_embeds},
          {"axes_dims_rope", axes_dims_rope}};
}

FluxAttentionImpl::FluxAttentionImpl(std::int64_t dim, std::int64_t heads_, std::int64_t head_dim_, bool joint)
    : heads(heads_), head_dim(head_dim_) {
  const std::int64_t inner = heads * head_dim;
  norm_q = register_module("norm_q", RmsNorm(head_dim, 1e-6));
  norm_k = register_module("norm_k", RmsNorm(head_dim, 1e-6));
  to_q = register_module("to_q", AdaptedLinear(dim, inner));
  to_k = register_module("to_k", AdaptedLinear(dim, inner));
  to_v = register_module("to_v", AdaptedLinear(dim, inner));
  if (joint) {
    to_out = register_module("to_out", torch::nn::ModuleList(AdaptedLinear(inner, dim)));
    norm_added_q = register_module("norm_added_q", RmsNorm(head_dim, 1e-6));
    norm_added_k = register_module("norm_added_k", RmsNorm(head_dim, 1e-6));
    add_q_proj = register_module("add_q_proj", AdaptedLinear(dim, inner));
    add_k_proj = register_module("add_k_proj", AdaptedLinear(dim, inner));
    add_v_proj = register_module("add_v_proj", AdaptedLinear(dim, inner));
    to_add_out = register_module("to_add_out", AdaptedLinear(inner, dim));
  }
}

std::pair<at::Tensor, at::Tensor> FluxAttentionImpl::forward(const at::Tensor& x, const at::Tensor& context,
                                                             const at::Tensor& cos, const at::Tensor& sin) {
  auto heads_of = [&](const at::Tensor& t) { return t.unflatten(-1, {heads, head_dim}); };
  at::Tensor q = norm_q(heads_of(to_q(x))), k = norm_k(heads_of(to_k(x))), v = heads_of(to_v(x));
  const bool joint = context.defined();
  if (joint) {
    // The text stream's tokens come first in the joint sequence.
    q = at::cat({norm_added_q(heads_of(add_q_proj(context))), q}, 1);
    k = at::cat({norm_added_k(heads_of(add_k_proj(context))), k}, 1);
    v = at::cat({heads_of(add_v_proj(context)), v}, 1);
  }
  q = apply_rope(q, cos, sin);
  k = apply_rope(k, cos, sin);
  const at::Tensor out = multi_head_attention(q.flatten(2), k.flatten(2), v.flatten(2), heads, {}, attention);
  if (!joint) return {out, {}};
  const std::int64_t text = context.size(1);
  const at::Tensor text_out = out.narrow(1, 0, text), image_out = out.narrow(1, text, out.size(1) - text);
  return {to_out[0]->as<AdaptedLinearImpl>()->forward(image_out.contiguous()), to_add_out(text_out.contiguous())};
}

FluxDoubleBlockImpl::FluxDoubleBlockImpl(std::int64_t dim, std::int64_t heads, std::int64_t head_dim) {
  norm1 = register_module("norm1", AdaModulation(dim, 6));
  norm1_context = register_module("norm1_context", AdaModulation(dim, 6));
  attn = register_module("attn", FluxAttention(dim, heads, head_dim, /*joint=*/true));
  ff = register_module("ff", GeluFeedForward(dim, 4 * dim));
  ff_context = register_module("ff_context", GeluFeedForward(dim, 4 * dim));
}

std::pair<at::Tensor, at::Tensor> FluxDoubleBlockImpl::forward(const at::Tensor& x, const at::Tensor& context,
                                                               const at::Tensor& temb, const at::Tensor& cos,
                                                               const at::Tensor& sin) {
  // AdaLayerNormZero: shift_msa, scale_msa, gate_msa, shift_mlp, scale_mlp, gate_mlp.
  const auto m = norm1(temb), c = norm1_context(temb);
  const auto [attn_x, attn_c] = attn(ada_modulate(x, m[0], m[1]), ada_modulate(context, c[0], c[1]), cos, sin);
  at::Tensor h = x + m[2].unsqueeze(1) * attn_x;
  h = h + m[5].unsqueeze(1) * ff(ada_modulate(h, m[3], m[4]));
  at::Tensor e = context + c[2].unsqueeze(1) * attn_c;
  e = e + c[5].unsqueeze(1) * ff_context(ada_modulate(e, c[3], c[4]));
  if (h.scalar_type() == at::kHalf) {  // as diffusers: keep fp16 finite
    h = h.clamp(-65504, 65504);
    e = e.clamp(-65504, 65504);
  }
  return {h, e};
}

FluxSingleBlockImpl::FluxSingleBlockImpl(std::int64_t dim, std::int64_t heads, std::int64_t head_dim, std::int64_t mlp) {
  norm = register_module("norm", AdaModulation(dim, 3));
  proj_mlp = register_module("proj_mlp", AdaptedLinear(dim, mlp));
  proj_out = register_module("proj_out", AdaptedLinear(dim + mlp, dim));
  attn = register_module("attn", FluxAttention(dim, heads, head_dim, /*joint=*/false));
}

at::Tensor FluxSingleBlockImpl::forward(const at::Tensor& x, const at::Tensor& temb, const at::Tensor& cos,
                                        const at::Tensor& sin) {
  const auto m = norm(temb);  // shift, scale, gate
  const at::Tensor normed = ada_modulate(x, m[0], m[1]);
  const at::Tensor mlp = at::gelu(proj_mlp(normed), "tanh");
  const at::Tensor attn_out = attn->forward(normed, at::Tensor(), cos, sin).first;
  at::Tensor h = x + m[2].unsqueeze(1) * proj_out(at::cat({attn_out, mlp}, 2));
  if (h.scalar_type() == at::kHalf) h = h.clamp(-65504, 65504);
  return h;
}

FluxTimeTextEmbedImpl::FluxTimeTextEmbedImpl(std::int64_t dim, std::int64_t pooled_dim, bool guidance) {
  timestep_embedder = register_module("timestep_embedder", TimestepEmbedding(256, dim));
  if (guidance) guidance_embedder = register_module("guidance_embedder", TimestepEmbedding(256, dim));
  text_embedder = register_module("text_embedder", TimestepEmbedding(pooled_dim, dim));
}

at::Tensor FluxTimeTextEmbedImpl::forward(const at::Tensor& t, const at::Tensor& guidance, const at::Tensor& pooled) {
  at::Tensor emb = timestep_embedder(timestep_features(t, 256).to(pooled.scalar_type()));
  if (guidance_embedder) emb = emb + guidance_embedder(timestep_features(guidance, 256).to(pooled.scalar_type()));
  return emb + text_embedder(pooled);
}

FluxTransformer2DModelImpl::FluxTransformer2DModelImpl(FluxConfig config, const UnitBuilt& on_unit)
    : config_(std::move(config)) {
  const std::int64_t dim = config_.inner_dim(), heads = config_.num_attention_heads, hd = config_.attention_head_dim;
  time_text_embed = register_module("time_text_embed",
                                    FluxTimeTextEmbed(dim, config_.pooled_projection_dim, config_.guidance_embeds));
  context_embedder = register_module("context_embedder", AdaptedLinear(config_.joint_attention_dim, dim));
  x_embedder = register_module("x_embedder", AdaptedLinear(config_.in_channels, dim));
  transformer_blocks = register_module("transformer_blocks", torch::nn::ModuleList());
  for (std::int64_t i = 0; i < config_.num_layers; ++i) {
    transformer_blocks->push_back(FluxDoubleBlock(dim, heads, hd));
    const std::string name = "transformer_blocks." + std::to_string(i);
    if (on_unit) on_unit(name, name, *transformer_blocks[static_cast<std::size_t>(i)]);
  }
  single_transformer_blocks = register_module("single_transformer_blocks", torch::nn::ModuleList());
  for (std::int64_t i = 0; i < config_.num_single_layers; ++i) {
    single_transformer_blocks->push_back(FluxSingleBlock(dim, heads, hd, 4 * dim));
    const std::string name = "single_transformer_blocks." + std::to_string(i);
    if (on_unit) on_unit(name, name, *single_transformer_blocks[static_cast<std::size_t>(i)]);
  }
  norm_out = register_module("norm_out", AdaModulation(dim, 2));
  proj_out = register_module("proj_out",
                             AdaptedLinear(dim, config_.patch_size * config_.patch_size * config_.out_channels));
}

at::Tensor FluxTransformer2DModelImpl::forward(const at::Tensor& hidden, const at::Tensor& context,
                                               const at::Tensor& pooled, const at::Tensor& timestep,
                                               const at::Tensor& img_ids, const at::Tensor& txt_ids,
                                               const at::Tensor& guidance) {
  if (config_.guidance_embeds && !guidance.defined())
    throw std::invalid_argument("FluxTransformer2DModel: this model embeds guidance; pass the guidance value");
  const at::Tensor input = enter(hidden);
  at::Tensor h = x_embedder(input);
  const at::Tensor t = timestep.to(h.scalar_type()) * 1000;
  const at::Tensor g = config_.guidance_embeds ? guidance.to(h.scalar_type()) * 1000 : at::Tensor();
  const at::Tensor temb = time_text_embed(t, g, pooled);
  at::Tensor e = context_embedder(context);
  const auto rope = flux_rope(at::cat({txt_ids, img_ids}, 0), config_.axes_dims_rope);
  const at::Tensor cos = rope.first, sin = rope.second;
  // Each block is a unit whose one main tensor is the joint sequence (text tokens first), so the
  // stage-3 hooks and checkpointing see one input and one output; `fn` owns what it uses, since
  // with checkpointing it runs again during backward.
  auto unit = [&](std::size_t id, at::Tensor x, CheckpointedFn fn) { return run_unit(id, std::move(x), temb, std::move(fn)); };
  const std::int64_t text = e.size(1);
  at::Tensor joint = at::cat({e, h}, 1);
  std::size_t id = 1;
  for (const auto& module : *transformer_blocks) {
    auto block = std::dynamic_pointer_cast<FluxDoubleBlockImpl>(module);
    joint = unit(id++, joint, [block, text, cos, sin](const at::Tensor& x, const at::Tensor& emb) {
      const auto [img, txt] = block->forward(x.narrow(1, text, x.size(1) - text), x.narrow(1, 0, text), emb, cos, sin);
      return at::cat({txt, img}, 1);
    });
  }
  for (const auto& module : *single_transformer_blocks) {
    auto block = std::dynamic_pointer_cast<FluxSingleBlockImpl>(module);
    joint = unit(id++, joint, [block, cos, sin](const at::Tensor& x, const at::Tensor& emb) {
      return block->forward(x, emb, cos, sin);
    });
  }
  h = joint.narrow(1, text, joint.size(1) - text);
  // AdaLayerNormContinuous: linear(SiLU(temb)) → (scale, shift).
  const auto ss = norm_out(temb.to(h.scalar_type()));
  h = ada_modulate(h, ss[1], ss[0]);
  const at::Tensor out = proj_out(h);
  return leave(out);
}

std::vector<ParamUnit> FluxTransformer2DModelImpl::units() const {
  std::vector<std::string> names = {"io"};
  for (std::size_t i = 0; i < transformer_blocks->size(); ++i) names.push_back("transformer_blocks." + std::to_string(i));
  for (std::size_t i = 0; i < single_transformer_blocks->size(); ++i)
    names.push_back("single_transformer_blocks." + std::to_string(i));
  return units_by_prefix(*this, names);
}

std::pair<at::Tensor, at::Tensor> flux_rope(const at::Tensor& ids, const std::vector<std::int64_t>& axes_dims,
                                            double theta) {
  std::vector<at::Tensor> cos, sin;
  const at::Tensor pos = ids.to(at::kDouble);
  for (std::size_t i = 0; i < axes_dims.size(); ++i) {
    const auto d = axes_dims[i];
    const at::Tensor freqs =
        1.0 / at::pow(theta, at::arange(0, d, 2, at::TensorOptions().dtype(at::kDouble).device(ids.device())) /
                                 static_cast<double>(d));
    const at::Tensor angles = at::outer(pos.select(1, static_cast<std::int64_t>(i)), freqs);
    cos.push_back(angles.cos().repeat_interleave(2, 1));
    sin.push_back(angles.sin().repeat_interleave(2, 1));
  }
  return {at::cat(cos, -1).to(at::kFloat), at::cat(sin, -1).to(at::kFloat)};
}

at::Tensor flux_image_ids(std::int64_t h, std::int64_t w, const at::TensorOptions& options) {
  at::Tensor ids = at::zeros({h, w, 3}, options);
  ids.select(2, 1).add_(at::arange(h, options).unsqueeze(1));
  ids.select(2, 2).add_(at::arange(w, options).unsqueeze(0));
  return ids.reshape({h * w, 3});
}

}  // namespace zs::models
