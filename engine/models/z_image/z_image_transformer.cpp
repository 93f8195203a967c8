#include "models/z_image/z_image_transformer.h"

#include <algorithm>
#include <functional>
#include <map>
#include <stdexcept>

#include <ATen/ATen.h>
#include <c10/util/StringUtil.h>
#include <nlohmann/json.hpp>
#include <torch/nn/modules/activation.h>

#include "core/error.h"
#include "io/json_file.h"
#include "models/activation_checkpoint.h"

namespace zs::models {

using nlohmann::json;

namespace {

/// SEQ_MULTI_OF: image and caption tokens are each padded to a multiple of this.
constexpr std::int64_t kSeqMultiple = 32;

[[noreturn]] void fail(const std::string& source, const std::string& key, const std::string& what) {
  throw Error(ErrorKind::config, source + ": " + key + ": " + what);
}

std::int64_t padded(std::int64_t n) { return n + (kSeqMultiple - n % kSeqMultiple) % kSeqMultiple; }

/// A container module (diffusers' ModuleDict / Sequential levels that hold no parameters themselves).
std::shared_ptr<torch::nn::Module> level(torch::nn::Module& parent, const std::string& name) {
  return parent.register_module(name, std::make_shared<torch::nn::Module>());
}

/// Pads each sample's rows of `parts` (each [n_i, dim]) with zeros to the longest: [B, max n, dim].
at::Tensor pad_batch(const std::vector<at::Tensor>& parts) {
  std::int64_t longest = 0;
  for (const auto& p : parts) longest = std::max(longest, p.size(0));
  std::vector<at::Tensor> rows;
  for (const auto& p : parts)
    rows.push_back(p.size(0) == longest ? p : at::cat({p, at::zeros({longest - p.size(0), p.size(1)}, p.options())}));
  return at::stack(rows);
}

}  // namespace

ZImageConfig ZImageConfig::from_json(const json& j, const std::string& source) {
  if (!j.is_object())
    throw Error(ErrorKind::config, source + ": expected a JSON object (diffusers transformer/config.json)");
  if (j.contains("_class_name") && j["_class_name"] != "ZImageTransformer2DModel")
    fail(source, "_class_name", j["_class_name"].dump() + " is not ZImageTransformer2DModel");
  if (j.contains("siglip_feat_dim") && !j["siglip_feat_dim"].is_null())
    fail(source, "siglip_feat_dim", "is set (Z-Image Omni, with image conditioning), which is not supported; use a "
                                    "text-to-image Z-Image transformer");
  for (const char* key : {"all_patch_size", "all_f_patch_size"}) {
    const std::vector<std::int64_t> want = std::string(key) == "all_patch_size" ? std::vector<std::int64_t>{2}
                                                                                 : std::vector<std::int64_t>{1};
    if (io::config_int_list(j, key, want, source, "expected a list of integers") != want)
      fail(source, key, "only [" + std::to_string(want[0]) + "] is supported (the released Z-Image models')");
  }
  ZImageConfig c;
  c.in_channels = io::config_int(j, "in_channels", c.in_channels, source);
  c.dim = io::config_int(j, "dim", c.dim, source);
  c.n_layers = io::config_int(j, "n_layers", c.n_layers, source);
  c.n_refiner_layers = io::config_int(j, "n_refiner_layers", c.n_refiner_layers, source);
  c.n_heads = io::config_int(j, "n_heads", c.n_heads, source);
  const std::int64_t kv_heads = io::config_int(j, "n_kv_heads", c.n_heads, source);
  c.norm_eps = io::config_number(j, "norm_eps", c.norm_eps, source);
  if (j.contains("qk_norm") && !j["qk_norm"].is_null()) {
    if (!j["qk_norm"].is_boolean()) fail(source, "qk_norm", "expected true or false, found " + j["qk_norm"].dump());
    c.qk_norm = j["qk_norm"].get<bool>();
  }
  c.cap_feat_dim = io::config_int(j, "cap_feat_dim", c.cap_feat_dim, source);
  c.rope_theta = io::config_number(j, "rope_theta", c.rope_theta, source);
  c.t_scale = io::config_number(j, "t_scale", c.t_scale, source);
  c.axes_dims = io::config_int_list(j, "axes_dims", c.axes_dims, source, "expected a list of three integers");
  c.axes_lens = io::config_int_list(j, "axes_lens", c.axes_lens, source, "expected a list of three integers");
  for (const auto& [key, v] : {std::pair{"in_channels", c.in_channels}, {"dim", c.dim}, {"n_heads", c.n_heads},
                               {"cap_feat_dim", c.cap_feat_dim}})
    if (v < 1) fail(source, key, "must be at least 1");
  for (const auto& [key, v] : {std::pair{"n_layers", c.n_layers}, {"n_refiner_layers", c.n_refiner_layers}})
    if (v < 0) fail(source, key, "cannot be negative");
  if (kv_heads != c.n_heads)
    fail(source, "n_kv_heads", std::to_string(kv_heads) + " differs from n_heads " + std::to_string(c.n_heads) +
                                   " (ZImageTransformer2DModel's attention has as many key/value heads as query heads)");
  if (c.dim % c.n_heads != 0)
    fail(source, "n_heads", std::to_string(c.n_heads) + " does not divide dim " + std::to_string(c.dim));
  if (!(c.norm_eps > 0)) fail(source, "norm_eps", "must be positive");
  if (!(c.rope_theta > 0)) fail(source, "rope_theta", "must be positive");
  if (c.axes_dims.size() != 3 || c.axes_lens.size() != 3)
    fail(source, c.axes_dims.size() != 3 ? "axes_dims" : "axes_lens", "expected three axes (frame, row, column)");
  for (const auto n : c.axes_lens)
    if (n < 1) fail(source, "axes_lens", "each length must be at least 1");
  check_rope_axes(c.axes_dims, c.head_dim(), source, "axes_dims", "the head size (dim / n_heads)");
  return c;
}

ZImageConfig ZImageConfig::from_file(const std::string& path) {
  return from_json(io::read_json_file(path, "Z-Image transformer config (expected diffusers' transformer/config.json)"),
                   path);
}

json ZImageConfig::to_json() const {
  return {{"_class_name", "ZImageTransformer2DModel"},
          {"all_patch_size", {2}},
          {"all_f_patch_size", {1}},
          {"in_channels", in_channels},
          {"dim", dim},
          {"n_layers", n_layers},
          {"n_refiner_layers", n_refiner_layers},
          {"n_heads", n_heads},
          {"n_kv_heads", n_heads},
          {"norm_eps", norm_eps},
          {"qk_norm", qk_norm},
          {"cap_feat_dim", cap_feat_dim},
          {"rope_theta", rope_theta},
          {"t_scale", t_scale},
          {"axes_dims", axes_dims},
          {"axes_lens", axes_lens}};
}

ZImageAttentionImpl::ZImageAttentionImpl(std::int64_t dim, std::int64_t heads_, bool qk_norm)
    : heads(heads_), head_dim(dim / heads_) {
  // diffusers' Attention registration order: norms, then projections.
  if (qk_norm) {
    norm_q = register_module("norm_q", RmsNorm(head_dim, 1e-5, RmsNormRounding::weight_dtype));
    norm_k = register_module("norm_k", RmsNorm(head_dim, 1e-5, RmsNormRounding::weight_dtype));
  }
  to_q = register_module("to_q", AdaptedLinear(torch::nn::LinearOptions(dim, dim).bias(false)));
  to_k = register_module("to_k", AdaptedLinear(torch::nn::LinearOptions(dim, dim).bias(false)));
  to_v = register_module("to_v", AdaptedLinear(torch::nn::LinearOptions(dim, dim).bias(false)));
  to_out = register_module("to_out", torch::nn::ModuleList(AdaptedLinear(torch::nn::LinearOptions(dim, dim).bias(false))));
}

at::Tensor ZImageAttentionImpl::forward(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin,
                                        const SequenceLengths& lengths) {
  auto heads_of = [&](const at::Tensor& t) { return t.unflatten(-1, {heads, head_dim}); };
  at::Tensor q = heads_of(to_q(x)), k = heads_of(to_k(x));
  const at::Tensor v = heads_of(to_v(x)).flatten(2);
  if (norm_q) {
    q = norm_q(q);
    k = norm_k(k);
  }
  const at::Tensor qf = apply_rope(q, cos, sin).flatten(2), kf = apply_rope(k, cos, sin).flatten(2);
  at::Tensor out;
  if (lengths.empty()) {
    out = multi_head_attention(qf, kf, v, heads, {}, attention);
  } else {
    // diffusers masks each sample's batch padding as keys; attending over its own tokens only is
    // the same softmax (the padded rows' outputs are never read).
    std::vector<at::Tensor> rows;
    for (std::int64_t b = 0; b < qf.size(0); ++b) {
      const std::int64_t n = lengths[static_cast<std::size_t>(b)];
      rows.push_back(multi_head_attention(qf.narrow(0, b, 1), kf.narrow(0, b, 1).narrow(1, 0, n),
                                          v.narrow(0, b, 1).narrow(1, 0, n), heads, {}, attention));
    }
    out = at::cat(rows, 0);
  }
  return to_out[0]->as<AdaptedLinearImpl>()->forward(out);
}

ZImageFeedForwardImpl::ZImageFeedForwardImpl(std::int64_t dim, std::int64_t hidden) {
  w1 = register_module("w1", AdaptedLinear(torch::nn::LinearOptions(dim, hidden).bias(false)));
  w2 = register_module("w2", AdaptedLinear(torch::nn::LinearOptions(hidden, dim).bias(false)));
  w3 = register_module("w3", AdaptedLinear(torch::nn::LinearOptions(dim, hidden).bias(false)));
}

at::Tensor ZImageFeedForwardImpl::forward(const at::Tensor& x) { return w2(at::silu(w1(x)) * w3(x)); }

ZImageTransformerBlockImpl::ZImageTransformerBlockImpl(const ZImageConfig& c, bool modulation) {
  attention = register_module("attention", ZImageAttention(c.dim, c.n_heads, c.qk_norm));
  // int(dim / 3 * 8) in Python's float arithmetic.
  feed_forward = register_module("feed_forward", ZImageFeedForward(c.dim, static_cast<std::int64_t>(
                                                                              static_cast<double>(c.dim) / 3 * 8)));
  attention_norm1 = register_module("attention_norm1", RmsNorm(c.dim, c.norm_eps, RmsNormRounding::weight_dtype));
  ffn_norm1 = register_module("ffn_norm1", RmsNorm(c.dim, c.norm_eps, RmsNormRounding::weight_dtype));
  attention_norm2 = register_module("attention_norm2", RmsNorm(c.dim, c.norm_eps, RmsNormRounding::weight_dtype));
  ffn_norm2 = register_module("ffn_norm2", RmsNorm(c.dim, c.norm_eps, RmsNormRounding::weight_dtype));
  if (modulation)
    adaLN_modulation = register_module("adaLN_modulation", torch::nn::ModuleList(AdaptedLinear(c.adaln_dim(), 4 * c.dim)));
}

at::Tensor ZImageTransformerBlockImpl::forward(const at::Tensor& x, const at::Tensor& temb, const at::Tensor& cos,
                                               const at::Tensor& sin, const SequenceLengths& lengths) {
  if (!adaLN_modulation) {
    at::Tensor h = x + attention_norm2(attention(attention_norm1(x), cos, sin, lengths));
    return h + ffn_norm2(feed_forward(ffn_norm1(h)));
  }
  const auto m = adaLN_modulation[0]->as<AdaptedLinearImpl>()->forward(temb).unsqueeze(1).chunk(4, 2);
  const at::Tensor scale_msa = 1.0 + m[0], gate_msa = m[1].tanh(), scale_mlp = 1.0 + m[2], gate_mlp = m[3].tanh();
  at::Tensor h = x + gate_msa * attention_norm2(attention(attention_norm1(x) * scale_msa, cos, sin, lengths));
  return h + gate_mlp * ffn_norm2(feed_forward(ffn_norm1(h) * scale_mlp));
}

std::pair<at::Tensor, at::Tensor> z_image_rope(const at::Tensor& ids, const std::vector<std::int64_t>& axes_dims,
                                               double theta) {
  // precompute_freqs_cis: freqs 1/θ^(arange(0, d, 2)/d) and the angles position·freqs in float64,
  // rounded to float32 (what the model learnt); polar's cos and sin, an ulp apart between builds
  // in float32, in float64 here.
  std::vector<at::Tensor> cos, sin;
  const auto f64 = at::TensorOptions().dtype(at::kDouble).device(ids.device());
  const at::Tensor pos = ids.to(at::kDouble);
  for (std::size_t i = 0; i < axes_dims.size(); ++i) {
    const auto d = axes_dims[i];
    const at::Tensor freqs = at::reciprocal(at::pow(theta, at::arange(0, d, 2, f64).div(static_cast<double>(d))));
    const at::Tensor angles = at::outer(pos.select(1, static_cast<std::int64_t>(i)), freqs).to(at::kFloat).to(at::kDouble);
    cos.push_back(angles.cos().repeat_interleave(2, 1));
    sin.push_back(angles.sin().repeat_interleave(2, 1));
  }
  return {at::cat(cos, -1).to(at::kFloat), at::cat(sin, -1).to(at::kFloat)};
}

ZImageTransformer2DModelImpl::ZImageTransformer2DModelImpl(ZImageConfig config, const UnitBuilt& on_unit)
    : config_(std::move(config)) {
  const ZImageConfig& c = config_;
  const std::int64_t patch_features = 2 * 2 * c.in_channels;
  // diffusers' registration order.
  x_embedder = level(*this, "all_x_embedder")->register_module("2-1", AdaptedLinear(patch_features, c.dim));
  {
    const auto final_layer = level(*level(*this, "all_final_layer"), "2-1");
    final_linear = final_layer->register_module("linear", AdaptedLinear(c.dim, patch_features));
    const auto modulation = final_layer->register_module("adaLN_modulation", torch::nn::ModuleList());
    modulation->push_back(torch::nn::SiLU());
    final_modulation = AdaptedLinear(c.adaln_dim(), c.dim);
    modulation->push_back(final_modulation);
  }
  auto blocks = [&](const std::string& name, std::int64_t n, bool modulation) {
    torch::nn::ModuleList list(register_module(name, torch::nn::ModuleList()));
    for (std::int64_t i = 0; i < n; ++i) {
      list->push_back(ZImageTransformerBlock(c, modulation));
      const std::string unit = name + "." + std::to_string(i);
      if (on_unit) on_unit(unit, unit, *list[static_cast<std::size_t>(i)]);
    }
    return list;
  };
  noise_refiner = blocks("noise_refiner", c.n_refiner_layers, true);
  context_refiner = blocks("context_refiner", c.n_refiner_layers, false);
  {
    const auto mlp = level(*this, "t_embedder")->register_module("mlp", torch::nn::ModuleList());
    t_mlp_0 = AdaptedLinear(256, 1024);
    t_mlp_2 = AdaptedLinear(1024, c.adaln_dim());
    mlp->push_back(t_mlp_0);
    mlp->push_back(torch::nn::SiLU());
    mlp->push_back(t_mlp_2);
  }
  {
    const auto cap = register_module("cap_embedder", torch::nn::ModuleList());
    cap_norm = RmsNorm(c.cap_feat_dim, c.norm_eps, RmsNormRounding::weight_dtype);
    cap_linear = AdaptedLinear(c.cap_feat_dim, c.dim);
    cap->push_back(cap_norm);
    cap->push_back(cap_linear);
  }
  x_pad_token = register_parameter("x_pad_token", at::zeros({1, c.dim}));
  cap_pad_token = register_parameter("cap_pad_token", at::zeros({1, c.dim}));
  layers = blocks("layers", c.n_layers, true);
}

at::Tensor ZImageTransformer2DModelImpl::forward(const at::Tensor& latents, const at::Tensor& context,
                                                 const at::Tensor& context_mask, const at::Tensor& t) {
  const ZImageConfig& c = config_;
  const std::string where = "ZImageTransformer2DModel: ";
  if (latents.dim() != 4 || latents.size(1) != c.in_channels || latents.size(2) % 2 != 0 || latents.size(3) % 2 != 0)
    throw std::invalid_argument(where + "latents " + c10::str(latents.sizes()) + " are not [B, " + std::to_string(c.in_channels) +
                                ", H, W] with H and W even");
  const std::int64_t batch = latents.size(0), height = latents.size(2), width = latents.size(3);
  if (context.dim() != 3 || context.size(0) != batch || context.size(2) != c.cap_feat_dim)
    throw std::invalid_argument(where + "caption features " + c10::str(context.sizes()) + " are not [" + std::to_string(batch) +
                                ", L, " + std::to_string(c.cap_feat_dim) + "]");
  if (context_mask.defined() &&
      (context_mask.dim() != 2 || context_mask.size(0) != batch || context_mask.size(1) != context.size(1)))
    throw std::invalid_argument(where + "caption mask " + c10::str(context_mask.sizes()) + " is not [" + std::to_string(batch) +
                                ", " + std::to_string(context.size(1)) + "]");
  if (t.dim() != 1 || t.size(0) != batch)
    throw std::invalid_argument(where + "t " + c10::str(t.sizes()) + " is not [" + std::to_string(batch) + "]");
  // Each sample's caption tokens (the mask's ones come first, as the pipeline keeps them).
  std::vector<std::int64_t> caption_tokens(static_cast<std::size_t>(batch), context.size(1));
  if (context_mask.defined()) {
    const at::Tensor counts = context_mask.ne(0).sum(1).cpu();
    for (std::int64_t b = 0; b < batch; ++b) caption_tokens[static_cast<std::size_t>(b)] = counts[b].item<std::int64_t>();
  }
  for (const auto n : caption_tokens)
    if (n < 1) throw std::invalid_argument(where + "a caption has no tokens (the pipeline always has the chat template's)");

  const at::Tensor input = enter(latents);
  const at::ScalarType dtype = input.scalar_type();  // the compute dtype, the weights' (as diffusers' weight_dtype)
  const auto device = input.device();
  const std::int64_t grid_h = height / 2, grid_w = width / 2, image_tokens = grid_h * grid_w;
  const std::int64_t image_len = padded(image_tokens);

  // The time embedding: t·t_scale in float32 (as the pipeline's float32 t), features in float64.
  const at::Tensor features = timestep_features((t.to(at::kFloat) * c.t_scale).to(at::kDouble), 256);
  const at::Tensor temb = t_mlp_2(at::silu(t_mlp_0(features.to(dtype))));

  // Image tokens: 2×2 patches, features (patch row, patch column, channel); padding rows become x_pad_token.
  const at::Tensor patches = input.view({batch, c.in_channels, grid_h, 2, grid_w, 2})
                                 .permute({0, 2, 4, 3, 5, 1})
                                 .reshape({batch, image_tokens, 4 * c.in_channels});
  at::Tensor x = x_embedder(patches);
  if (image_len > image_tokens)
    x = at::cat({x, x_pad_token.to(x.scalar_type()).expand({batch, image_len - image_tokens, c.dim})}, 1);

  // Positions: caption token j at (1 + j, 0, 0); image token (r, c) at (caption length + 1, r, c);
  // image padding at (0, 0, 0). The rotations depend on a sample's padded caption length only:
  // worked out once per length (a batch of equal lengths, the usual case, needs one).
  const auto long_opts = at::TensorOptions().dtype(at::kLong);
  std::vector<std::int64_t> caption_len;
  for (const auto n : caption_tokens) caption_len.push_back(padded(n));
  const std::int64_t longest = *std::max_element(caption_len.begin(), caption_len.end());
  const bool uniform = std::all_of(caption_len.begin(), caption_len.end(), [&](std::int64_t n) { return n == longest; });
  std::pair<at::Tensor, at::Tensor> cap_rope;  // for the longest caption; a shorter one's is its prefix
  {
    at::Tensor ids = at::zeros({longest, 3}, long_opts);
    ids.select(1, 0).copy_(at::arange(1, longest + 1, long_opts));
    cap_rope = z_image_rope(ids, c.axes_dims, c.rope_theta);
  }
  std::map<std::int64_t, std::pair<at::Tensor, at::Tensor>> image_rope;  // by caption length
  for (const auto len : caption_len) {
    if (image_rope.count(len)) continue;
    at::Tensor ids = at::zeros({image_len, 3}, long_opts);
    at::Tensor real = ids.narrow(0, 0, image_tokens);
    real.select(1, 0).fill_(len + 1);
    real.select(1, 1).copy_(at::arange(grid_h, long_opts).repeat_interleave(grid_w));
    real.select(1, 2).copy_(at::arange(grid_w, long_opts).repeat({grid_h}));
    image_rope[len] = z_image_rope(ids, c.axes_dims, c.rope_theta);
  }
  // Per-sample rotations [B, S, D] (zeros past a sample's length), or [S, D] for all when uniform.
  auto stacked = [&](const std::function<at::Tensor(std::int64_t len)>& of) {
    if (uniform) return of(longest).to(device);
    std::vector<at::Tensor> rows;
    for (const auto len : caption_len) rows.push_back(of(len));
    return pad_batch(rows).to(device);
  };
  const at::Tensor xc = stacked([&](std::int64_t len) { return image_rope[len].first; });
  const at::Tensor xs = stacked([&](std::int64_t len) { return image_rope[len].second; });

  auto unit = [&](std::size_t id, at::Tensor h, const at::Tensor& emb, CheckpointedFn fn) {
    return run_unit(id, std::move(h), emb, std::move(fn));
  };
  std::size_t id = 1;
  for (const auto& module : *noise_refiner) {
    auto block = std::dynamic_pointer_cast<ZImageTransformerBlockImpl>(module);
    x = unit(id++, x, temb, [block, xc, xs](const at::Tensor& h, const at::Tensor& emb) {
      return block->forward(h, emb, xc, xs, {});
    });
  }

  // Captions: RMS norm and projection of every token at once; each sample's padding to 32 (and the
  // batch's, to its longest) becomes cap_pad_token, as the pipeline's last-token copies are replaced.
  const at::Tensor embedded = cap_linear(cap_norm(context.to(dtype)));  // [B, L, dim]
  at::Tensor cap;
  if (uniform && context.size(1) == caption_tokens.front() &&
      std::all_of(caption_tokens.begin(), caption_tokens.end(), [&](std::int64_t n) { return n == caption_tokens.front(); })) {
    cap = longest > context.size(1)
              ? at::cat({embedded, cap_pad_token.to(embedded.scalar_type()).expand({batch, longest - context.size(1), c.dim})}, 1)
              : embedded;
  } else {
    std::vector<at::Tensor> rows;
    for (std::int64_t b = 0; b < batch; ++b) {
      const std::int64_t n = caption_tokens[static_cast<std::size_t>(b)], len = caption_len[static_cast<std::size_t>(b)];
      at::Tensor e = embedded[b].narrow(0, 0, n);
      if (len > n) e = at::cat({e, cap_pad_token.to(e.scalar_type()).expand({len - n, c.dim})});
      rows.push_back(e);
    }
    cap = pad_batch(rows);
  }
  const SequenceLengths cap_lengths = uniform ? SequenceLengths{} : SequenceLengths(caption_len.begin(), caption_len.end());
  const at::Tensor cc = stacked([&](std::int64_t len) { return cap_rope.first.narrow(0, 0, len); });
  const at::Tensor cs = stacked([&](std::int64_t len) { return cap_rope.second.narrow(0, 0, len); });
  for (const auto& module : *context_refiner) {
    auto block = std::dynamic_pointer_cast<ZImageTransformerBlockImpl>(module);
    cap = unit(id++, cap, at::Tensor(), [block, cc, cs, cap_lengths](const at::Tensor& h, const at::Tensor&) {
      return block->forward(h, at::Tensor(), cc, cs, cap_lengths);
    });
  }

  // [image, caption] per sample, the batch padded to its longest.
  at::Tensor joint, jc, js;
  SequenceLengths joint_lengths;
  if (uniform) {
    joint = at::cat({x, cap}, 1);
    jc = at::cat({xc, cc}, 0);
    js = at::cat({xs, cs}, 0);
  } else {
    std::vector<at::Tensor> rows, rows_cos, rows_sin;
    for (std::int64_t b = 0; b < batch; ++b) {
      const std::int64_t len = caption_len[static_cast<std::size_t>(b)];
      rows.push_back(at::cat({x[b], cap[b].narrow(0, 0, len)}));
      rows_cos.push_back(at::cat({image_rope[len].first, cap_rope.first.narrow(0, 0, len)}));
      rows_sin.push_back(at::cat({image_rope[len].second, cap_rope.second.narrow(0, 0, len)}));
      joint_lengths.push_back(image_len + len);
    }
    joint = pad_batch(rows);
    jc = pad_batch(rows_cos).to(device);
    js = pad_batch(rows_sin).to(device);
  }
  for (const auto& module : *layers) {
    auto block = std::dynamic_pointer_cast<ZImageTransformerBlockImpl>(module);
    joint = unit(id++, joint, temb, [block, jc, js, joint_lengths](const at::Tensor& h, const at::Tensor& emb) {
      return block->forward(h, emb, jc, js, joint_lengths);
    });
  }

  // FinalLayer: LayerNorm without affine (eps 1e-6) · (1 + Linear(SiLU(temb))), then the linear,
  // on the image tokens; unpatchified back to [B, C, H, W].
  const at::Tensor image = joint.narrow(1, 0, image_tokens);
  const at::Tensor scale = 1.0 + final_modulation(at::silu(temb)).unsqueeze(1);
  const at::Tensor normed = at::layer_norm(image, {c.dim}, {}, {}, 1e-6) * scale;
  const at::Tensor out = final_linear(normed)
                             .view({batch, grid_h, grid_w, 2, 2, c.in_channels})
                             .permute({0, 5, 1, 3, 2, 4})
                             .reshape({batch, c.in_channels, height, width});
  return leave(out);
}

std::vector<ParamUnit> ZImageTransformer2DModelImpl::units() const {
  const std::size_t refiners = noise_refiner->size();
  std::vector<ParamUnit> out(1 + 2 * refiners + layers->size());
  out[0].name = "io";
  for (std::size_t i = 0; i < refiners; ++i) {
    out[1 + i].name = "noise_refiner." + std::to_string(i);
    out[1 + refiners + i].name = "context_refiner." + std::to_string(i);
  }
  for (std::size_t i = 0; i < layers->size(); ++i) out[1 + 2 * refiners + i].name = "layers." + std::to_string(i);
  auto block_of = [](const std::string& key, const std::string& prefix) -> std::int64_t {
    if (key.compare(0, prefix.size(), prefix) != 0) return -1;
    return std::stoll(key.substr(prefix.size()));  // "N.attention…"
  };
  for (const auto& item : named_parameters(true)) {
    const std::string& key = item.key();
    std::size_t unit = 0;
    if (const auto n = block_of(key, "noise_refiner."); n >= 0) unit = 1 + static_cast<std::size_t>(n);
    else if (const auto m = block_of(key, "context_refiner."); m >= 0) unit = 1 + refiners + static_cast<std::size_t>(m);
    else if (const auto l = block_of(key, "layers."); l >= 0) unit = 1 + 2 * refiners + static_cast<std::size_t>(l);
    out[unit].parameters.emplace_back(key, item.value());
  }
  return out;
}

}  // namespace zs::models
