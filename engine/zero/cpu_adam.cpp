#include "zero/cpu_adam.h"

#include <cmath>
#include <cstring>

#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>
// GCC 12 warns about its own AVX-512 intrinsics (a known false positive).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <cpuid.h>
#include <immintrin.h>

#include "core/error.h"
#include "core/parallel.h"

namespace zs::zero {

namespace {

// Per-step constants, in float like the reference's tensor arithmetic.
struct Coef {
  float decay;          // 1 - lr·wd (1 when no decay)
  float b1, one_minus_b1, b2, one_minus_b2;
  float inv_sqrt_c2;    // 1 / sqrt(1 - β2^t)
  float eps;
  float neg_step;       // -lr / (1 - β1^t)
  float grad_scale;     // applied to every gradient first when has_scale
  bool has_decay, has_scale;
};

Coef coefficients(const AdamHyper& h) {
  const double c1 = 1.0 - std::pow(h.beta1, static_cast<double>(h.step));
  const double c2 = 1.0 - std::pow(h.beta2, static_cast<double>(h.step));
  Coef c{};
  c.has_decay = h.weight_decay > 0;
  c.decay = static_cast<float>(1.0 - h.lr * h.weight_decay);
  c.b1 = static_cast<float>(h.beta1);
  c.one_minus_b1 = static_cast<float>(1.0 - h.beta1);
  c.b2 = static_cast<float>(h.beta2);
  c.one_minus_b2 = static_cast<float>(1.0 - h.beta2);
  c.inv_sqrt_c2 = static_cast<float>(1.0 / std::sqrt(c2));
  c.eps = static_cast<float>(h.eps);
  c.neg_step = static_cast<float>(-h.lr / c1);
  c.has_scale = h.grad_scale != 1.0;
  c.grad_scale = static_cast<float>(h.grad_scale);
  return c;
}

inline std::uint16_t to_half_bits(float x, HalfKind kind) {
  return kind == HalfKind::bf16 ? c10::BFloat16(x).x : c10::Half(x).x;
}

/// Gradient element i as float32: float32 as is, bf16 widened exactly (its bits are the top half).
inline float grad_at(const float* g, std::int64_t i) { return g[i]; }
inline float grad_at(const std::uint16_t* g, std::int64_t i) {
  const std::uint32_t bits = static_cast<std::uint32_t>(g[i]) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

template <class G>
void adam_scalar(float* p, const G* g, float* m, float* v, std::int64_t n, const Coef& c, HalfKind half,
                 std::uint16_t* out) {
  for (std::int64_t i = 0; i < n; ++i) {
    float pi = p[i];
    if (c.has_decay) pi *= c.decay;
    float gi = grad_at(g, i);
    if (c.has_scale) gi *= c.grad_scale;
    const float mi = m[i] * c.b1 + c.one_minus_b1 * gi;
    const float vi = v[i] * c.b2 + c.one_minus_b2 * gi * gi;
    const float denom = std::sqrt(vi) * c.inv_sqrt_c2 + c.eps;
    pi += c.neg_step * (mi / denom);
    p[i] = pi;
    m[i] = mi;
    v[i] = vi;
    if (half != HalfKind::none) out[i] = to_half_bits(pi, half);
  }
}

__attribute__((target("avx2,fma,f16c"))) inline __m256 load8(const float* g) { return _mm256_loadu_ps(g); }
__attribute__((target("avx2,fma,f16c"))) inline __m256 load8(const std::uint16_t* g) {
  const __m256i wide = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(g)));
  return _mm256_castsi256_ps(_mm256_slli_epi32(wide, 16));
}

template <class G>
__attribute__((target("avx2,fma,f16c"))) void adam_avx2(float* p, const G* g, float* m, float* v, std::int64_t n,
                                                        const Coef& c, HalfKind half, std::uint16_t* out) {
  const __m256 scale = _mm256_set1_ps(c.grad_scale);
  const __m256 decay = _mm256_set1_ps(c.decay), b1 = _mm256_set1_ps(c.b1), ob1 = _mm256_set1_ps(c.one_minus_b1),
               b2 = _mm256_set1_ps(c.b2), ob2 = _mm256_set1_ps(c.one_minus_b2),
               isc2 = _mm256_set1_ps(c.inv_sqrt_c2), eps = _mm256_set1_ps(c.eps), step = _mm256_set1_ps(c.neg_step);
  const __m256i round_bias = _mm256_set1_epi32(0x7fff), one = _mm256_set1_epi32(1),
                qnan = _mm256_set1_epi32(0x7fc0);
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 gv = load8(g + i);
    if (c.has_scale) gv = _mm256_mul_ps(gv, scale);
    __m256 pv = _mm256_loadu_ps(p + i);
    if (c.has_decay) pv = _mm256_mul_ps(pv, decay);
    const __m256 mv = _mm256_fmadd_ps(ob1, gv, _mm256_mul_ps(_mm256_loadu_ps(m + i), b1));
    const __m256 vv = _mm256_fmadd_ps(_mm256_mul_ps(ob2, gv), gv, _mm256_mul_ps(_mm256_loadu_ps(v + i), b2));
    const __m256 denom = _mm256_fmadd_ps(_mm256_sqrt_ps(vv), isc2, eps);
    pv = _mm256_fmadd_ps(step, _mm256_div_ps(mv, denom), pv);
    _mm256_storeu_ps(p + i, pv);
    _mm256_storeu_ps(m + i, mv);
    _mm256_storeu_ps(v + i, vv);
    if (half == HalfKind::fp16) {
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), _mm256_cvtps_ph(pv, _MM_FROUND_TO_NEAREST_INT));
    } else if (half == HalfKind::bf16) {
      const __m256i bits = _mm256_castps_si256(pv);
      const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(bits, 16), one);
      __m256i r = _mm256_srli_epi32(_mm256_add_epi32(bits, _mm256_add_epi32(round_bias, lsb)), 16);
      const __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(pv, pv, _CMP_UNORD_Q));
      r = _mm256_blendv_epi8(r, qnan, nan);
      const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0xD8);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), _mm256_castsi256_si128(packed));
    }
  }
  adam_scalar(p + i, g + i, m + i, v + i, n - i, c, half, out ? out + i : nullptr);
}

