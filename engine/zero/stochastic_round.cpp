#include "zero/stochastic_round.h"

#include <ATen/ATen.h>

#include "core/parallel.h"

namespace zs::zero {

namespace {

std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

/// A 32-bit integer hash (its multiplier below 2^31, so every product fits int64 on any device).
at::Tensor hash32(at::Tensor x) {
  constexpr std::int64_t kMask = 0xFFFFFFFFLL, kMul = 0x45d9f3b;
  x = ((at::bitwise_xor(x, at::bitwise_right_shift(x, 16)) * kMul).bitwise_and_(kMask));
  x = ((at::bitwise_xor(x, at::bitwise_right_shift(x, 16)) * kMul).bitwise_and_(kMask));
  return at::bitwise_xor(x, at::bitwise_right_shift(x, 16));
}

}  // namespace

std::uint64_t rounding_key(std::uint64_t seed, const std::string& unit, std::int64_t step) {
  std::uint64_t h = 0xcbf29ce484222325ULL;  // FNV-1a of the unit's name: the same on every machine
  for (unsigned char c : unit) h = (h ^ c) * 0x100000001b3ULL;
  return splitmix64(splitmix64(seed ^ h) + static_cast<std::uint64_t>(step));
}

namespace {

std::uint32_t hash32(std::uint64_t x) {
  constexpr std::uint64_t kMask = 0xFFFFFFFFULL, kMul = 0x45d9f3b;
  x = ((x ^ (x >> 16)) * kMul) & kMask;
  x = ((x ^ (x >> 16)) * kMul) & kMask;
  return static_cast<std::uint32_t>(x ^ (x >> 16));
}

/// The same draws in one pass over the elements (no index or hash tensors: the tensor form holds
/// several int64 temporaries of the tensor's length at once — 20 GB for a 340 M-parameter Flux
/// double block offloaded to CPU memory, found on an H200 in issue 39).
void round_loop(const at::Tensor& x, at::Tensor& out, std::uint64_t key, std::int64_t first_index) {
  const at::Tensor v = x.to(at::kFloat).contiguous();
  const auto* in = static_cast<const std::uint32_t*>(v.data_ptr());
  auto* dst = static_cast<std::uint16_t*>(out.data_ptr());
  const std::uint64_t k1 = key & 0xFFFFFFFFULL, k2 = key >> 32;
  zs::parallel_for(0, v.numel(), 1 << 16, [&](std::int64_t lo, std::int64_t hi) {
    for (std::int64_t k = lo; k < hi; ++k) {
      const auto i = static_cast<std::uint64_t>(first_index + k);
      const std::uint32_t h = hash32(hash32((i & 0xFFFFFFFFULL) ^ k1) ^ ((i >> 32) ^ k2));
      // A NaN stays a NaN (bf16's quiet NaN); any other pattern's upper half is the bf16 exactly.
      const bool nan = (in[k] & 0x7FFFFFFFu) > 0x7F800000u;
      dst[k] = nan ? std::uint16_t{0x7FC0} : static_cast<std::uint16_t>((in[k] + (h & 0xFFFFu)) >> 16);
    }
  });
}

}  // namespace

at::Tensor stochastic_round_bf16(const at::Tensor& x, std::uint64_t key, std::int64_t first_index) {
  if (x.is_cpu() && x.is_contiguous()) {
    at::Tensor out = at::empty(x.sizes(), x.options().dtype(at::kBFloat16));
    round_loop(x, out, key, first_index);
    return out;
  }
  // The tensor form (on a GPU; a strided CPU tensor takes it too, which is how the tests compare
  // the two).
  const at::Tensor v = x.reshape({-1}).to(at::kFloat).contiguous();
  const std::int64_t n = v.numel();
  constexpr std::int64_t kMask = 0xFFFFFFFFLL;
  const auto k1 = static_cast<std::int64_t>(key & 0xFFFFFFFFULL), k2 = static_cast<std::int64_t>(key >> 32);
  const at::Tensor idx = at::arange(first_index, first_index + n, v.options().dtype(at::kLong));
  at::Tensor h = hash32(at::bitwise_xor(idx.bitwise_and(kMask), k1));
  h = hash32(at::bitwise_xor(h, at::bitwise_xor(at::bitwise_right_shift(idx, 32).bitwise_and_(kMask), k2)));
  // The float32's bit pattern plus 16 random bits, the lower 16 cleared: the bf16 above with the
  // probability of the fraction they held (for either sign, the pattern grows with the magnitude).
  const at::Tensor bits = v.view(at::kInt).to(at::kLong) + h.bitwise_and_(0xFFFF);
  return bits.bitwise_and_(-65536).to(at::kInt).view(at::kFloat).to(at::kBFloat16).view(x.sizes());
}

void stochastic_round_bf16_into(const at::Tensor& x, at::Tensor& out, std::uint64_t key, std::int64_t first_index) {
  if (x.is_cpu() && x.is_contiguous() && out.is_cpu() && out.is_contiguous() && out.scalar_type() == at::kBFloat16 &&
      out.numel() == x.numel())
    round_loop(x, out, key, first_index);
  else
    out.copy_(stochastic_round_bf16(x, key, first_index).view(out.sizes()));
}

}  // namespace zs::zero
