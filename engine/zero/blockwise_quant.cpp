#include "zero/blockwise_quant.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include <ATen/ATen.h>

namespace zs::zero {

at::Tensor dynamic_map(bool is_signed) {
  // create_dynamic_map(signed, max_exponent_bits=7, total_bits=8), step by step: linspace and the
  // midpoints in float32, each scaled by 10^e as a float32 product (a Python float times a float32
  // tensor), listed, sorted.
  constexpr int kExponentBits = 7, kNonSign = 7;
  std::vector<float> data;
  auto add = [&](std::int64_t items, int i) {
    // torch.linspace(0.1, 1, items, float32) as PyTorch 2.x computes it (its CPU kernel: a float32
    // step, start + step·i up to halfway and end − step·(n − 1 − i) after, each with one rounding —
    // fused multiply-add; LibTorch 1.13's at::linspace differs from it in the last bit).
    const float start = 0.1f, end = 1.0f, step = (end - start) / static_cast<float>(items - 1);
    std::vector<float> b(static_cast<std::size_t>(items));
    for (std::int64_t k = 0; k < items; ++k)
      b[static_cast<std::size_t>(k)] =
          k < items / 2 ? static_cast<float>(double(start) + double(step) * static_cast<double>(k))
                        : static_cast<float>(double(end) - double(step) * static_cast<double>(items - 1 - k));
    const at::Tensor means = ((at::tensor(b, at::kFloat).narrow(0, 0, items - 1) +
                               at::tensor(b, at::kFloat).narrow(0, 1, items - 1)) / 2.0);
    // PyTorch multiplies a float32 tensor by a Python float in float32: the scale rounds first.
    const float scale = static_cast<float>(std::pow(10.0, -(kExponentBits - 1) + i));
    const float* m = means.data_ptr<float>();
    for (std::int64_t k = 0; k < items - 1; ++k) data.push_back(scale * m[k]);
    if (is_signed)
      for (std::int64_t k = 0; k < items - 1; ++k) data.push_back(-scale * m[k]);
  };
  const std::int64_t additional = (1 << (kNonSign - kExponentBits)) - 1;  // 0 here
  int i = 0;
  for (; i < kExponentBits; ++i)
    add(is_signed ? (std::int64_t{1} << (i + kNonSign - kExponentBits)) + 1
                  : (std::int64_t{1} << (i + kNonSign - kExponentBits + 1)) + 1,
        i);
  if (additional > 0) add(additional + 1, i - 1);
  data.push_back(0.0f);
  data.push_back(1.0f);
  while (data.size() < 256) data.push_back(0.0f);
  std::sort(data.begin(), data.end());
  return at::tensor(data, at::kFloat);
}

namespace {

/// Blocks an 8-bit step dequantizes at once (4 M elements: 16 MB a moment in float32).
constexpr std::int64_t kStepBlocks = 16384;

/// `x` [n] as [blocks, block], zero-padded (zeros change no block's absmax).
at::Tensor as_blocks(const at::Tensor& x, std::int64_t block) {
  const std::int64_t n = x.numel(), blocks = (n + block - 1) / block, pad = blocks * block - n;
  return (pad > 0 ? at::cat({x, at::zeros({pad}, x.options())}) : x).view({blocks, block});
}

}  // namespace

void quantize_into(const at::Tensor& x, const at::Tensor& map, at::Tensor codes, at::Tensor absmax,
                   const at::Tensor& given_absmax) {
  // bitsandbytes' CPU kernel (csrc/cpu_ops.cpp quantize_cpu, common.cpp quantize_block): x / absmax,
  // the map value at or below it (its first entry taken as −1, as the kernel sets it; among equal
  // values the last), and the next one only where strictly closer.
  const std::int64_t n = x.numel();
  const at::Tensor v = as_blocks(x.reshape({-1}).to(at::kFloat), kQuantBlock);
  const at::Tensor am = given_absmax.defined() ? given_absmax.to(v.options()) : v.abs().amax(-1);
  const at::Tensor denom = at::where(am > 0, am, at::ones_like(am)).unsqueeze(-1);
  const at::Tensor s = (v / denom).reshape({-1}).narrow(0, 0, n).contiguous();
  at::Tensor code = map.to(v.options()).clone();
  code.narrow(0, 0, 1).fill_(-1.0);
  const std::int64_t last = code.numel() - 1;
  at::Tensor j = (at::searchsorted(code, s, /*out_int32=*/false, /*right=*/true) - 1).clamp_(0, last);
  const at::Tensor next = (j + 1).clamp_(0, last);
  const at::Tensor closer = (s - code.index_select(0, next)).abs() < (s - code.index_select(0, j)).abs();
  j = at::where(closer, next, j);
  codes.copy_(j.view(codes.sizes()));
  absmax.copy_(am);
}

at::Tensor dequantize_flat(const at::Tensor& codes, const at::Tensor& absmax, const at::Tensor& map) {
  const std::int64_t n = codes.numel();
  const at::Tensor values = as_blocks(map.to(absmax.device()).index_select(0, codes.reshape({-1}).to(at::kLong)), kQuantBlock);
  return (values * absmax.unsqueeze(-1)).reshape({-1}).narrow(0, 0, n);
}

BlockQuantized quantize_blockwise(const at::Tensor& a, const at::Tensor& map) {
  BlockQuantized q;
  q.codes = at::empty(a.sizes(), a.options().dtype(at::kByte));
  q.absmax = at::empty({(a.numel() + kQuantBlock - 1) / kQuantBlock}, a.options().dtype(at::kFloat));
  quantize_into(a.reshape({-1}), map, q.codes, q.absmax);
  return q;
}

at::Tensor dequantize_blockwise(const BlockQuantized& q, const at::Tensor& map) {
  return dequantize_flat(q.codes, q.absmax, map).view(q.codes.sizes());
}

void adamw8bit_update(at::Tensor p, const at::Tensor& g, at::Tensor m_codes, at::Tensor m_absmax, at::Tensor v_codes,
                      at::Tensor v_absmax, const at::Tensor& signed_map, const at::Tensor& unsigned_map,
                      const AdamHyper& h) {
  const std::int64_t n = p.numel();
  const double c1 = 1.0 - std::pow(h.beta1, static_cast<double>(h.step));
  const double c2 = std::sqrt(1.0 - std::pow(h.beta2, static_cast<double>(h.step)));
  for (std::int64_t b0 = 0; b0 * kQuantBlock < n; b0 += kStepBlocks) {
    const std::int64_t e0 = b0 * kQuantBlock, m = std::min(kStepBlocks * kQuantBlock, n - e0);
    const std::int64_t blocks = (m + kQuantBlock - 1) / kQuantBlock;
    at::Tensor mc = m_codes.narrow(0, e0, m), vc = v_codes.narrow(0, e0, m);
    at::Tensor ma = m_absmax.narrow(0, b0, blocks), va = v_absmax.narrow(0, b0, blocks);
    at::Tensor exp_avg = dequantize_flat(mc, ma, signed_map), exp_avg_sq = dequantize_flat(vc, va, unsigned_map);
    const at::Tensor grad = g.narrow(0, e0, m).to(at::kFloat);
    exp_avg.mul_(h.beta1).add_(grad, 1.0 - h.beta1);
    exp_avg_sq.mul_(h.beta2).addcmul_(grad, grad, 1.0 - h.beta2);
    const at::Tensor denom = (exp_avg_sq.sqrt() / c2).add_(h.eps);
    at::Tensor w = p.narrow(0, e0, m);
    if (h.weight_decay > 0) w.mul_(1.0 - h.lr * h.weight_decay);
    w.addcdiv_(exp_avg.to(w.scalar_type()), denom.to(w.scalar_type()), -h.lr / c1);
    quantize_into(exp_avg, signed_map, mc, ma);
    quantize_into(exp_avg_sq, unsigned_map, vc, va);
  }
}

}  // namespace zs::zero
