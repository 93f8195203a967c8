#pragma once
// A fused, vectorised AdamW for optimizer states that live in CPU memory (ZeRO offload).
// One pass over the arrays reads parameter, gradient and both moments and writes parameter and
// moments (and, optionally, the updated parameter in bf16/fp16 for the copy back to the
// compute device). AVX-512 and AVX2 paths are chosen at run time, with a scalar fallback;
// the work is split over LibTorch's intra-op threads in chunks.
//
// Arithmetic, per element (the same order as zero::ReferenceAdamW, which is the reference):
//   p  = p · (1 − lr·wd)                    (when wd > 0)
//   m  = β1·m + (1 − β1)·g
//   v  = β2·v + (1 − β2)·g²
//   p  = p − (lr / (1 − β1^t)) · m / (sqrt(v) / sqrt(1 − β2^t) + eps)

#include <cstdint>
#include <string>

#include <ATen/core/Tensor.h>

namespace zs::zero {

enum class SimdLevel { scalar, avx2, avx512 };

/// The widest path this CPU supports (AVX-512F+BW, AVX2+FMA+F16C, else scalar).
SimdLevel detected_simd();
std::string simd_name(SimdLevel level);

struct AdamHyper {
  double lr = 1e-3;            ///< learning rate of this step
  double beta1 = 0.9;          ///< first-moment decay
  double beta2 = 0.999;        ///< second-moment decay
  double eps = 1e-8;           ///< added to the bias-corrected sqrt(v)
  double weight_decay = 0.0;   ///< decoupled (AdamW) decay
  std::int64_t step = 1;       ///< the step being taken, counted from 1 (bias correction)
  /// Every gradient is multiplied by this first (1/N for the mean over ranks, 1/loss scale);
  /// 1 leaves them untouched, bit for bit.
  double grad_scale = 1.0;
};

/// Kind of the optional second output of the updated parameters.
enum class HalfKind { none, bf16, fp16 };

/// Raw form: `n` elements of float32 arrays updated in place; `half_out`, when `half` is not
/// none, receives the updated parameters as bf16 (round to nearest even) or fp16 bits.
/// `level` must be supported by the CPU (detected_simd() or narrower).
void cpu_adamw(float* param, const float* grad, float* exp_avg, float* exp_avg_sq, std::int64_t n,
               const AdamHyper& h, HalfKind half = HalfKind::none, std::uint16_t* half_out = nullptr,
               SimdLevel level = detected_simd());

/// The same step with the gradients in bf16 (`grad` holds their bits), as they arrive from the
/// device: widened to float32 exactly inside the pass, so no float32 copy of them is ever written
/// (ZeRO-Offload's host pipeline, issue 38). Equal, bit for bit, to cpu_adamw on their float32 values.
void cpu_adamw_bf16_grad(float* param, const std::uint16_t* grad, float* exp_avg, float* exp_avg_sq, std::int64_t n,
                         const AdamHyper& h, HalfKind half = HalfKind::none, std::uint16_t* half_out = nullptr,
                         SimdLevel level = detected_simd());

/// Tensor form: every tensor is a contiguous float32 CPU tensor of the same numel (`grad` may be
/// bf16: cpu_adamw_bf16_grad); `out`, when
/// defined, is a contiguous bf16 or fp16 CPU tensor of that numel that receives the updated
/// parameters. Throws zs::Error naming the offending argument otherwise.
void cpu_adamw(const at::Tensor& param, const at::Tensor& grad, const at::Tensor& exp_avg,
               const at::Tensor& exp_avg_sq, const AdamHyper& h, const at::Tensor& out = at::Tensor(),
               SimdLevel level = detected_simd());

}  // namespace zs::zero