__attribute__((target("avx512f,avx512bw"))) inline __m512 load16(const float* g) { return _mm512_loadu_ps(g); }
__attribute__((target("avx512f,avx512bw"))) inline __m512 load16(const std::uint16_t* g) {
  const __m512i wide = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(g)));
  return _mm512_castsi512_ps(_mm512_slli_epi32(wide, 16));
}

template <class G>
__attribute__((target("avx512f,avx512bw"))) void adam_avx512(float* p, const G* g, float* m, float* v,
                                                             std::int64_t n, const Coef& c, HalfKind half,
                                                             std::uint16_t* out) {
  const __m512 scale = _mm512_set1_ps(c.grad_scale);
  const __m512 decay = _mm512_set1_ps(c.decay), b1 = _mm512_set1_ps(c.b1), ob1 = _mm512_set1_ps(c.one_minus_b1),
               b2 = _mm512_set1_ps(c.b2), ob2 = _mm512_set1_ps(c.one_minus_b2),
               isc2 = _mm512_set1_ps(c.inv_sqrt_c2), eps = _mm512_set1_ps(c.eps), step = _mm512_set1_ps(c.neg_step);
  const __m512i round_bias = _mm512_set1_epi32(0x7fff), one = _mm512_set1_epi32(1), qnan = _mm512_set1_epi32(0x7fc0);
  std::int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m512 gv = load16(g + i);
    if (c.has_scale) gv = _mm512_mul_ps(gv, scale);
    __m512 pv = _mm512_loadu_ps(p + i);
    if (c.has_decay) pv = _mm512_mul_ps(pv, decay);
    const __m512 mv = _mm512_fmadd_ps(ob1, gv, _mm512_mul_ps(_mm512_loadu_ps(m + i), b1));
    const __m512 vv = _mm512_fmadd_ps(_mm512_mul_ps(ob2, gv), gv, _mm512_mul_ps(_mm512_loadu_ps(v + i), b2));
    const __m512 denom = _mm512_fmadd_ps(_mm512_sqrt_ps(vv), isc2, eps);
    pv = _mm512_fmadd_ps(step, _mm512_div_ps(mv, denom), pv);
    _mm512_storeu_ps(p + i, pv);
    _mm512_storeu_ps(m + i, mv);
    _mm512_storeu_ps(v + i, vv);
    if (half == HalfKind::fp16) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), _mm512_cvtps_ph(pv, _MM_FROUND_TO_NEAREST_INT));
    } else if (half == HalfKind::bf16) {
      const __m512i bits = _mm512_castps_si512(pv);
      const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(bits, 16), one);
      __m512i r = _mm512_srli_epi32(_mm512_add_epi32(bits, _mm512_add_epi32(round_bias, lsb)), 16);
      r = _mm512_mask_mov_epi32(r, _mm512_cmp_ps_mask(pv, pv, _CMP_UNORD_Q), qnan);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), _mm512_cvtepi32_epi16(r));
    }
  }
  adam_scalar(p + i, g + i, m + i, v + i, n - i, c, half, out ? out + i : nullptr);
}

void check_tensor(const at::Tensor& t, const at::Tensor& like, const char* what) {
  if (!t.defined() || t.device().type() != at::kCPU || t.scalar_type() != at::kFloat || !t.is_contiguous() ||
      t.numel() != like.numel())
    throw Error(ErrorKind::config, std::string("cpu_adamw: ") + what +
                                       " must be a contiguous float32 CPU tensor with as many elements as the parameters");
}

