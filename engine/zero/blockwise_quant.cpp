#include "zero/blockwise_quant.h"

#include <algorithm>
#include <atomic>
#include <type_traits>
#include <cmath>
#include <cstring>
#include <memory>
#include <mutex>
#include <vector>

#include <ATen/ATen.h>
#include <immintrin.h>

#include "core/parallel.h"

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

/// Whether quantize_into/dequantize_flat can run their CPU loops on these (contiguous uint8 codes,
/// float32 absmax, all in CPU memory).
bool cpu_loops(const at::Tensor& codes, const at::Tensor& absmax) {
  return codes.device().is_cpu() && absmax.device().is_cpu() && codes.scalar_type() == at::kByte &&
         absmax.scalar_type() == at::kFloat && codes.is_contiguous() && absmax.is_contiguous();
}

/// For every float32 sharing its top 16 bits (a bf16 bucket): the map entries searchsorted(right)
/// − 1 can give for values in that bucket, [lo, hi] (−1 possible). Most buckets hold one entry, so
/// a value's search is a lookup and at most a step or two. NaN buckets are marked lo > hi.
struct BucketTable {
  std::vector<float> code;  // the map it was built for (its first entry −1)
  std::vector<std::int16_t> lo, hi;
  std::vector<std::int32_t> lohi;  // lo | hi << 16 per bucket: the AVX2 path gathers both at once
  explicit BucketTable(const std::vector<float>& c) : code(c), lo(65536), hi(65536), lohi(65536) {
    auto below = [&](float f) {
      return static_cast<std::int16_t>(std::upper_bound(code.begin(), code.end(), f) - code.begin() - 1);
    };
    for (std::uint32_t key = 0; key < 65536; ++key) {
      const std::uint32_t a_bits = key << 16, b_bits = a_bits | 0xFFFFu;
      float a, b;
      std::memcpy(&a, &a_bits, sizeof a);
      std::memcpy(&b, &b_bits, sizeof b);
      if (std::isnan(a) || std::isnan(b)) {
        lo[key] = 1;
        hi[key] = 0;
        continue;
      }
      lo[key] = below(std::min(a, b));
      hi[key] = below(std::max(a, b));
    }
    for (std::uint32_t key = 0; key < 65536; ++key)
      lohi[key] = static_cast<std::int32_t>(static_cast<std::uint16_t>(lo[key]) | (static_cast<std::uint32_t>(static_cast<std::uint16_t>(hi[key])) << 16));
  }
  /// searchsorted(code, v, right=True) − 1: the last entry at or below v (−1 when none).
  std::int64_t below(float v) const {
    std::uint32_t bits;
    std::memcpy(&bits, &v, sizeof bits);
    const std::uint32_t key = bits >> 16;
    std::int64_t j = lo[key];
    const std::int64_t end = hi[key];
    if (end - j == 1 || end == j) {
      // The common case, without a branch on the value: the bucket spans at most one entry's edge.
      const std::int64_t last = static_cast<std::int64_t>(code.size()) - 1;
      return j + static_cast<std::int64_t>((j < end) & (code[static_cast<std::size_t>(std::min(j + 1, last))] <= v));
    }
    if (j > end) return std::upper_bound(code.begin(), code.end(), v) - code.begin() - 1;  // NaN
    while (j < end && code[static_cast<std::size_t>(j + 1)] <= v) ++j;
    return j;
  }
};

/// The table for `code`, built once per map (the two dynamic maps are all a run uses).
const BucketTable& bucket_table(const std::vector<float>& code) {
  static std::mutex mutex;
  static std::vector<std::unique_ptr<BucketTable>> tables;
  const std::lock_guard<std::mutex> lock(mutex);
  for (const auto& t : tables)
    if (t->code == code) return *t;
  tables.push_back(std::make_unique<BucketTable>(code));
  return *tables.back();
}

/// The AVX2 paths below give the scalar loops' bits: every operation is the same IEEE one on
/// eight lanes (division, square root, the same fused multiply-adds), the map searched the same
/// way. set_blockwise_simd(false) forces the scalar loops (tests compare the two).
std::atomic<bool> g_simd_enabled{true};

