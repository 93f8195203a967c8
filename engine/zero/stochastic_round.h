#pragma once
// Stochastic rounding of float32 weights to bf16 (optimizer.master_weights: none): a value between
// two bf16 numbers rounds up with probability equal to where it lies between them, so the expected
// rounded update is the float32 update and small updates are not lost (OneTrainer's
// copy_stochastic_, SimpleTuner's adamw_bf16 do the same: add 16 random bits to the float32's
// bit pattern, keep the upper 16). The random bits of element i are a hash of (key, i), so a
// tensor cut into any shards draws the same bits for the same element, and a resumed run the same
// as the run it continues.

#include <cstdint>
#include <string>

#include <ATen/core/Tensor.h>

namespace zs::zero {

/// The key of one unit's draws at one step (seed, unit name and step mixed; the same on every rank).
std::uint64_t rounding_key(std::uint64_t seed, const std::string& unit, std::int64_t step);

/// `x` (float32, flat) as bf16, each element rounded up or down at random as described above;
/// element k draws with index first_index + k.
at::Tensor stochastic_round_bf16(const at::Tensor& x, std::uint64_t key, std::int64_t first_index);

/// The same into `out` (bf16, x's size): on the CPU written in place, no temporary.
void stochastic_round_bf16_into(const at::Tensor& x, at::Tensor& out, std::uint64_t key, std::int64_t first_index);

}  // namespace zs::zero