// F16C (the fp16 <-> fp32 conversions of the bf16/fp16 paths) from CPUID leaf 1: clang 14's
// __builtin_cpu_supports does not know "f16c" (the fuzz build compiles with it).
bool cpu_has_f16c() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  return __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & bit_F16C) != 0;
}

}  // namespace

SimdLevel detected_simd() {
  static const SimdLevel level = [] {
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw")) return SimdLevel::avx512;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && cpu_has_f16c())
      return SimdLevel::avx2;
    return SimdLevel::scalar;
  }();
  return level;
}

std::string simd_name(SimdLevel level) {
  switch (level) {
    case SimdLevel::avx512: return "avx512";
    case SimdLevel::avx2: return "avx2";
    default: return "scalar";
  }
}

namespace {

template <class G>
void run_adamw(float* param, const G* grad, float* exp_avg, float* exp_avg_sq, std::int64_t n, const AdamHyper& h,
               HalfKind half, std::uint16_t* half_out, SimdLevel level) {
  if (static_cast<int>(level) > static_cast<int>(detected_simd()))
    throw Error(ErrorKind::config, "cpu_adamw: this CPU has no " + simd_name(level) + " (best: " +
                                       simd_name(detected_simd()) + ")");
  const Coef c = coefficients(h);
  auto kernel = level == SimdLevel::avx512 ? adam_avx512<G> : level == SimdLevel::avx2 ? adam_avx2<G> : adam_scalar<G>;
  // Chunks of 64 Ki elements (1 MiB of parameters and gradients, 3 MiB with the moments) keep
  // the per-thread overhead negligible and let small units run on one thread.
  zs::parallel_for(0, n, std::int64_t{1} << 16, [&](std::int64_t begin, std::int64_t end) {
    kernel(param + begin, grad + begin, exp_avg + begin, exp_avg_sq + begin, end - begin, c, half,
           half_out ? half_out + begin : nullptr);
  });
}

}  // namespace

void cpu_adamw(float* param, const float* grad, float* exp_avg, float* exp_avg_sq, std::int64_t n, const AdamHyper& h,
               HalfKind half, std::uint16_t* half_out, SimdLevel level) {
  run_adamw(param, grad, exp_avg, exp_avg_sq, n, h, half, half_out, level);
}

void cpu_adamw_bf16_grad(float* param, const std::uint16_t* grad, float* exp_avg, float* exp_avg_sq, std::int64_t n,
                         const AdamHyper& h, HalfKind half, std::uint16_t* half_out, SimdLevel level) {
  run_adamw(param, grad, exp_avg, exp_avg_sq, n, h, half, half_out, level);
}

void cpu_adamw(const at::Tensor& param, const at::Tensor& grad, const at::Tensor& exp_avg, const at::Tensor& exp_avg_sq,
               const AdamHyper& h, const at::Tensor& out, SimdLevel level) {
  check_tensor(param, param, "param");
  const bool bf16_grad = grad.defined() && grad.scalar_type() == at::kBFloat16;
  if (bf16_grad) {
    if (grad.device().type() != at::kCPU || !grad.is_contiguous() || grad.numel() != param.numel())
      throw Error(ErrorKind::config, "cpu_adamw: grad must be a contiguous float32 or bf16 CPU tensor with as many "
                                     "elements as the parameters");
  } else {
    check_tensor(grad, param, "grad");
  }
  check_tensor(exp_avg, param, "exp_avg");
  check_tensor(exp_avg_sq, param, "exp_avg_sq");
  HalfKind half = HalfKind::none;
  std::uint16_t* half_out = nullptr;
  if (out.defined()) {
    if (out.device().type() != at::kCPU || !out.is_contiguous() || out.numel() != param.numel() ||
        (out.scalar_type() != at::kBFloat16 && out.scalar_type() != at::kHalf))
      throw Error(ErrorKind::config, "cpu_adamw: out must be a contiguous bf16 or fp16 CPU tensor with as many "
                                     "elements as the parameters");
    half = out.scalar_type() == at::kBFloat16 ? HalfKind::bf16 : HalfKind::fp16;
    half_out = reinterpret_cast<std::uint16_t*>(out.data_ptr());
  }
  if (bf16_grad)
    cpu_adamw_bf16_grad(param.data_ptr<float>(), reinterpret_cast<const std::uint16_t*>(grad.data_ptr()),
                        exp_avg.data_ptr<float>(), exp_avg_sq.data_ptr<float>(), param.numel(), h, half, half_out,
                        level);
  else
    cpu_adamw(param.data_ptr<float>(), grad.data_ptr<float>(), exp_avg.data_ptr<float>(),
              exp_avg_sq.data_ptr<float>(), param.numel(), h, half, half_out, level);
}

}  // namespace zs::zero