bool use_avx2() {
  static const bool supported = detected_simd() != SimdLevel::scalar;
  return supported && g_simd_enabled.load(std::memory_order_relaxed);
}

/// quantize_block on eight values `v` (already divided by the absmax): the codes, or −1 in the
/// lanes whose bucket spans more than one map edge (or NaN), which the caller does in scalar.
__attribute__((target("avx2,fma"))) inline __m256i quantize8(__m256 v, const BucketTable& t) {
  const float* code = t.code.data();
  const __m256i last = _mm256_set1_epi32(static_cast<int>(t.code.size()) - 1), one = _mm256_set1_epi32(1);
  const __m256i key = _mm256_srli_epi32(_mm256_castps_si256(v), 16);
  const __m256i both = _mm256_i32gather_epi32(t.lohi.data(), key, 4);  // lo | hi << 16, signed halves
  const __m256i j = _mm256_srai_epi32(_mm256_slli_epi32(both, 16), 16), end = _mm256_srai_epi32(both, 16);
  const __m256i span = _mm256_sub_epi32(end, j);
  const __m256i common = _mm256_or_si256(_mm256_cmpeq_epi32(span, one), _mm256_cmpeq_epi32(span, _mm256_setzero_si256()));
  // below = j + ((j < end) & (code[min(j + 1, last)] <= v))
  const __m256i up = _mm256_min_epi32(_mm256_add_epi32(j, one), last);
  const __m256 c_up = _mm256_i32gather_ps(code, _mm256_max_epi32(up, _mm256_setzero_si256()), 4);
  const __m256i step = _mm256_and_si256(_mm256_cmpgt_epi32(end, j), _mm256_castps_si256(_mm256_cmp_ps(c_up, v, _CMP_LE_OQ)));
  const __m256i below = _mm256_sub_epi32(j, step);  // (a true mask is −1)
  // The nearer of that entry and the next, the next only where strictly closer.
  const __m256i lo = _mm256_max_epi32(_mm256_min_epi32(below, last), _mm256_setzero_si256());
  const __m256i next = _mm256_min_epi32(_mm256_add_epi32(lo, one), last);
  const __m256 sign = _mm256_set1_ps(-0.0f);
  const __m256 d_next = _mm256_andnot_ps(sign, _mm256_sub_ps(v, _mm256_i32gather_ps(code, next, 4)));
  const __m256 d_lo = _mm256_andnot_ps(sign, _mm256_sub_ps(v, _mm256_i32gather_ps(code, lo, 4)));
  const __m256i closer = _mm256_castps_si256(_mm256_cmp_ps(d_next, d_lo, _CMP_LT_OQ));
  const __m256i out = _mm256_sub_epi32(lo, closer);
  return _mm256_blendv_epi8(_mm256_set1_epi32(-1), out, common);
}

/// The code of `v` (a value already divided by its block's absmax): the map entry at or below it,
/// the next one only where strictly closer (no branch: this is a coin toss per element).
inline std::uint8_t quantize_one(float v, const BucketTable& table) {
  const std::vector<float>& code = table.code;
  const std::int64_t last = static_cast<std::int64_t>(code.size()) - 1;
  const std::int64_t j = std::clamp<std::int64_t>(table.below(v), 0, last);
  const std::int64_t next = std::min(j + 1, last);
  const bool closer = std::fabs(v - code[static_cast<std::size_t>(next)]) < std::fabs(v - code[static_cast<std::size_t>(j)]);
  return static_cast<std::uint8_t>(j + static_cast<std::int64_t>(closer));
}

