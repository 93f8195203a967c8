#include "models/sd/unet_2d_condition.h"

#include <cmath>

#include <torch/nn/functional/activation.h>
#include <torch/nn/functional/upsampling.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/dropout.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>

#include "core/error.h"
#include "models/activation_checkpoint.h"
#include "models/attention.h"
#include "models/diffusers_blocks.h"
#include "models/lora.h"

namespace zs::models {

namespace F = torch::nn::functional;
using torch::nn::Conv2dOptions;
using torch::nn::GroupNorm;
using torch::nn::GroupNormOptions;
using torch::nn::LayerNorm;
using torch::nn::LayerNormOptions;
using torch::nn::LinearOptions;
using torch::nn::ModuleList;

namespace {

AdaptedConv2d conv(int64_t in, int64_t out, int64_t k, int64_t stride = 1) {
  return AdaptedConv2d(Conv2dOptions(in, out, k).stride(stride).padding(k / 2));
}

// ---- ResnetBlock2D: norm1, conv1, time_emb_proj, norm2, conv2, conv_shortcut ----
struct ResnetBlock2DImpl : torch::nn::Module {
  ResnetBlock2DImpl(int64_t in, int64_t out, int64_t temb, int64_t groups, double eps)
      : norm1(register_module("norm1", GroupNorm(GroupNormOptions(groups, in).eps(eps)))),
        conv1(register_module("conv1", conv(in, out, 3))),
        time_emb_proj(register_module("time_emb_proj", AdaptedLinear(temb, out))),
        norm2(register_module("norm2", GroupNorm(GroupNormOptions(groups, out).eps(eps)))),
        conv2(register_module("conv2", conv(out, out, 3))) {
    if (in != out) conv_shortcut = register_module("conv_shortcut", conv(in, out, 1));
  }
  // x [B, in, H, W], temb [B, temb] -> [B, out, H, W]
  at::Tensor forward(const at::Tensor& x, const at::Tensor& temb) {
    at::Tensor h = conv1(at::silu(norm1(x)));
    h = h + time_emb_proj(at::silu(temb)).unsqueeze(-1).unsqueeze(-1);
    h = conv2(at::silu(norm2(h)));
    return (conv_shortcut ? conv_shortcut(x) : x) + h;
  }
  GroupNorm norm1;
  AdaptedConv2d conv1;
  AdaptedLinear time_emb_proj;
  GroupNorm norm2;
  AdaptedConv2d conv2;
  AdaptedConv2d conv_shortcut{nullptr};
  std::size_t unit = 0;
};
TORCH_MODULE(ResnetBlock2D);

// ---- Attention: to_q, to_k, to_v (no bias), to_out.0 (with bias) ----
struct AttentionImpl : torch::nn::Module, AttentionSite {
  AttentionImpl(int64_t query_dim, int64_t context_dim, int64_t heads_, int64_t head_dim) : heads(heads_) {
    const int64_t inner = heads * head_dim;
    to_q = register_module("to_q", AdaptedLinear(LinearOptions(query_dim, inner).bias(false)));
    to_k = register_module("to_k", AdaptedLinear(LinearOptions(context_dim, inner).bias(false)));
    to_v = register_module("to_v", AdaptedLinear(LinearOptions(context_dim, inner).bias(false)));
    to_out_0 = AdaptedLinear(inner, query_dim);
    auto list = ModuleList();
    list->push_back(to_out_0);
    list->push_back(torch::nn::Dropout(0.0));
    register_module("to_out", list);
  }
  // x [B, N, C]; context [B, T, Cc] (self-attention when undefined)
  at::Tensor forward(const at::Tensor& x, const at::Tensor& context = {}) {
    const at::Tensor& ctx = context.defined() ? context : x;
    return to_out_0(multi_head_attention(to_q(x), to_k(ctx), to_v(ctx), heads, {}, attention));
  }
  int64_t heads;
  AdaptedLinear to_q{nullptr}, to_k{nullptr}, to_v{nullptr}, to_out_0{nullptr};
};
TORCH_MODULE(Attention);

// ---- GEGLU feed-forward: ff.net.0.proj, ff.net.2 ----
struct GEGLUImpl : torch::nn::Module {
  GEGLUImpl(int64_t in, int64_t out) : proj(register_module("proj", AdaptedLinear(in, out * 2))) {}
  at::Tensor forward(const at::Tensor& x) {
    const auto parts = proj(x).chunk(2, -1);
    return parts[0] * at::gelu(parts[1]);
  }
  AdaptedLinear proj;
};
TORCH_MODULE(GEGLU);

struct FeedForwardImpl : torch::nn::Module {
  explicit FeedForwardImpl(int64_t dim) : geglu(GEGLU(dim, dim * 4)), out(AdaptedLinear(dim * 4, dim)) {
    auto net = ModuleList();
    net->push_back(geglu);
    net->push_back(torch::nn::Dropout(0.0));
    net->push_back(out);
    register_module("net", net);
  }
  at::Tensor forward(const at::Tensor& x) { return out(geglu(x)); }
  GEGLU geglu;
  AdaptedLinear out;
};
TORCH_MODULE(FeedForward);

// ---- BasicTransformerBlock: norm1 attn1 (self), norm2 attn2 (cross), norm3 ff ----
struct BasicTransformerBlockImpl : torch::nn::Module {
  BasicTransformerBlockImpl(int64_t dim, int64_t heads, int64_t head_dim, int64_t cross_dim)
      : norm1(register_module("norm1", LayerNorm(LayerNormOptions({dim}).eps(1e-5)))),
        attn1(register_module("attn1", Attention(dim, dim, heads, head_dim))),
        norm2(register_module("norm2", LayerNorm(LayerNormOptions({dim}).eps(1e-5)))),
        attn2(register_module("attn2", Attention(dim, cross_dim, heads, head_dim))),
        norm3(register_module("norm3", LayerNorm(LayerNormOptions({dim}).eps(1e-5)))),
        ff(register_module("ff", FeedForward(dim))) {}
  // x [B, N, C], context [B, T, Cc]
  at::Tensor forward(const at::Tensor& x, const at::Tensor& context) {
    at::Tensor h = attn1(norm1(x)) + x;
    h = attn2(norm2(h), context) + h;
    return ff(norm3(h)) + h;
  }
  LayerNorm norm1;
  Attention attn1;
  LayerNorm norm2;
  Attention attn2;
  LayerNorm norm3;
  FeedForward ff;
};
TORCH_MODULE(BasicTransformerBlock);

// ---- Transformer2DModel: norm, proj_in, transformer_blocks, proj_out ----
struct Transformer2DModelImpl : torch::nn::Module {
  Transformer2DModelImpl(int64_t channels, int64_t heads, int64_t depth, int64_t cross_dim, int64_t groups, bool linear)
      : use_linear(linear) {
    const int64_t head_dim = channels / heads;
    const int64_t inner = heads * head_dim;
    norm = register_module("norm", GroupNorm(GroupNormOptions(groups, channels).eps(1e-6)));
    if (linear) {
      proj_in_linear = register_module("proj_in", AdaptedLinear(channels, inner));
    } else {
      proj_in_conv = register_module("proj_in", conv(channels, inner, 1));
    }
    auto list = ModuleList();
    for (int64_t i = 0; i < depth; ++i) {
      blocks.push_back(BasicTransformerBlock(inner, heads, head_dim, cross_dim));
      list->push_back(blocks.back());
    }
    register_module("transformer_blocks", list);
    if (linear) {
      proj_out_linear = register_module("proj_out", AdaptedLinear(inner, channels));
    } else {
      proj_out_conv = register_module("proj_out", conv(inner, channels, 1));
    }
  }
  // (No forward: the UNet runs a transformer as its pieces, forward_piece, and adds x after.)
  // norm and proj_in: x [B, C, H, W] -> tokens [B, H*W, inner]
  at::Tensor project_in(const at::Tensor& x) {
    const auto b = x.size(0), h = x.size(2), w = x.size(3);
    at::Tensor t = norm(x);
    if (use_linear) return proj_in_linear(t.permute({0, 2, 3, 1}).reshape({b, h * w, x.size(1)}));
    t = proj_in_conv(t);
    return t.permute({0, 2, 3, 1}).reshape({b, h * w, t.size(1)});
  }
  // proj_out: tokens [B, H*W, inner] -> [B, channels, H, W] (without the residual)
  at::Tensor project_out(const at::Tensor& t, int64_t h, int64_t w, int64_t channels) {
    const auto b = t.size(0), inner = t.size(2);
    if (use_linear) return proj_out_linear(t).reshape({b, h, w, channels}).permute({0, 3, 1, 2});
    return proj_out_conv(t.reshape({b, h, w, inner}).permute({0, 3, 1, 2}).contiguous());
  }
  // One piece of a split transformer (UNetUnitPlan): the first takes [B, C, H, W], the last
  // returns it without the residual, the ones between pass tokens on.
  at::Tensor forward_piece(const UNetUnitPlan& piece, const at::Tensor& in, const at::Tensor& context, int64_t h,
                           int64_t w, int64_t channels) {
    at::Tensor t = piece.projects_in ? project_in(in) : in;
    for (int64_t k = piece.block_begin; k < piece.block_end; ++k) t = blocks[static_cast<std::size_t>(k)](t, context);
    return piece.projects_out ? project_out(t, h, w, channels) : t;
  }
  bool use_linear;
  GroupNorm norm{nullptr};
  AdaptedConv2d proj_in_conv{nullptr}, proj_out_conv{nullptr};
  AdaptedLinear proj_in_linear{nullptr}, proj_out_linear{nullptr};
  std::vector<BasicTransformerBlock> blocks;
  std::vector<std::pair<std::size_t, UNetUnitPlan>> pieces;  // unit id and plan, one per unit
};
TORCH_MODULE(Transformer2DModel);

// ---- Downsample2D / Upsample2D: a single `conv` ----
struct SamplerImpl : torch::nn::Module {
  SamplerImpl(int64_t channels, bool down_) : down(down_) {
    conv_ = register_module("conv", conv(channels, channels, 3, down ? 2 : 1));
  }
  at::Tensor forward(const at::Tensor& x) {
    if (down) return conv_(x);
    return conv_(F::interpolate(x, F::InterpolateFuncOptions().scale_factor(std::vector<double>{2.0, 2.0})
                                        .mode(torch::kNearest)));
  }
  bool down;
  AdaptedConv2d conv_{nullptr};
  std::size_t unit = 0;
};
TORCH_MODULE(Sampler);

/// One down, mid or up block: resnets[i] each optionally followed by attentions[i], then a sampler.
struct BlockImpl : torch::nn::Module {
  std::vector<ResnetBlock2D> resnets;
  std::vector<Transformer2DModel> attentions;  // empty for blocks without cross-attention
  Sampler sampler{nullptr};
  ModuleList resnet_list = ModuleList(), attention_list = ModuleList();
  BlockImpl() {
    register_module("resnets", resnet_list);
  }
  void add_resnet(ResnetBlock2D r) {
    resnets.push_back(r);
    resnet_list->push_back(r);
  }
  void add_attention(Transformer2DModel t) {
    if (attentions.empty()) register_module("attentions", attention_list);
    attentions.push_back(t);
    attention_list->push_back(t);
  }
  void set_sampler(const char* list_name, Sampler s) {
    sampler = s;
    auto list = ModuleList();
    list->push_back(s);
    register_module(list_name, list);
  }
};
TORCH_MODULE(Block);

CheckpointedFn sampler_fn(Sampler sampler) {
  return [sampler](const at::Tensor& in, const at::Tensor&) mutable { return sampler(in); };
}

// Some of a module's children under their paths ("transformer_blocks.3"): the unit made of
// parts of a transformer, loaded and sharded like any module (the children are shared).
struct UnitViewImpl : torch::nn::Module {
  void add(const std::string& path, std::shared_ptr<torch::nn::Module> child) {
    torch::nn::Module* at = this;
    std::string rest = path;
    for (auto dot = rest.find('.'); dot != std::string::npos; dot = rest.find('.')) {
      const std::string step = rest.substr(0, dot);
      rest = rest.substr(dot + 1);
      auto children = at->named_children();
      if (const auto* found = children.find(step)) at = found->get();
      else at = at->register_module(step, std::make_shared<torch::nn::Module>()).get();
    }
    at->register_module(rest, std::move(child));
  }
};

}  // namespace

namespace detail {
struct UNetParts {
  AdaptedConv2d conv_in{nullptr};
  TimestepEmbedding time_embedding{nullptr};
  TimestepEmbedding add_embedding{nullptr};
  std::vector<Block> down, up;
  Block mid{nullptr};
  GroupNorm conv_norm_out{nullptr};
  AdaptedConv2d conv_out{nullptr};
};
}  // namespace detail

at::Tensor timestep_embedding(const at::Tensor& timesteps, std::int64_t dim, bool flip_sin_to_cos, double freq_shift) {
  const int64_t half = dim / 2;
  const auto opts = at::TensorOptions().dtype(at::kFloat).device(timesteps.device());
  const at::Tensor exponent = at::arange(half, opts).mul(-std::log(10000.0) / (static_cast<double>(half) - freq_shift));
  const at::Tensor args = timesteps.to(at::kFloat).unsqueeze(1) * at::exp(exponent).unsqueeze(0);  // [B, half]
  at::Tensor emb = flip_sin_to_cos ? at::cat({at::cos(args), at::sin(args)}, -1) : at::cat({at::sin(args), at::cos(args)}, -1);
  if (dim % 2 == 1) emb = at::constant_pad_nd(emb, {0, 1});
  return emb;
}

UNet2DConditionModelImpl::UNet2DConditionModelImpl(UNetConfig config, const UnitBuilt& on_unit)
    : config_(std::move(config)), parts_(std::make_unique<detail::UNetParts>()) {
  config_.validate("UNet config");
  const auto& c = config_;
  auto& p = *parts_;
  const int64_t c0 = c.block_out_channels[0];
  const int64_t temb = c0 * 4;
  const int64_t groups = c.norm_num_groups;
  const std::size_t n = c.block_out_channels.size();
  units_.push_back({"io", {}});  // parameters outside every unit

  p.conv_in = register_module("conv_in", conv(c.in_channels, c0, 3));
  p.time_embedding = register_module("time_embedding", TimestepEmbedding(c0, temb));
  if (c.addition_embed_type == "text_time")  // SDXL: pooled text + size/crop ids, added to the time embedding
    p.add_embedding = register_module("add_embedding", TimestepEmbedding(c.projection_class_embeddings_input_dim, temb));

  auto make_resnet = [&](const std::string& prefix, int64_t in, int64_t out) {
    ResnetBlock2D r(in, out, temb, groups, c.norm_eps);
    r->unit = units_.size();
    units_.push_back({prefix, {prefix}});
    if (on_unit) on_unit(prefix, prefix, *r);
    return r;
  };
  // A transformer is built whole at its first piece; each piece is a unit of its own (the
  // whole transformer when it is not split).
  Transformer2DModel building{nullptr};
  auto add_piece = [&](const UNetUnitPlan& u) {
    if (u.projects_in)
      building = Transformer2DModel(u.out_channels, c.num_attention_heads[u.attention_config],
                                    c.transformer_layers_per_block[u.attention_config], c.cross_attention_dim, groups,
                                    c.use_linear_projection);
    const bool whole = u.projects_in && u.projects_out;
    UnitSpec spec{u.name, {}};
    auto view = std::make_shared<UnitViewImpl>();
    auto part = [&](const std::string& path, std::shared_ptr<torch::nn::Module> m) {
      spec.prefixes.push_back(u.module + "." + path);
      view->add(path, std::move(m));
    };
    if (whole) {
      spec.prefixes = {u.module};
    } else {
      if (u.projects_in) {
        part("norm", building->norm.ptr());
        if (building->use_linear) part("proj_in", building->proj_in_linear.ptr());
        else part("proj_in", building->proj_in_conv.ptr());
      }
      for (int64_t k = u.block_begin; k < u.block_end; ++k)
        part("transformer_blocks." + std::to_string(k), building->blocks[static_cast<std::size_t>(k)].ptr());
      if (u.projects_out) {
        if (building->use_linear) part("proj_out", building->proj_out_linear.ptr());
        else part("proj_out", building->proj_out_conv.ptr());
      }
    }
    building->pieces.emplace_back(units_.size(), u);
    units_.push_back(std::move(spec));
    if (on_unit) on_unit(u.name, u.module, whole ? static_cast<torch::nn::Module&>(*building) : *view);
    return u.projects_out;  // the transformer is complete
  };
  auto make_sampler = [&](const std::string& prefix, int64_t ch, bool down) {
    Sampler s(ch, down);
    s->unit = units_.size();
    units_.push_back({prefix, {prefix}});
    if (on_unit) on_unit(prefix, prefix, *s);
    return s;
  };

  // The blocks in diffusers' tree; the units inside them follow UNetConfig::unit_plan().
  auto down_list = ModuleList(), up_list = ModuleList();
  for (std::size_t i = 0; i < n; ++i) {
    p.down.push_back(Block());
    down_list->push_back(p.down.back());
  }
  register_module("down_blocks", down_list);
  if (!c.mid_block_type.empty()) p.mid = register_module("mid_block", Block());
  for (std::size_t i = 0; i < n; ++i) {
    p.up.push_back(Block());
    up_list->push_back(p.up.back());
  }
  register_module("up_blocks", up_list);
  auto block_of = [&](const std::string& name) -> Block& {
    if (name == "mid_block") return p.mid;
    const std::size_t index = std::stoul(name.substr(name.find('.') + 1));
    return name.rfind("down_blocks.", 0) == 0 ? p.down[index] : p.up[index];
  };
  using Kind = UNetUnitPlan::Kind;
  for (const auto& u : c.unit_plan()) {
    Block& block = block_of(u.block);
    switch (u.kind) {
      case Kind::resnet:
        block->add_resnet(make_resnet(u.name, u.in_channels, u.out_channels));
        break;
      case Kind::transformer:
        if (add_piece(u)) block->add_attention(building);
        break;
      case Kind::downsampler:
        block->set_sampler("downsamplers", make_sampler(u.name, u.out_channels, true));
        break;
      case Kind::upsampler:
        block->set_sampler("upsamplers", make_sampler(u.name, u.out_channels, false));
        break;
    }
  }

  p.conv_norm_out = register_module("conv_norm_out", GroupNorm(GroupNormOptions(groups, c0).eps(c.norm_eps)));
  p.conv_out = register_module("conv_out", conv(c0, c.out_channels, 3));
}

UNet2DConditionModelImpl::~UNet2DConditionModelImpl() = default;

at::Tensor UNet2DConditionModelImpl::forward(const at::Tensor& sample, const at::Tensor& timesteps,
                                            const at::Tensor& encoder_hidden_states, const at::Tensor& text_embeds,
                                            const at::Tensor& time_ids) {
  auto& p = *parts_;
  const auto& c = config_;
  const int64_t factor = c.downsample_factor();
  if (sample.dim() != 4 || sample.size(1) != c.in_channels || sample.size(2) % factor != 0 || sample.size(3) % factor != 0)
    throw Error(ErrorKind::config, "UNet input must be [B, " + std::to_string(c.in_channels) +
                                       ", H, W] with H and W divisible by " + std::to_string(factor));
  // Runs one unit (resnet, transformer or sampler) on x between the hooks (DenoiserModule).
  auto unit = [&](std::size_t id, at::Tensor x, const at::Tensor& aux, CheckpointedFn fn) {
    return run_unit(id, std::move(x), aux, std::move(fn));
  };
  // Mixed precision: the weights may be bf16/fp16 while callers pass fp32; inputs are cast to
  // the weights' dtype and the prediction back to the sample's.
  const at::ScalarType dtype = p.conv_in->weight.scalar_type();
  const at::Tensor input = enter(sample).to(dtype);
  const at::Tensor context = encoder_hidden_states.to(dtype);
  at::Tensor t = timesteps.dim() == 0 ? timesteps.reshape({1}) : timesteps;
  t = t.expand({sample.size(0)});
  // As diffusers: the sinusoids are computed in float32, then cast to the model's dtype.
  at::Tensor temb = p.time_embedding(
      timestep_embedding(t, c.block_out_channels[0], c.flip_sin_to_cos, static_cast<double>(c.freq_shift)).to(dtype));
  if (p.add_embedding) {
    if (!text_embeds.defined() || !time_ids.defined())
      throw Error(ErrorKind::config, "this UNet (addition_embed_type text_time, SDXL) needs text_embeds [B, pooled] and "
                                     "time_ids [B, 6] besides the sample, timestep and encoder_hidden_states");
    // Each of the 6 ids (original size, crop top-left, target size) gets its own sinusoids.
    const at::Tensor ids = timestep_embedding(time_ids.flatten(), c.addition_time_embed_dim, c.flip_sin_to_cos,
                                              static_cast<double>(c.freq_shift))
                               .reshape({time_ids.size(0), -1});
    temb = temb + p.add_embedding(at::cat({text_embeds.to(at::kFloat), ids}, -1).to(dtype));
  }
  at::Tensor h = p.conv_in(input);

  auto run_layer = [&](Block& block, std::size_t j, at::Tensor x) {
    auto resnet = block->resnets[j];
    x = unit(resnet->unit, x, temb, [resnet](const at::Tensor& in, const at::Tensor& e) mutable { return resnet(in, e); });
    if (block->attentions.empty()) return x;
    // Each piece its own unit (checkpointed and hooked on its own; one piece when the
    // transformer is not split), the residual after the last.
    auto attention = block->attentions[j];
    const int64_t h = x.size(2), w = x.size(3), channels = x.size(1);
    at::Tensor t = x;
    for (const auto& [id, piece] : attention->pieces)
      t = unit(id, t, context, [attention, piece = piece, h, w, channels](const at::Tensor& in, const at::Tensor& ctx) mutable {
        return attention->forward_piece(piece, in, ctx, h, w, channels);
      });
    return t + x;
  };

  std::vector<at::Tensor> skips{h};
  for (auto& block : p.down) {
    for (std::size_t j = 0; j < block->resnets.size(); ++j) {
      h = run_layer(block, j, h);
      skips.push_back(h);
    }
    if (block->sampler) {
      h = unit(block->sampler->unit, h, at::Tensor(), sampler_fn(block->sampler));
      skips.push_back(h);
    }
  }
  if (p.mid) {
    h = run_layer(p.mid, 0, h);
    auto last = p.mid->resnets[1];
    h = unit(last->unit, h, temb, [last](const at::Tensor& in, const at::Tensor& e) mutable { return last(in, e); });
  }
  for (auto& block : p.up) {
    for (std::size_t j = 0; j < block->resnets.size(); ++j) {
      h = at::cat({h, skips.back()}, 1);
      skips.pop_back();
      h = run_layer(block, j, h);
    }
    if (block->sampler) h = unit(block->sampler->unit, h, at::Tensor(), sampler_fn(block->sampler));
  }
  const at::Tensor out = p.conv_out(at::silu(p.conv_norm_out(h))).to(sample.scalar_type());
  return leave(out);
}

std::vector<ParamUnit> UNet2DConditionModelImpl::units() const {
  std::vector<ParamUnit> units(units_.size());
  for (std::size_t i = 0; i < units.size(); ++i) units[i].name = units_[i].name;
  // Longest matching prefix wins; parameters outside every unit prefix belong to io.
  for (const auto& item : named_parameters(true)) {
    std::size_t best = 0, best_len = 0;
    for (std::size_t i = 1; i < units_.size(); ++i)
      for (const auto& pre : units_[i].prefixes)
        if (item.key().size() > pre.size() && item.key().compare(0, pre.size(), pre) == 0 &&
            item.key()[pre.size()] == '.' && pre.size() > best_len) {
          best = i;
          best_len = pre.size();
        }
    units[best].parameters.emplace_back(item.key(), item.value());
  }
  return units;
}

}  // namespace zs::models
