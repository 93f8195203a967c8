#include "models/diffusers_blocks.h"

#include <cmath>
#include <stdexcept>

#include <ATen/ATen.h>
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/linear.h>

#include "core/error.h"

namespace zs::models {

RmsNormImpl::RmsNormImpl(std::int64_t dim, double eps_, RmsNormRounding rounding_) : eps(eps_), rounding(rounding_) {
  weight = register_parameter("weight", at::ones({dim}));
}

at::Tensor RmsNormImpl::forward(const at::Tensor& x) {
  const at::ScalarType up = at::promote_types(x.scalar_type(), at::kFloat);
  const at::Tensor xf = x.to(up);
  at::Tensor normed = xf * at::rsqrt(xf.pow(2).mean(-1, /*keepdim=*/true) + eps);
  if (rounding == RmsNormRounding::once) return (normed * weight.to(up)).to(x.scalar_type());
  const auto w = weight.scalar_type();
  if (w == at::kHalf || w == at::kBFloat16) normed = normed.to(w);
  return (normed * weight).to(x.scalar_type());
}

AdaModulationImpl::AdaModulationImpl(std::int64_t dim, std::int64_t chunks_, bool bias) : chunks(chunks_) {
  linear = register_module("linear", AdaptedLinear(torch::nn::LinearOptions(dim, chunks * dim).bias(bias)));
}

std::vector<at::Tensor> AdaModulationImpl::forward(const at::Tensor& temb) {
  return linear(at::silu(temb)).chunk(chunks, 1);
}

GeluTanhProjImpl::GeluTanhProjImpl(std::int64_t dim, std::int64_t inner) {
  proj = register_module("proj", AdaptedLinear(dim, inner));
}

at::Tensor GeluTanhProjImpl::forward(const at::Tensor& x) { return at::gelu(proj(x), "tanh"); }

GeluFeedForwardImpl::GeluFeedForwardImpl(std::int64_t dim, std::int64_t inner) {
  gelu = GeluTanhProj(dim, inner);
  out = AdaptedLinear(inner, dim);
  // net.1 is diffusers' dropout (no weights): an empty module keeps the indices of net.2.
  net = register_module("net", torch::nn::ModuleList(gelu, torch::nn::Identity(), out));
}

at::Tensor GeluFeedForwardImpl::forward(const at::Tensor& x) { return out(gelu(x)); }

TimestepEmbeddingImpl::TimestepEmbeddingImpl(std::int64_t in, std::int64_t dim, bool bias) {
  linear_1 = register_module("linear_1", AdaptedLinear(torch::nn::LinearOptions(in, dim).bias(bias)));
  linear_2 = register_module("linear_2", AdaptedLinear(torch::nn::LinearOptions(dim, dim).bias(bias)));
}

at::Tensor TimestepEmbeddingImpl::forward(const at::Tensor& x) { return linear_2(at::silu(linear_1(x))); }

at::Tensor ada_modulate(const at::Tensor& x, const at::Tensor& shift, const at::Tensor& scale, double eps) {
  return at::layer_norm(x, {x.size(-1)}, {}, {}, eps) * (1 + scale.unsqueeze(1)) + shift.unsqueeze(1);
}

at::Tensor apply_rope(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  const at::ScalarType up = at::promote_types(x.scalar_type(), at::kFloat);
  const at::Tensor pairs = x.reshape({x.size(0), x.size(1), x.size(2), -1, 2});
  const at::Tensor real = pairs.select(-1, 0), imag = pairs.select(-1, 1);
  const at::Tensor rotated = at::stack({-imag, real}, -1).flatten(3);
  // [S, D] for every sample, or [B, S, D] per sample; broadcast over the heads.
  const at::Tensor c = (cos.dim() == 3 ? cos : cos.unsqueeze(0)).to(x.device(), up).unsqueeze(2);
  const at::Tensor s = (sin.dim() == 3 ? sin : sin.unsqueeze(0)).to(x.device(), up).unsqueeze(2);
  return (x.to(up) * c + rotated.to(up) * s).to(x.scalar_type());
}

at::Tensor timestep_features(const at::Tensor& t, std::int64_t dim) {
  // In float64, returned as float32 (or float64 for float64 models): the arguments reach the
  // thousands (guidance 3.5 enters as 3500), where float32's exp and sin differ by an ulp between
  // builds and one ulp of a frequency moves an angle by ~2e-4 (tests/fixtures/gen/flux_transformer.py).
  const std::int64_t half = dim / 2;
  const at::Tensor exponent =
      at::arange(0, half, at::TensorOptions().dtype(at::kDouble).device(t.device())) * (-std::log(10000.0) / half);
  const at::Tensor args = t.to(at::kDouble).unsqueeze(1) * at::exp(exponent).unsqueeze(0);
  return at::cat({at::cos(args), at::sin(args)}, -1).to(at::promote_types(t.scalar_type(), at::kFloat));
}

at::Tensor pack_latents_2x2(const at::Tensor& latents) {
  const auto b = latents.size(0), c = latents.size(1), h = latents.size(2), w = latents.size(3);
  if (h % 2 != 0 || w % 2 != 0) throw std::invalid_argument("pack_latents_2x2: latent sides must be even");
  return latents.view({b, c, h / 2, 2, w / 2, 2}).permute({0, 2, 4, 1, 3, 5}).reshape({b, (h / 2) * (w / 2), c * 4});
}

at::Tensor unpack_latents_2x2(const at::Tensor& tokens, std::int64_t height, std::int64_t width) {
  const auto b = tokens.size(0), c = tokens.size(2) / 4;
  return tokens.view({b, height / 2, width / 2, c, 2, 2}).permute({0, 3, 1, 4, 2, 5}).reshape({b, c, height, width});
}

void check_rope_axes(const std::vector<std::int64_t>& axes, std::int64_t head_dim, const std::string& source,
                     const std::string& axes_key, const std::string& head_dim_key) {
  std::int64_t rope = 0;
  for (const auto d : axes) {
    if (d < 2 || d % 2 != 0) throw Error(ErrorKind::config, source + ": " + axes_key + ": every axis needs an even number of dimensions");
    rope += d;
  }
  if (rope != head_dim)
    throw Error(ErrorKind::config, source + ": " + axes_key + ": sums to " + std::to_string(rope) + " but " + head_dim_key +
                                       " is " + std::to_string(head_dim) + "; they must be equal");
}

}  // namespace zs::models
