#include "quant/base_quant.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>

#include <ATen/ATen.h>
#include <c10/util/accumulate.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include "core/error.h"
#include "core/parallel.h"

namespace zs::quant {

namespace {

std::uint32_t bits_of(float x) {
  std::uint32_t b;
  std::memcpy(&b, &x, sizeof b);
  return b;
}

/// bitsandbytes' NF4 values (backends/utils.py _NF4_QUANT_TABLE; Dettmers et al., QLoRA): the
/// quantiles of a standard normal scaled to [−1, 1], with an exact 0.
constexpr std::array<float, 16> kNf4 = {-1.0f,
                                        -0.6961928009986877f,
                                        -0.5250730514526367f,
                                        -0.39491748809814453f,
                                        -0.28444138169288635f,
                                        -0.18477343022823334f,
                                        -0.09105003625154495f,
                                        0.0f,
                                        0.07958029955625534f,
                                        0.16093020141124725f,
                                        0.24611230194568634f,
                                        0.33791524171829224f,
                                        0.44070982933044434f,
                                        0.5626170039176941f,
                                        0.7229568362236023f,
                                        1.0f};

/// The 15 boundaries between neighbouring NF4 values, each their float32 mean.
std::array<float, 15> nf4_bounds() {
  std::array<float, 15> b{};
  for (std::size_t i = 0; i < b.size(); ++i) b[i] = (kNf4[i] + kNf4[i + 1]) / 2.0f;
  return b;
}

/// torch.bucketize(x, bounds, right=False): how many bounds lie strictly below x — counted
/// without branches (3x faster to load a base than a search, the same codes).
std::uint8_t nf4_code(float x, const std::array<float, 15>& bounds) {
  std::uint8_t code = 0;
  for (const float bound : bounds) code = static_cast<std::uint8_t>(code + (bound < x ? 1 : 0));
  return code;
}

/// decode(code) for each of the 256 byte codes.
template <typename Decode>
std::array<float, 256> values_of(Decode decode) {
  std::array<float, 256> t{};
  for (int c = 0; c < 256; ++c) t[static_cast<std::size_t>(c)] = decode(static_cast<std::uint8_t>(c));
  return t;
}

/// FP8 and int8: blocks along the last dimension, bfloat16 scales [rows, blocks].
QuantizedWeight quantize_rows(const at::Tensor& weight, BaseFormat format) {
  if (weight.dim() < 1) throw Error(ErrorKind::config, std::string(to_string(format)) + " needs a weight with dimensions");
  const at::Tensor w = weight.to(at::kFloat).contiguous();
  const std::int64_t cols = w.size(-1), rows = cols == 0 ? 0 : w.numel() / cols;
  const std::int64_t blocks = (cols + kBaseQuantBlock - 1) / kBaseQuantBlock;
  const bool fp8 = format == BaseFormat::fp8;
  const float levels = fp8 ? 448.0f : 127.0f;
  QuantizedWeight q;
  q.format = format;
  q.shape = w.sizes().vec();
  q.codes = at::empty(w.sizes(), at::TensorOptions().dtype(fp8 ? at::kByte : at::kChar));
  q.scales = at::empty({rows, blocks}, at::TensorOptions().dtype(at::kBFloat16));
  const float* in = w.data_ptr<float>();
  auto* scales = q.scales.data_ptr<at::BFloat16>();
  auto* out8 = static_cast<std::uint8_t*>(q.codes.data_ptr());
  zs::parallel_for(0, rows, std::max<std::int64_t>(1, 32768 / std::max<std::int64_t>(cols, 1)), [&](std::int64_t first, std::int64_t last) {
    for (std::int64_t r = first; r < last; ++r)
      for (std::int64_t b = 0; b < blocks; ++b) {
        const std::int64_t begin = r * cols + b * kBaseQuantBlock, end = r * cols + std::min(cols, (b + 1) * kBaseQuantBlock);
        float absmax = 0.0f;
        for (std::int64_t i = begin; i < end; ++i) absmax = std::max(absmax, std::fabs(in[i]));
        const at::BFloat16 scale(std::max(absmax / levels, 1e-8f));  // round to nearest even
        scales[r * blocks + b] = scale;
        const float s = static_cast<float>(scale);
        for (std::int64_t i = begin; i < end; ++i) {
          const float v = std::clamp(in[i] / s, -levels, levels);
          if (fp8) out8[i] = e4m3_from_float(v);
          else out8[i] = static_cast<std::uint8_t>(static_cast<std::int8_t>(std::nearbyint(v)));  // half to even
        }
      }
  });
  return q;
}

at::Tensor dequantize_rows(const QuantizedWeight& q) {
  const std::int64_t cols = q.shape.empty() ? 0 : q.shape.back();
  const std::int64_t rows = cols == 0 ? 0 : q.codes.numel() / cols, blocks = q.scales.size(1);
  at::Tensor out = at::empty(q.shape, at::TensorOptions().dtype(at::kFloat));
  float* o = out.data_ptr<float>();
  const auto* scales = q.scales.data_ptr<at::BFloat16>();
  const auto* codes = static_cast<const std::uint8_t*>(q.codes.data_ptr());
  // A code's value from a table (FP8: the 256 E4M3 values; int8: the integer), times its block's scale.
  static const std::array<float, 256> int8_values =
      values_of([](std::uint8_t c) { return static_cast<float>(static_cast<std::int8_t>(c)); });
  const std::array<float, 256>& table = q.format == BaseFormat::fp8 ? e4m3_values() : int8_values;
  zs::parallel_for(0, rows, std::max<std::int64_t>(1, 32768 / std::max<std::int64_t>(cols, 1)), [&](std::int64_t first, std::int64_t last) {
    for (std::int64_t r = first; r < last; ++r)
      for (std::int64_t b = 0; b < blocks; ++b) {
        const float s = static_cast<float>(scales[r * blocks + b]);
        const std::int64_t begin = r * cols + b * kBaseQuantBlock, end = r * cols + std::min(cols, (b + 1) * kBaseQuantBlock);
        for (std::int64_t i = begin; i < end; ++i) o[i] = table[codes[i]] * s;
      }
  });
  return out;
}

/// bitsandbytes' quantize_4bit(nf4) (backends/default/ops.py): whole blocks are scaled by the
/// float32 reciprocal of their absmax, a partial last one divided by its absmax (clamped at 1e-38
/// and stored so); an odd count is padded with a 0 (code 7).
QuantizedWeight quantize_nf4(const at::Tensor& weight) {
  const at::Tensor w = weight.to(at::kFloat).contiguous();
  const std::int64_t n = w.numel(), full = n - n % kBaseQuantBlock, blocks = (n + kBaseQuantBlock - 1) / kBaseQuantBlock;
  QuantizedWeight q;
  q.format = BaseFormat::nf4;
  q.shape = w.sizes().vec();
  q.codes = at::empty({(n + 1) / 2}, at::TensorOptions().dtype(at::kByte));
  q.scales = at::empty({blocks}, at::TensorOptions().dtype(at::kFloat));
  const float* in = w.data_ptr<float>();
  float* absmax = q.scales.data_ptr<float>();
  std::uint8_t* packed = q.codes.data_ptr<std::uint8_t>();
  const auto bounds = nf4_bounds();
  std::vector<std::uint8_t> codes(static_cast<std::size_t>(n + 1), nf4_code(0.0f, bounds));
  zs::parallel_for(0, blocks, 512, [&](std::int64_t first, std::int64_t last) {
    for (std::int64_t b = first; b < last; ++b) {
      const std::int64_t begin = b * kBaseQuantBlock, end = std::min(n, begin + kBaseQuantBlock);
      float m = 0.0f;
      for (std::int64_t i = begin; i < end; ++i) m = std::max(m, std::fabs(in[i]));
      const bool partial = begin >= full;
      absmax[b] = partial ? std::max(m, 1e-38f) : m;
      const float inverse = 1.0f / std::max(m, 1e-38f);
      for (std::int64_t i = begin; i < end; ++i) {
        const float scaled = std::clamp(partial ? in[i] / absmax[b] : in[i] * inverse, -1.0f, 1.0f);
        codes[static_cast<std::size_t>(i)] = nf4_code(scaled, bounds);
      }
    }
  });
  // (blocks are 64 codes, an even count: no byte straddles two blocks' threads)
  zs::parallel_for(0, (n + 1) / 2, 32768, [&](std::int64_t first, std::int64_t last) {
    for (std::int64_t i = first; i < last; ++i)
      packed[i] = static_cast<std::uint8_t>(codes[static_cast<std::size_t>(2 * i)] << 4 | codes[static_cast<std::size_t>(2 * i + 1)]);
  });
  return q;
}

at::Tensor dequantize_nf4(const QuantizedWeight& q) {
  at::Tensor out = at::empty(q.shape, at::TensorOptions().dtype(at::kFloat));
  const std::int64_t n = out.numel();
  float* o = out.data_ptr<float>();
  const std::uint8_t* packed = q.codes.data_ptr<std::uint8_t>();
  const float* absmax = q.scales.data_ptr<float>();
  const std::int64_t blocks = (n + kBaseQuantBlock - 1) / kBaseQuantBlock;
  zs::parallel_for(0, blocks, 512, [&](std::int64_t first, std::int64_t last) {
    for (std::int64_t b = first; b < last; ++b) {
      const float m = absmax[b];
      for (std::int64_t i = b * kBaseQuantBlock; i < std::min(n, (b + 1) * kBaseQuantBlock); ++i) {
        const std::uint8_t byte = packed[i / 2];
        o[i] = kNf4[i % 2 == 0 ? byte >> 4 : byte & 0xF] * m;
      }
    }
  });
  return out;
}

}  // namespace

const char* to_string(BaseFormat format) {
  switch (format) {
    case BaseFormat::bf16: return "bf16";
    case BaseFormat::fp8: return "fp8";
    case BaseFormat::int8: return "int8";
    case BaseFormat::nf4: return "nf4";
  }
  return "?";
}

BaseFormat base_format_from_string(const std::string& text) {
  for (BaseFormat f : {BaseFormat::bf16, BaseFormat::fp8, BaseFormat::int8, BaseFormat::nf4})
    if (text == to_string(f)) return f;
  throw Error(ErrorKind::config, "'" + text + "' is no base format; choose bf16, fp8, int8 or nf4");
}

std::uint8_t e4m3_from_float(float x) {
  std::uint32_t f = bits_of(x);
  const std::uint8_t sign = static_cast<std::uint8_t>(f >> 24 & 0x80);
  f &= 0x7fffffffu;
  // 480 and up (or NaN): past 448 by more than half a step, E4M3FN's NaN.
  if (f >= bits_of(480.0f)) return static_cast<std::uint8_t>(sign | 0x7f);
  // Below 2^-6 the codes are multiples of 2^-9 (subnormals): scaling by 512 is exact.
  if (f < bits_of(0x1p-6f)) {
    float magnitude;
    std::memcpy(&magnitude, &f, sizeof magnitude);
    return static_cast<std::uint8_t>(sign | static_cast<std::uint8_t>(std::nearbyint(magnitude * 512.0f)));
  }
  // Normal: keep 3 of float32's 23 mantissa bits, rounding the 20 dropped to nearest even (a
  // carry into the exponent is the next binade's code), and move the exponent bias 127 -> 7.
  const std::uint32_t odd = f >> 20 & 1u;
  f += 0x7ffffu + odd;
  return static_cast<std::uint8_t>(sign | static_cast<std::uint8_t>((f - (120u << 23)) >> 20));
}

float e4m3_to_float(std::uint8_t code) {
  const float sign = (code & 0x80) != 0 ? -1.0f : 1.0f;
  const int exponent = code >> 3 & 0xF, mantissa = code & 0x7;
  if (exponent == 0xF && mantissa == 0x7) return std::nanf("");
  if (exponent == 0) return sign * std::ldexp(static_cast<float>(mantissa), -9);
  return sign * std::ldexp(1.0f + static_cast<float>(mantissa) / 8.0f, exponent - 7);
}

float e5m2_to_float(std::uint8_t code) {
  return static_cast<float>(c10::Half(static_cast<std::uint16_t>(code << 8), c10::Half::from_bits()));
}

const std::array<float, 256>& e4m3_values() {
  static const std::array<float, 256> table = values_of(e4m3_to_float);
  return table;
}

const std::array<float, 256>& e5m2_values() {
  static const std::array<float, 256> table = values_of(e5m2_to_float);
  return table;
}

std::int64_t QuantizedWeight::bytes() const {
  return (codes.defined() ? codes.numel() * static_cast<std::int64_t>(codes.element_size()) : 0) +
         (scales.defined() ? scales.numel() * static_cast<std::int64_t>(scales.element_size()) : 0);
}

bool well_formed(const QuantizedWeight& q) {
  if (!q.codes.defined() || !q.scales.defined() || q.shape.empty()) return false;
  const std::int64_t n = c10::multiply_integers(q.shape), cols = q.shape.back(), rows = cols == 0 ? 0 : n / cols;
  const auto is = [](const at::Tensor& t, at::ScalarType dtype, std::vector<std::int64_t> sizes) {
    return t.scalar_type() == dtype && t.sizes().vec() == sizes;
  };
  switch (q.format) {
    case BaseFormat::bf16: return false;
    case BaseFormat::fp8:
    case BaseFormat::int8:
      return is(q.codes, q.format == BaseFormat::fp8 ? at::kByte : at::kChar, q.shape) &&
             is(q.scales, at::kBFloat16, {rows, (cols + kBaseQuantBlock - 1) / kBaseQuantBlock});
    case BaseFormat::nf4:
      return is(q.codes, at::kByte, {(n + 1) / 2}) && is(q.scales, at::kFloat, {(n + kBaseQuantBlock - 1) / kBaseQuantBlock});
  }
  return false;
}

QuantizedWeight quantize(const at::Tensor& weight, BaseFormat format) {
  switch (format) {
    case BaseFormat::fp8:
    case BaseFormat::int8: return quantize_rows(weight, format);
    case BaseFormat::nf4: return quantize_nf4(weight);
    case BaseFormat::bf16: break;
  }
  throw Error(ErrorKind::config, "bf16 is the unquantized base: nothing to quantize");
}

QuantizedWeight fp8_as_stored(const at::Tensor& weight) {
  QuantizedWeight q;
  if (weight.dim() < 1) return q;
  const at::Tensor w = weight.to(at::kFloat).contiguous();
  const float* in = w.data_ptr<float>();
  const std::int64_t n = w.numel();
  at::Tensor codes = at::empty(w.sizes(), at::TensorOptions().dtype(at::kByte));
  std::uint8_t* out = codes.data_ptr<std::uint8_t>();
  const std::array<float, 256>& values = e4m3_values();
  for (std::int64_t i = 0; i < n; ++i) {
    out[i] = e4m3_from_float(in[i]);
    if (values[out[i]] != in[i]) return q;  // (NaN compares unequal too: not a weight to keep)
  }
  const std::int64_t cols = w.size(-1), rows = cols == 0 ? 0 : n / cols;
  q.format = BaseFormat::fp8;
  q.shape = w.sizes().vec();
  q.codes = codes;
  q.scales = at::ones({rows, (cols + kBaseQuantBlock - 1) / kBaseQuantBlock}, at::TensorOptions().dtype(at::kBFloat16));
  return q;
}

at::Tensor dequantize(const QuantizedWeight& q) {
  if (!q.codes.device().is_cpu()) return dequantize_ops(q, at::kFloat);
  return q.format == BaseFormat::nf4 ? dequantize_nf4(q) : dequantize_rows(q);
}

at::Tensor dequantize(const QuantizedWeight& q, at::ScalarType dtype) {
  if (!q.codes.device().is_cpu()) return dequantize_ops(q, dtype);
  const at::Tensor w = dequantize(q);
  return w.scalar_type() == dtype ? w : w.to(dtype);
}

namespace {

/// A code table as a float32 tensor on `device`, made once per thread and device.
const at::Tensor& table_on(const float* values, std::int64_t count, const at::Device& device) {
  thread_local std::vector<std::pair<std::pair<const float*, at::Device>, at::Tensor>> made;
  for (const auto& [key, t] : made)
    if (key.first == values && key.second == device) return t;
  at::Tensor t = at::from_blob(const_cast<float*>(values), {count}, at::TensorOptions().dtype(at::kFloat)).to(device);
  made.emplace_back(std::make_pair(values, device), t);
  return made.back().second;
}

}  // namespace

at::Tensor dequantize_ops(const QuantizedWeight& q, at::ScalarType dtype) {
  const at::Device device = q.codes.device();
  const at::TensorOptions i32 = at::TensorOptions().dtype(at::kInt).device(device);
  if (q.format == BaseFormat::nf4) {
    const std::int64_t n = c10::multiply_integers(q.shape), blocks = q.scales.numel();
    const at::Tensor bytes = q.codes.to(i32);
    const at::Tensor codes = at::stack({at::__rshift__(bytes, 4), at::bitwise_and(bytes, 15)}, 1).reshape({-1});
    at::Tensor v = table_on(kNf4.data(), 16, device).index_select(0, codes);  // [2 · bytes]
    if (v.numel() != blocks * kBaseQuantBlock) v = at::constant_pad_nd(v, {0, blocks * kBaseQuantBlock - v.numel()});
    v = v.view({blocks, kBaseQuantBlock}).mul_(q.scales.to(at::kFloat).unsqueeze(1));
    return v.reshape({-1}).narrow(0, 0, n).view(q.shape).to(dtype);
  }
  static const std::array<float, 256> int8_values =
      values_of([](std::uint8_t c) { return static_cast<float>(static_cast<std::int8_t>(c)); });
  const std::array<float, 256>& table = q.format == BaseFormat::fp8 ? e4m3_values() : int8_values;
  const std::int64_t cols = q.shape.empty() ? 0 : q.shape.back(), blocks = q.scales.size(1);
  const std::int64_t rows = cols == 0 ? 0 : q.codes.numel() / cols;
  // int8 codes read as bytes index the table by their bits, as the loops do.
  const at::Tensor index = (q.codes.scalar_type() == at::kChar ? q.codes.to(at::kInt).bitwise_and(255) : q.codes.to(i32));
  at::Tensor v = table_on(table.data(), 256, device).index_select(0, index.reshape({-1})).view({rows, cols});
  const at::Tensor s = q.scales.to(at::kFloat);
  if (cols == blocks * kBaseQuantBlock) {
    v = v.view({rows, blocks, kBaseQuantBlock}).mul_(s.unsqueeze(2));
  } else {
    v.mul_(s.repeat_interleave(kBaseQuantBlock, 1).narrow(1, 0, cols));
  }
  return v.reshape(q.shape).to(dtype);
}

}  // namespace zs::quant