__attribute__((target("avx2,fma"))) void quantize_block_avx2(const float* xs, std::int64_t count, float denom,
                                                             const BucketTable& table, std::uint8_t* out) {
  const __m256 d = _mm256_set1_ps(denom);
  std::int64_t i = 0;
  alignas(32) std::int32_t codes[8];
  alignas(32) float vs[8];
  for (; i + 8 <= count; i += 8) {
    const __m256 v = _mm256_div_ps(_mm256_loadu_ps(xs + i), d);
    _mm256_store_si256(reinterpret_cast<__m256i*>(codes), quantize8(v, table));
    _mm256_store_ps(vs, v);
    for (int k = 0; k < 8; ++k)  // a wide bucket (−1): the scalar search
      out[i + k] = codes[k] < 0 ? quantize_one(vs[k], table) : static_cast<std::uint8_t>(codes[k]);
  }
  for (; i < count; ++i) out[i] = quantize_one(xs[i] / denom, table);
}

/// One block's codes for the values `xs[0, count)` with their absmax `a` (quantize_into's rule).
inline void quantize_block(const float* xs, std::int64_t count, float a, const BucketTable& table,
                           std::uint8_t* out) {
  const float denom = a > 0 ? a : 1.0f;
  if (use_avx2()) {
    quantize_block_avx2(xs, count, denom, table, out);
    return;
  }
  for (std::int64_t i = 0; i < count; ++i) out[i] = quantize_one(xs[i] / denom, table);
}

/// The absmax of xs[0, count) (NaN when any is NaN, as amax).
inline float block_absmax(const float* xs, std::int64_t count) {
  float a = 0.0f;
  bool nan = false;
  for (std::int64_t i = 0; i < count; ++i) {
    const float f = std::fabs(xs[i]);
    nan |= f != f;
    a = std::max(a, f);
  }
  return nan ? NAN : a;
}

/// A map's values, float32, in CPU memory.
std::vector<float> map_values(const at::Tensor& map) {
  const at::Tensor mapf = map.to(at::kFloat).to(at::kCPU).contiguous();
  return std::vector<float>(mapf.data_ptr<float>(), mapf.data_ptr<float>() + mapf.numel());
}

/// The map as quantize_into searches it: its first entry −1 (bitsandbytes' CPU kernel sets it).
std::vector<float> search_code(const at::Tensor& map) {
  std::vector<float> code = map_values(map);
  code[0] = -1.0f;
  return code;
}

/// quantize_into's arithmetic as one pass per block on the CPU (the tensor form below runs a
/// search and five temporaries of the elements' size): the same float32 division and comparisons,
/// a bucket table (BucketTable) for searchsorted(right), so the same codes.
void quantize_cpu(const at::Tensor& x, const at::Tensor& map, at::Tensor& codes, at::Tensor& absmax,
                  const at::Tensor& given_absmax) {
  const at::Tensor xf = x.reshape({-1}).to(at::kFloat).contiguous();
  const at::Tensor given = given_absmax.defined() ? given_absmax.reshape({-1}).to(at::kFloat).contiguous() : at::Tensor();
  const std::int64_t n = xf.numel(), blocks = (n + kQuantBlock - 1) / kQuantBlock;
  const BucketTable& table = bucket_table(search_code(map));
  const float* xs = xf.data_ptr<float>();
  const float* gs = given.defined() ? given.data_ptr<float>() : nullptr;
  std::uint8_t* out = codes.data_ptr<std::uint8_t>();
  float* am = absmax.data_ptr<float>();
  zs::parallel_for(0, blocks, 16, [&](std::int64_t b0, std::int64_t b1) {
    for (std::int64_t b = b0; b < b1; ++b) {
      const std::int64_t lo = b * kQuantBlock, count = std::min(n, lo + kQuantBlock) - lo;
      am[b] = gs ? gs[b] : block_absmax(xs + lo, count);
      quantize_block(xs + lo, count, am[b], table, out + lo);
    }
  });
}

