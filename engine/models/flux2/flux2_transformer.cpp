#include "models/flux2/flux2_transformer.h"

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>
#include <torch/nn/modules/linear.h>

#include "core/error.h"
#include "io/json_file.h"
#include "models/flux/flux_transformer.h"

namespace zs::models {

using nlohmann::json;

namespace {

[[noreturn]] void fail(const std::string& source, const std::string& key, const std::string& what) {
  throw Error(ErrorKind::config, source + ": " + key + ": " + what);
}

AdaptedLinear linear(std::int64_t in, std::int64_t out) {
  return AdaptedLinear(torch::nn::LinearOptions(in, out).bias(false));
}

/// (shift, scale, gate) triple `i` of a shared modulation [B, k·dim].
std::vector<at::Tensor> triple(const at::Tensor& mod, std::int64_t i, std::int64_t dim) {
  return mod.narrow(1, 3 * i * dim, 3 * dim).chunk(3, 1);
}

}  // namespace

std::int64_t Flux2Config::mlp_hidden() const {
  return static_cast<std::int64_t>(static_cast<double>(inner_dim()) * mlp_ratio);
}

Flux2Config Flux2Config::from_json(const json& j, const std::string& source) {
  if (!j.is_object()) throw Error(ErrorKind::config, source + ": expected a JSON object (diffusers transformer/config.json)");
  if (j.contains("_class_name") && j["_class_name"] != "Flux2Transformer2DModel")
    fail(source, "_class_name", j["_class_name"].dump() + " is not Flux2Transformer2DModel");
  Flux2Config c;
  c.patch_size = io::config_int(j, "patch_size", c.patch_size, source);
  c.in_channels = io::config_int(j, "in_channels", c.in_channels, source);
  c.out_channels = io::config_int(j, "out_channels", c.in_channels, source);
  c.num_layers = io::config_int(j, "num_layers", c.num_layers, source);
  c.num_single_layers = io::config_int(j, "num_single_layers", c.num_single_layers, source);
  c.attention_head_dim = io::config_int(j, "attention_head_dim", c.attention_head_dim, source);
  c.num_attention_heads = io::config_int(j, "num_attention_heads", c.num_attention_heads, source);
  c.joint_attention_dim = io::config_int(j, "joint_attention_dim", c.joint_attention_dim, source);
  c.timestep_guidance_channels = io::config_int(j, "timestep_guidance_channels", c.timestep_guidance_channels, source);
  c.mlp_ratio = io::config_number(j, "mlp_ratio", c.mlp_ratio, source);
  c.axes_dims_rope = io::config_int_list(j, "axes_dims_rope", c.axes_dims_rope, source, "expected a list of integers");
  c.rope_theta = io::config_number(j, "rope_theta", c.rope_theta, source);
  c.eps = io::config_number(j, "eps", c.eps, source);
  c.guidance_embeds = io::config_bool(j, "guidance_embeds", c.guidance_embeds, source);
  if (c.patch_size != 1) fail(source, "patch_size", "only 1 is supported (the pipeline patchifies 2×2 latents itself)");
  for (const auto& [key, v] : {std::pair{"in_channels", c.in_channels}, {"num_attention_heads", c.num_attention_heads},
                               {"attention_head_dim", c.attention_head_dim}, {"joint_attention_dim", c.joint_attention_dim},
                               {"out_channels", c.out_channels}, {"timestep_guidance_channels", c.timestep_guidance_channels}})
    if (v < 1) fail(source, key, "must be at least 1");
  if (c.timestep_guidance_channels % 2 != 0) fail(source, "timestep_guidance_channels", "must be even (cos and sin halves)");
  if (c.num_layers < 0 || c.num_single_layers < 0) fail(source, "num_layers", "block counts cannot be negative");
  if (!(c.mlp_ratio > 0) || c.mlp_hidden() < 1) fail(source, "mlp_ratio", "must be positive");
  if (!(c.rope_theta > 0)) fail(source, "rope_theta", "must be positive");
  if (!(c.eps > 0)) fail(source, "eps", "must be positive");
  check_rope_axes(c.axes_dims_rope, c.attention_head_dim, source);
  return c;
}

Flux2Config Flux2Config::from_file(const std::string& path) {
  return from_json(io::read_json_file(path, "FLUX.2 transformer config (expected diffusers' transformer/config.json)"), path);
}

json Flux2Config::to_json() const {
  return {{"_class_name", "Flux2Transformer2DModel"},
          {"patch_size", patch_size},
          {"in_channels", in_channels},
          {"out_channels", out_channels},
          {"num_layers", num_layers},
          {"num_single_layers", num_single_layers},
          {"attention_head_dim", attention_head_dim},
          {"num_attention_heads", num_attention_heads},
          {"joint_attention_dim", joint_attention_dim},
          {"timestep_guidance_channels", timestep_guidance_channels},
          {"mlp_ratio", mlp_ratio},
          {"axes_dims_rope", axes_dims_rope},
          {"rope_theta", rope_theta},
          {"eps", eps},
          {"guidance_embeds", guidance_embeds}};
}

Flux2Config Flux2Config::klein_4b() {
  Flux2Config c;
  c.num_layers = 5;
  c.num_single_layers = 20;
  c.num_attention_heads = 24;
  c.joint_attention_dim = 3 * 2560;
  c.guidance_embeds = false;
  return c;
}

Flux2Config Flux2Config::klein_9b() {
  Flux2Config c;
  c.num_layers = 8;
  c.num_single_layers = 24;
  c.num_attention_heads = 32;
  c.joint_attention_dim = 3 * 4096;
  c.guidance_embeds = false;
  return c;
}

Flux2Config Flux2Config::dev() { return Flux2Config{}; }

Flux2FeedForwardImpl::Flux2FeedForwardImpl(std::int64_t dim, std::int64_t hidden) {
  linear_in = register_module("linear_in", linear(dim, 2 * hidden));
  linear_out = register_module("linear_out", linear(hidden, dim));
}

at::Tensor Flux2FeedForwardImpl::forward(const at::Tensor& x) {
  const auto halves = linear_in(x).chunk(2, -1);  // SwiGLU: the gate is the first half
  return linear_out(at::silu(halves[0]) * halves[1]);
}

Flux2AttentionImpl::Flux2AttentionImpl(std::int64_t dim, std::int64_t heads_, std::int64_t head_dim_, double eps)
    : heads(heads_), head_dim(head_dim_) {
  const std::int64_t inner = heads * head_dim;
  to_q = register_module("to_q", linear(dim, inner));
  to_k = register_module("to_k", linear(dim, inner));
  to_v = register_module("to_v", linear(dim, inner));
  norm_q = register_module("norm_q", RmsNorm(head_dim, eps));
  norm_k = register_module("norm_k", RmsNorm(head_dim, eps));
  to_out = register_module("to_out", torch::nn::ModuleList(linear(inner, dim)));
  norm_added_q = register_module("norm_added_q", RmsNorm(head_dim, eps));
  norm_added_k = register_module("norm_added_k", RmsNorm(head_dim, eps));
  add_q_proj = register_module("add_q_proj", linear(dim, inner));
  add_k_proj = register_module("add_k_proj", linear(dim, inner));
  add_v_proj = register_module("add_v_proj", linear(dim, inner));
  to_add_out = register_module("to_add_out", linear(inner, dim));
}

std::pair<at::Tensor, at::Tensor> Flux2AttentionImpl::forward(const at::Tensor& x, const at::Tensor& context,
                                                              const at::Tensor& cos, const at::Tensor& sin) {
  auto heads_of = [&](const at::Tensor& t) { return t.unflatten(-1, {heads, head_dim}); };
  // The text stream's tokens come first in the joint sequence.
  at::Tensor q = at::cat({norm_added_q(heads_of(add_q_proj(context))), norm_q(heads_of(to_q(x)))}, 1);
  at::Tensor k = at::cat({norm_added_k(heads_of(add_k_proj(context))), norm_k(heads_of(to_k(x)))}, 1);
  const at::Tensor v = at::cat({heads_of(add_v_proj(context)), heads_of(to_v(x))}, 1);
  q = apply_rope(q, cos, sin);
  k = apply_rope(k, cos, sin);
  const at::Tensor out = multi_head_attention(q.flatten(2), k.flatten(2), v.flatten(2), heads, {}, attention);
  const std::int64_t text = context.size(1);
  const at::Tensor text_out = out.narrow(1, 0, text), image_out = out.narrow(1, text, out.size(1) - text);
  return {to_out[0]->as<AdaptedLinearImpl>()->forward(image_out.contiguous()), to_add_out(text_out.contiguous())};
}

Flux2DoubleBlockImpl::Flux2DoubleBlockImpl(std::int64_t dim, std::int64_t heads, std::int64_t head_dim, std::int64_t mlp,
                                           double eps_)
    : eps(eps_) {
  attn = register_module("attn", Flux2Attention(dim, heads, head_dim, eps));
  ff = register_module("ff", Flux2FeedForward(dim, mlp));
  ff_context = register_module("ff_context", Flux2FeedForward(dim, mlp));
}

std::pair<at::Tensor, at::Tensor> Flux2DoubleBlockImpl::forward(const at::Tensor& x, const at::Tensor& context,
                                                                const at::Tensor& mod_img, const at::Tensor& mod_txt,
                                                                const at::Tensor& cos, const at::Tensor& sin) {
  const std::int64_t dim = x.size(-1);
  const auto msa = triple(mod_img, 0, dim), mlp = triple(mod_img, 1, dim);
  const auto c_msa = triple(mod_txt, 0, dim), c_mlp = triple(mod_txt, 1, dim);
  const auto [attn_x, attn_c] =
      attn(ada_modulate(x, msa[0], msa[1], eps), ada_modulate(context, c_msa[0], c_msa[1], eps), cos, sin);
  at::Tensor h = x + msa[2].unsqueeze(1) * attn_x;
  h = h + mlp[2].unsqueeze(1) * ff(ada_modulate(h, mlp[0], mlp[1], eps));
  at::Tensor e = context + c_msa[2].unsqueeze(1) * attn_c;
  e = e + c_mlp[2].unsqueeze(1) * ff_context(ada_modulate(e, c_mlp[0], c_mlp[1], eps));
  if (e.scalar_type() == at::kHalf) e = e.clamp(-65504, 65504);  // as diffusers: the text stream only
  return {h, e};
}

Flux2ParallelAttentionImpl::Flux2ParallelAttentionImpl(std::int64_t dim, std::int64_t heads_, std::int64_t head_dim_,
                                                       std::int64_t mlp_, double eps)
    : heads(heads_), head_dim(head_dim_), mlp(mlp_) {
  const std::int64_t inner = heads * head_dim;
  to_qkv_mlp_proj = register_module("to_qkv_mlp_proj", linear(dim, 3 * inner + 2 * mlp));
  norm_q = register_module("norm_q", RmsNorm(head_dim, eps));
  norm_k = register_module("norm_k", RmsNorm(head_dim, eps));
  to_out = register_module("to_out", linear(inner + mlp, dim));
}

at::Tensor Flux2ParallelAttentionImpl::forward(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  const std::int64_t inner = heads * head_dim;
  const at::Tensor p = to_qkv_mlp_proj(x);
  auto heads_of = [&](const at::Tensor& t) { return t.unflatten(-1, {heads, head_dim}); };
  const at::Tensor q = apply_rope(norm_q(heads_of(p.narrow(-1, 0, inner))), cos, sin);
  const at::Tensor k = apply_rope(norm_k(heads_of(p.narrow(-1, inner, inner))), cos, sin);
  const at::Tensor v = p.narrow(-1, 2 * inner, inner);
  const at::Tensor attended = multi_head_attention(q.flatten(2), k.flatten(2), v, heads, {}, attention);
  const at::Tensor gate = p.narrow(-1, 3 * inner, mlp), up = p.narrow(-1, 3 * inner + mlp, mlp);
  return to_out(at::cat({attended, at::silu(gate) * up}, -1));
}

Flux2SingleBlockImpl::Flux2SingleBlockImpl(std::int64_t dim, std::int64_t heads, std::int64_t head_dim, std::int64_t mlp,
                                           double eps_)
    : eps(eps_) {
  attn = register_module("attn", Flux2ParallelAttention(dim, heads, head_dim, mlp, eps));
}

at::Tensor Flux2SingleBlockImpl::forward(const at::Tensor& x, const at::Tensor& mod, const at::Tensor& cos,
                                         const at::Tensor& sin) {
  const auto m = triple(mod, 0, x.size(-1));
  at::Tensor h = x + m[2].unsqueeze(1) * attn(ada_modulate(x, m[0], m[1], eps), cos, sin);
  if (h.scalar_type() == at::kHalf) h = h.clamp(-65504, 65504);
  return h;
}

Flux2TimeGuidanceEmbedImpl::Flux2TimeGuidanceEmbedImpl(std::int64_t channels_, std::int64_t dim, bool guidance)
    : channels(channels_) {
  timestep_embedder = register_module("timestep_embedder", TimestepEmbedding(channels, dim, /*bias=*/false));
  if (guidance) guidance_embedder = register_module("guidance_embedder", TimestepEmbedding(channels, dim, /*bias=*/false));
}

at::Tensor Flux2TimeGuidanceEmbedImpl::forward(const at::Tensor& t, const at::Tensor& guidance, at::ScalarType dtype) {
  at::Tensor emb = timestep_embedder(timestep_features(t, channels).to(dtype));
  if (guidance_embedder) emb = emb + guidance_embedder(timestep_features(guidance, channels).to(dtype));
  return emb;
}

Flux2Transformer2DModelImpl::Flux2Transformer2DModelImpl(Flux2Config config, const UnitBuilt& on_unit)
    : config_(std::move(config)) {
  const std::int64_t dim = config_.inner_dim(), heads = config_.num_attention_heads, hd = config_.attention_head_dim;
  const std::int64_t mlp = config_.mlp_hidden();
  time_guidance_embed = register_module(
      "time_guidance_embed", Flux2TimeGuidanceEmbed(config_.timestep_guidance_channels, dim, config_.guidance_embeds));
  double_stream_modulation_img = register_module("double_stream_modulation_img", AdaModulation(dim, 6, /*bias=*/false));
  double_stream_modulation_txt = register_module("double_stream_modulation_txt", AdaModulation(dim, 6, /*bias=*/false));
  single_stream_modulation = register_module("single_stream_modulation", AdaModulation(dim, 3, /*bias=*/false));
  x_embedder = register_module("x_embedder", linear(config_.in_channels, dim));
  context_embedder = register_module("context_embedder", linear(config_.joint_attention_dim, dim));
  transformer_blocks = register_module("transformer_blocks", torch::nn::ModuleList());
  for (std::int64_t i = 0; i < config_.num_layers; ++i) {
    transformer_blocks->push_back(Flux2DoubleBlock(dim, heads, hd, mlp, config_.eps));
    const std::string name = "transformer_blocks." + std::to_string(i);
    if (on_unit) on_unit(name, name, *transformer_blocks[static_cast<std::size_t>(i)]);
  }
  single_transformer_blocks = register_module("single_transformer_blocks", torch::nn::ModuleList());
  for (std::int64_t i = 0; i < config_.num_single_layers; ++i) {
    single_transformer_blocks->push_back(Flux2SingleBlock(dim, heads, hd, mlp, config_.eps));
    const std::string name = "single_transformer_blocks." + std::to_string(i);
    if (on_unit) on_unit(name, name, *single_transformer_blocks[static_cast<std::size_t>(i)]);
  }
  norm_out = register_module("norm_out", AdaModulation(dim, 2, /*bias=*/false));
  proj_out = register_module("proj_out", linear(dim, config_.patch_size * config_.patch_size * config_.out_channels));
}

at::Tensor Flux2Transformer2DModelImpl::forward(const at::Tensor& hidden, const at::Tensor& context,
                                                const at::Tensor& timestep, const at::Tensor& img_ids,
                                                const at::Tensor& txt_ids, const at::Tensor& guidance) {
  if (config_.guidance_embeds && !guidance.defined())
    throw std::invalid_argument("Flux2Transformer2DModel: this model embeds guidance ([dev]); pass the guidance value");
  const at::Tensor input = enter(hidden);
  at::Tensor h = x_embedder(input);
  const at::ScalarType dtype = h.scalar_type();
  // σ cast to the model's dtype before the ×1000 (in bf16 it is rounded first), as diffusers.
  const at::Tensor t = timestep.to(dtype) * 1000;
  const at::Tensor g = config_.guidance_embeds ? guidance.to(dtype) * 1000 : at::Tensor();
  const at::Tensor temb = time_guidance_embed(t, g, dtype);
  // The shared modulations, once per forward: every block reads its slice.
  const at::Tensor silu = at::silu(temb);
  const at::Tensor mod_double = at::cat({double_stream_modulation_img->linear(silu), double_stream_modulation_txt->linear(silu)}, 1);
  const at::Tensor mod_single = single_stream_modulation->linear(silu);
  at::Tensor e = context_embedder(context);
  const auto rope = flux_rope(at::cat({txt_ids, img_ids}, 0), config_.axes_dims_rope, config_.rope_theta);
  const at::Tensor cos = rope.first, sin = rope.second;
  // Each block is a unit whose main tensor is the joint sequence (text first), its aux the shared
  // modulation it reads; `fn` owns what it uses (with checkpointing it runs again in backward).
  const std::int64_t text = e.size(1), dim = config_.inner_dim();
  at::Tensor joint = at::cat({e, h}, 1);
  std::size_t id = 1;
  for (const auto& module : *transformer_blocks) {
    auto block = std::dynamic_pointer_cast<Flux2DoubleBlockImpl>(module);
    joint = run_unit(id++, joint, mod_double, [block, text, dim, cos, sin](const at::Tensor& x, const at::Tensor& mod) {
      const auto [img, txt] = block->forward(x.narrow(1, text, x.size(1) - text), x.narrow(1, 0, text),
                                             mod.narrow(1, 0, 6 * dim), mod.narrow(1, 6 * dim, 6 * dim), cos, sin);
      return at::cat({txt, img}, 1);
    });
  }
  for (const auto& module : *single_transformer_blocks) {
    auto block = std::dynamic_pointer_cast<Flux2SingleBlockImpl>(module);
    joint = run_unit(id++, joint, mod_single, [block, cos, sin](const at::Tensor& x, const at::Tensor& mod) {
      return block->forward(x, mod, cos, sin);
    });
  }
  h = joint.narrow(1, text, joint.size(1) - text);
  // AdaLayerNormContinuous: linear(SiLU(temb)) → (scale, shift).
  const auto ss = norm_out(temb.to(h.scalar_type()));
  h = ada_modulate(h, ss[1], ss[0], config_.eps);
  return leave(proj_out(h));
}

std::vector<ParamUnit> Flux2Transformer2DModelImpl::units() const {
  std::vector<std::string> names = {"io"};
  for (std::size_t i = 0; i < transformer_blocks->size(); ++i) names.push_back("transformer_blocks." + std::to_string(i));
  for (std::size_t i = 0; i < single_transformer_blocks->size(); ++i)
    names.push_back("single_transformer_blocks." + std::to_string(i));
  return units_by_prefix(*this, names);
}

at::Tensor flux2_image_ids(std::int64_t h, std::int64_t w, const at::TensorOptions& options) {
  at::Tensor ids = at::zeros({h, w, 4}, options);
  ids.select(2, 1).add_(at::arange(h, options).unsqueeze(1));
  ids.select(2, 2).add_(at::arange(w, options).unsqueeze(0));
  return ids.reshape({h * w, 4});
}

at::Tensor flux2_text_ids(std::int64_t length, const at::TensorOptions& options) {
  at::Tensor ids = at::zeros({length, 4}, options);
  ids.select(1, 3).copy_(at::arange(length, options));
  return ids;
}

}  // namespace zs::models
