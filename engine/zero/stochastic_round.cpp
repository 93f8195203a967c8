#include "zero/stochastic_round.h"

#include <ATen/ATen.h>

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

at::Tensor stochastic_round_bf16(const at::Tensor& x, std::uint64_t key, std::int64_t first_index) {
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

}  // namespace zs::zero