/// adamw8bit_update on the CPU in one pass per block: dequantize both moments, update them and
/// the weights (float32 or float64 `P`), requantize with the new absmax — no temporaries of the
/// elements' size. The tensor form's arithmetic, operation by operation as ATen's vectorized CPU
/// kernels compute it: mul_ alone, then add_ (alpha·other + self), addcmul_ ((value·t1)·t2 + self)
/// and addcdiv_ (value·(t1/t2) + self) each as one fused multiply-add, nothing else contracted —
/// so a moment rounds as bitsandbytes' CPU backend (the same ATen operations) rounds it and a code
/// right at a boundary goes the same way (tst_zero adamw8bitMatchesBitsandbytes fails otherwise;
/// float64 weights equal the tensor form's to 1e-17).
#pragma GCC push_options
#pragma GCC optimize("fp-contract=off")
/// adamw8bit_cpu's element loop for float32 weights on eight lanes at a time (the same operations,
/// each an IEEE one); returns how many elements it did (a multiple of 8; the rest go scalar).
__attribute__((target("avx2,fma"))) std::int64_t adamw8bit_avx2(float* p, const float* g, const std::uint8_t* mc,
                                                              const std::uint8_t* vc, std::int64_t count, float am, float av,
                                                              const float* smap, const float* umap, float b1, float ob1,
                                                              float b2, float ob2, float fc2, float eps, bool has_decay,
                                                              float decay, float step, float* m, float* v) {
  const __m256 vam = _mm256_set1_ps(am), vav = _mm256_set1_ps(av), vb1 = _mm256_set1_ps(b1), vob1 = _mm256_set1_ps(ob1);
  const __m256 vb2 = _mm256_set1_ps(b2), vob2 = _mm256_set1_ps(ob2), vfc2 = _mm256_set1_ps(fc2), veps = _mm256_set1_ps(eps);
  const __m256 vdecay = _mm256_set1_ps(decay), vstep = _mm256_set1_ps(step);
  std::int64_t k = 0;
  for (; k + 8 <= count; k += 8) {
    const __m256i mi_codes = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(mc + k)));
    const __m256i vi_codes = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(vc + k)));
    const __m256 m_old = _mm256_mul_ps(_mm256_i32gather_ps(smap, mi_codes, 4), vam);
    const __m256 v_old = _mm256_mul_ps(_mm256_i32gather_ps(umap, vi_codes, 4), vav);
    const __m256 gi = _mm256_loadu_ps(g + k);
    const __m256 mi = _mm256_fmadd_ps(vob1, gi, _mm256_mul_ps(m_old, vb1));
    const __m256 vi = _mm256_fmadd_ps(_mm256_mul_ps(vob2, gi), gi, _mm256_mul_ps(v_old, vb2));
    const __m256 denom = _mm256_add_ps(_mm256_div_ps(_mm256_sqrt_ps(vi), vfc2), veps);
    __m256 w = _mm256_loadu_ps(p + k);
    if (has_decay) w = _mm256_mul_ps(w, vdecay);
    _mm256_storeu_ps(p + k, _mm256_fmadd_ps(vstep, _mm256_div_ps(mi, denom), w));
    _mm256_storeu_ps(m + k, mi);
    _mm256_storeu_ps(v + k, vi);
  }
  return k;
}

