#pragma once
// Storage formats for frozen base weights (issue 53): FP8 E4M3 and int8 with block-wise scales,
// and bitsandbytes' NF4. Each keeps codes and per-block scales and gives the weight back in
// float32. Reference implementations on the CPU, bit-exact with the pinned peers
// (tests/fixtures/gen/base_quant.py): PyTorch's float8_e4m3fn cast, musubi-tuner's --fp8_scaled
// blocks, bitsandbytes' quantize_4bit(nf4) on its CPU backend. LibTorch 1.13 has no float8 type:
// FP8 codes are bytes here, encoded and decoded by this file (both builds run the same code).
//
// Blocks. FP8 and int8: `kBaseQuantBlock` consecutive weights along the input dimension (the last
// dimension; each row's last block may be shorter), one bfloat16 scale each — max|w| / 448 (FP8)
// or / 127 (int8), at least 1e-8, rounded to bfloat16 and applied as rounded, so code · scale is
// the stored value exactly. Half the scale bytes of musubi's float32: 0.25 bits a weight. NF4: the
// flattened tensor in blocks of 64 (bitsandbytes' layout), one float32 absmax each (bitsandbytes'
// dtype: its codes depend on 1/absmax in float32), two codes a byte, the first in the high nibble.
//
// int8 against 8-bit AdamW's state (zero/blockwise_quant.h): a uniform grid of 255 levels
// (symmetric, round half to even) rather than the dynamic map's 256 log-spaced values searched by
// nearest, blocks along rows of 64 rather than 256 over the flattened tensor, and a bfloat16 scale
// rather than a float32 absmax.

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

namespace zs::quant {

inline constexpr std::int64_t kBaseQuantBlock = 64;

enum class BaseFormat { bf16, fp8, int8, nf4 };
const char* to_string(BaseFormat format);
/// "bf16", "fp8", "int8", "nf4"; throws zs::Error (config) naming the choices otherwise.
BaseFormat base_format_from_string(const std::string& text);

/// PyTorch's float8_e4m3fn conversion: round to nearest even, ±448 the largest finite value, NaN
/// (0x7f | sign) from 480 up and for NaN, no infinities; subnormals down to 2^-9.
std::uint8_t e4m3_from_float(float x);
float e4m3_to_float(std::uint8_t code);
/// PyTorch's float8_e5m2 value of a code (IEEE-like: the top byte of a float16, with infinities).
float e5m2_to_float(std::uint8_t code);
/// Every code's value, made once (decoding a tensor is a lookup).
const std::array<float, 256>& e4m3_values();
const std::array<float, 256>& e5m2_values();

/// A quantized weight: `codes` (uint8 for FP8 and NF4, int8 for int8; FP8 and int8 in the weight's
/// shape, NF4 flat and packed), `scales` (FP8/int8: bfloat16 [rows, blocks]; NF4: float32 absmax
/// [blocks]) and the original shape.
struct QuantizedWeight {
  BaseFormat format = BaseFormat::bf16;
  std::vector<std::int64_t> shape;
  at::Tensor codes, scales;
  /// Bytes held: codes and scales.
  std::int64_t bytes() const;
};

/// Whether `q`'s codes and scales have the dtypes and shapes quantize() gives a weight of
/// `q.shape` in `q.format` (a stored copy read back: train/base_cache.h).
bool well_formed(const QuantizedWeight& q);

/// Quantizes a float tensor (any float dtype; read as float32). FP8 and int8 need at least one
/// dimension (a Linear weight is [out, in]); NF4 takes any shape.
QuantizedWeight quantize(const at::Tensor& weight, BaseFormat format);
/// FP8 with unit scales when every value of `weight` already is an E4M3 value (a plain fp8 file's
/// weights, decoded): its codes, so the base keeps exactly the file's values instead of being
/// rounded again to block scales. Undefined codes (format bf16) otherwise; stops at the first value
/// that is not one (a bf16 base's first few).
QuantizedWeight fp8_as_stored(const at::Tensor& weight);
/// The weight back, float32, in its shape: the loops above for codes in CPU memory,
/// dequantize_ops elsewhere (a GPU).
at::Tensor dequantize(const QuantizedWeight& q);
/// The same in `dtype` (the layer's compute dtype): float32 values rounded once.
at::Tensor dequantize(const QuantizedWeight& q, at::ScalarType dtype);
/// The same through tensor operations on the codes' device (table lookups, one float32 multiply a
/// weight, as the loops): the GPU's path, equal to the loops bit for bit (tst_base_quant checks it
/// on the CPU). Transient memory: about 12 bytes a weight of the layer (int32 index, float32 values).
at::Tensor dequantize_ops(const QuantizedWeight& q, at::ScalarType dtype);

}  // namespace zs::quant
