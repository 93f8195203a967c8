#include "models/attention.h"

#include <cmath>
#include <limits>

#include <ATen/ATen.h>
#include <torch/version.h>

namespace zs::models {

at::Tensor multi_head_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, std::int64_t heads,
                                const at::Tensor& mask) {
  const auto b = q.size(0), nq = q.size(1), nk = k.size(1), inner = q.size(2);
  const auto d = inner / heads;
#if TORCH_VERSION_MAJOR >= 2
  if (q.is_cuda()) {
    // LibTorch 2.x on CUDA: the fused kernels (flash, memory-efficient), whose memory for
    // backward grows with the tokens, not their square. The CPU keeps the reference path below.
    auto heads_first = [&](const at::Tensor& t, std::int64_t n) { return t.reshape({b, n, heads, d}).transpose(1, 2); };
    const at::Tensor qh = heads_first(q, nq), kh = heads_first(k, nk), vh = heads_first(v, nk);
    const at::Tensor out = mask.defined() ? at::scaled_dot_product_attention(qh, kh, vh, mask)
                                          : at::scaled_dot_product_attention(qh, kh, vh);
    return out.transpose(1, 2).reshape({b, nq, inner});  // [B, H, Nq, d] -> [B, Nq, H·d]
  }
#endif
  // [B, N, H·d] -> [B·H, N, d]
  auto split = [&](const at::Tensor& t, std::int64_t n) {
    return t.reshape({b, n, heads, d}).permute({0, 2, 1, 3}).reshape({b * heads, n, d});
  };
  const at::Tensor qh = split(q, nq), kh = split(k, nk), vh = split(v, nk);
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  at::Tensor scores;
  if (mask.defined()) {
    scores = at::baddbmm(mask.unsqueeze(0).expand({b * heads, nq, nk}), qh, kh.transpose(1, 2), 1.0, scale);
  } else {
    scores = at::bmm(qh, kh.transpose(1, 2)).mul_(scale);  // [B·H, Nq, Nk]
  }
  const at::Tensor probs = at::softmax(scores, -1);
  return at::bmm(probs, vh).reshape({b, heads, nq, d}).permute({0, 2, 1, 3}).reshape({b, nq, inner});
}

at::Tensor causal_mask(std::int64_t n, at::ScalarType dtype, at::Device device) {
  return at::full({n, n}, -std::numeric_limits<float>::infinity(), at::TensorOptions().dtype(dtype).device(device))
      .triu_(1);
}

}  // namespace zs::models
