#pragma once
// The generator of one training sample's random draws (its latent sample, noise and timestep),
// seeded by training.seed, the global batch number (data::Batch::index) and the sample's place in
// that batch. Nothing depends on which rank draws it or what it drew before, so 1 rank with
// gradient accumulation and N ranks draw the same values for the same samples, and a resumed run
// draws what the uninterrupted one would have.

#include <cstdint>

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/Generator.h>

namespace zs::train {

/// splitmix64's finalizer: consecutive inputs give unrelated seeds.
inline std::uint64_t mix_seed(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

inline at::Generator sample_generator(std::int64_t seed, std::int64_t batch_index, std::int64_t position) {
  const std::uint64_t s = mix_seed(mix_seed(mix_seed(static_cast<std::uint64_t>(seed)) +
                                            static_cast<std::uint64_t>(batch_index)) +
                                   static_cast<std::uint64_t>(position));
  return at::detail::createCPUGenerator(s);
}

}  // namespace zs::train
