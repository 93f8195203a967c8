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

BlockQuantized quantize_blockwise(const at::Tensor& a, const at::Tensor& map, std::int64_t block) {
  // bitsandbytes' CPU kernel (csrc/cpu_ops.cpp quantize_cpu, common.cpp quantize_block): x / absmax,
  // the map value at or below it (its first entry taken as −1, as the kernel sets it; among equal
  // values the last), and the next one only where strictly closer.
  const at::Tensor flat = a.reshape({-1}).to(at::kFloat).contiguous();
  const std::int64_t n = flat.numel(), blocks = (n + block - 1) / block;
  BlockQuantized q;
  q.absmax = at::empty({blocks}, at::kFloat);
  q.codes = at::empty({n}, at::kByte);
  const float* x = flat.data_ptr<float>();
  std::vector<float> code(map.data_ptr<float>(), map.data_ptr<float>() + map.numel());
  code[0] = -1.0f;
  const auto levels = static_cast<std::int64_t>(code.size());
  float* absmax = q.absmax.data_ptr<float>();
  std::uint8_t* out = q.codes.data_ptr<std::uint8_t>();
  for (std::int64_t b = 0; b < blocks; ++b) {
    const std::int64_t begin = b * block, end = std::min(n, begin + block);
    float m = 0;
    for (std::int64_t k = begin; k < end; ++k) m = std::max(m, std::abs(x[k]));
    absmax[b] = m;
    for (std::int64_t k = begin; k < end; ++k) {
      const float s = x[k] / m;
      std::int64_t j = std::upper_bound(code.begin(), code.end(), s) - code.begin() - 1;
      j = std::max<std::int64_t>(j, 0);
      if (j < levels - 1 && std::abs(s - code[static_cast<std::size_t>(j + 1)]) < std::abs(s - code[static_cast<std::size_t>(j)]))
        ++j;
      out[k] = static_cast<std::uint8_t>(j);
    }
  }
  q.codes = q.codes.view(a.sizes());
  return q;
}

at::Tensor dequantize_blockwise(const BlockQuantized& q, const at::Tensor& map, std::int64_t block) {
  const at::Tensor codes = q.codes.reshape({-1}).to(at::kLong);
  const std::int64_t n = codes.numel();
  const at::Tensor scale = q.absmax.repeat_interleave(block).narrow(0, 0, n);
  return (map.index_select(0, codes) * scale).view(q.codes.sizes());
}

}  // namespace zs::zero