template <class P>
void adamw8bit_cpu(P* p, const float* g, std::uint8_t* mc, float* ma, std::uint8_t* vc, float* va, std::int64_t n,
                   const std::vector<float>& smap, const std::vector<float>& umap, const BucketTable& st,
                   const BucketTable& ut, const AdamHyper& h) {
  const double c1 = 1.0 - std::pow(h.beta1, static_cast<double>(h.step));
  const double c2 = std::sqrt(1.0 - std::pow(h.beta2, static_cast<double>(h.step)));
  const float b1 = static_cast<float>(h.beta1), ob1 = static_cast<float>(1.0 - h.beta1);
  const float b2 = static_cast<float>(h.beta2), ob2 = static_cast<float>(1.0 - h.beta2);
  const float fc2 = static_cast<float>(c2), eps = static_cast<float>(h.eps);
  const P decay = static_cast<P>(1.0 - h.lr * h.weight_decay), step = static_cast<P>(-h.lr / c1);
  const bool has_decay = h.weight_decay > 0;
  const std::int64_t blocks = (n + kQuantBlock - 1) / kQuantBlock;
  zs::parallel_for(0, blocks, 16, [&](std::int64_t b0, std::int64_t b1_) {
    float m[kQuantBlock], v[kQuantBlock];
    for (std::int64_t b = b0; b < b1_; ++b) {
      const std::int64_t lo = b * kQuantBlock, count = std::min(n, lo + kQuantBlock) - lo;
      const float am = ma[b], av = va[b];
      std::int64_t k0 = 0;
      if constexpr (std::is_same_v<P, float>)
        if (use_avx2())
          k0 = adamw8bit_avx2(p + lo, g + lo, mc + lo, vc + lo, count, am, av, smap.data(), umap.data(), b1, ob1, b2, ob2, fc2,
                              eps, has_decay, decay, step, m, v);
      for (std::int64_t k = k0; k < count; ++k) {
        const std::int64_t i = lo + k;
        const float gi = g[i];
        const float m_old = smap[mc[i]] * am, v_old = umap[vc[i]] * av;
        const float mi = std::fma(ob1, gi, m_old * b1);  // ATen's vectorized add_ with alpha: fmadd
        const float vi = std::fma(ob2 * gi, gi, v_old * b2);
        const float denom = std::sqrt(vi) / fc2 + eps;
        P w = p[i];
        if (has_decay) w *= decay;
        p[i] = std::fma(step, static_cast<P>(mi) / static_cast<P>(denom), w);
        m[k] = mi;
        v[k] = vi;
      }
      ma[b] = block_absmax(m, count);
      va[b] = block_absmax(v, count);
      quantize_block(m, count, ma[b], st, mc + lo);
      quantize_block(v, count, va[b], ut, vc + lo);
    }
  });
}
#pragma GCC pop_options

}  // namespace

void set_blockwise_simd(bool enabled) { g_simd_enabled = enabled; }

void quantize_into(const at::Tensor& x, const at::Tensor& map, at::Tensor codes, at::Tensor absmax,
                   const at::Tensor& given_absmax) {
  if (x.device().is_cpu() && cpu_loops(codes, absmax)) {
    quantize_cpu(x, map, codes, absmax, given_absmax);
    return;
  }
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
  if (cpu_loops(codes, absmax)) {
    // map[code] · absmax of its block, one float32 product each, in one pass.
    const std::vector<float> values = map_values(map);
    at::Tensor out = at::empty({n}, absmax.options());
    const float* mp = values.data();
    const float* am = absmax.data_ptr<float>();
    const std::uint8_t* c = codes.data_ptr<std::uint8_t>();
    float* o = out.data_ptr<float>();
    zs::parallel_for(0, n, std::int64_t{1} << 16, [&](std::int64_t lo, std::int64_t hi) {
      for (std::int64_t i = lo; i < hi; ++i) o[i] = mp[c[i]] * am[i / kQuantBlock];
    });
    return out;
  }
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
  if (p.device().is_cpu() && p.is_contiguous() && (p.scalar_type() == at::kFloat || p.scalar_type() == at::kDouble) &&
      cpu_loops(m_codes, m_absmax) && cpu_loops(v_codes, v_absmax)) {
    const at::Tensor g32 = g.reshape({-1}).to(at::kFloat).contiguous();
    const std::vector<float> smap = map_values(signed_map), umap = map_values(unsigned_map);
    const BucketTable& st = bucket_table(search_code(signed_map));
    const BucketTable& ut = bucket_table(search_code(unsigned_map));
    auto run = [&](auto* w) {
      adamw8bit_cpu(w, g32.data_ptr<float>(), m_codes.data_ptr<std::uint8_t>(), m_absmax.data_ptr<float>(),
                    v_codes.data_ptr<std::uint8_t>(), v_absmax.data_ptr<float>(), n, smap, umap, st, ut, h);
    };
    if (p.scalar_type() == at::kFloat) run(p.data_ptr<float>());
    else run(p.data_ptr<double>());
    return;
  }
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
