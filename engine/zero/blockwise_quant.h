#pragma once
// Block-wise dynamic 8-bit quantization as bitsandbytes defines it (functional.py create_dynamic_map,
// quantize_blockwise, dequantize_blockwise; Dettmers et al., "8-bit Optimizers via Block-wise
// Quantization"): what 8-bit AdamW keeps of its moments — one byte an element, an index into a
// 256-value dynamic map, and one float32 absmax per block. Issue 37's second piece; the optimizer
// that stores its states this way comes next.

#include <cstdint>

#include <ATen/core/Tensor.h>

namespace zs::zero {

/// bitsandbytes Optimizer8bit's block size (optim/optimizer.py init_state).
constexpr std::int64_t kQuantBlock = 256;
/// Tensors with fewer elements keep 32-bit states (Optimizer8bit's min_8bit_size).
constexpr std::int64_t kMin8bitSize = 4096;

/// create_dynamic_map(signed): 256 sorted float32 values in [−1, 1] (signed: the first moment's
/// "dynamic" map) or [0, 1] (the second moment's "udynamic"), a dynamic exponent (powers of ten)
/// and a shrinking linear fraction, 0 and 1 included.
at::Tensor dynamic_map(bool is_signed);

/// A quantized tensor: `codes` (uint8, the input's shape) index `map`; `absmax` [ceil(n / block)].
struct BlockQuantized {
  at::Tensor codes, absmax;
};

/// Each block of `block` elements of `a` (float32; flattened) scaled by 1/max|x| and mapped to the
/// nearest value of `map`.
BlockQuantized quantize_blockwise(const at::Tensor& a, const at::Tensor& map, std::int64_t block = kQuantBlock);
/// map[code] · absmax of its block, float32, in `q.codes`' shape.
at::Tensor dequantize_blockwise(const BlockQuantized& q, const at::Tensor& map, std::int64_t block = kQuantBlock);

}  // namespace zs::zero
