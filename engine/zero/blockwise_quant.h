#pragma once
// Block-wise dynamic 8-bit quantization as bitsandbytes defines it (functional.py create_dynamic_map,
// quantize_blockwise, dequantize_blockwise; Dettmers et al., "8-bit Optimizers via Block-wise
// Quantization"): what 8-bit AdamW keeps of its moments — one byte an element, an index into a
// 256-value dynamic map, and one float32 absmax per block — and its update (bitsandbytes'
// backends/cpu/ops.py _optimizer_update_8bit_blockwise_cpu: dequantize, AdamW in float32,
// quantize again). Tensor operations only, so it runs wherever the state lives.

#include <cstdint>

#include <ATen/core/Tensor.h>

#include "zero/cpu_adam.h"
#include "zero/zero_plan.h"

namespace zs::zero {

// kQuantBlock and kMin8bitSize live in zero_plan.h (the plan cuts shards on blocks).

/// create_dynamic_map(signed): 256 sorted float32 values in [−1, 1] (signed: the first moment's
/// "dynamic" map) or [0, 1] (the second moment's "udynamic"), a dynamic exponent (powers of ten)
/// and a shrinking linear fraction, 0 and 1 included.
at::Tensor dynamic_map(bool is_signed);

/// A quantized tensor: `codes` (uint8, the input's shape) index `map`; `absmax` [ceil(n / kQuantBlock)].
struct BlockQuantized {
  at::Tensor codes, absmax;
};

/// Each block of kQuantBlock elements of `a` (float32; flattened) scaled by 1/max|x| and mapped to
/// the nearest value of `map` (quantize_into, in `a`'s shape).
BlockQuantized quantize_blockwise(const at::Tensor& a, const at::Tensor& map);
/// map[code] · absmax of its block, float32, in `q.codes`' shape (dequantize_flat).
at::Tensor dequantize_blockwise(const BlockQuantized& q, const at::Tensor& map);

/// Quantizes flat float32 `x` into `codes` (uint8, x's size) and `absmax` (ceil(n / kQuantBlock)),
/// all on one device. `given_absmax`, when defined, is used instead of each block's max |x| (a
/// checkpoint's values dequantized with it come back to the same codes).
void quantize_into(const at::Tensor& x, const at::Tensor& map, at::Tensor codes, at::Tensor absmax,
                   const at::Tensor& given_absmax = at::Tensor());
/// The flat float32 values of `codes` with their blocks' `absmax`.
at::Tensor dequantize_flat(const at::Tensor& codes, const at::Tensor& absmax, const at::Tensor& map);

/// One AdamW step of flat weights `p` (float32 or float64, in place) from gradients `g` with 8-bit
/// moments (codes and absmax of exp_avg under the signed map, exp_avg_sq under the unsigned one),
/// bitsandbytes' arithmetic, a chunk of blocks at a time. Every tensor on one device.
void adamw8bit_update(at::Tensor p, const at::Tensor& g, at::Tensor m_codes, at::Tensor m_absmax, at::Tensor v_codes,
                      at::Tensor v_absmax, const at::Tensor& signed_map, const at::Tensor& unsigned_map,
                      const AdamHyper& h);

/// Whether the CPU loops above may use their AVX2 paths (on by default where the CPU has AVX2 and
/// FMA; they give the scalar loops' bits). Tests turn it off to compare the two.
void set_blockwise_simd(bool enabled);

}  // namespace zs::zero
