#pragma once
// Scaled dot-product attention shared by the UNet's transformer blocks and the text encoder.

#include <cstdint>

#include <ATen/core/Tensor.h>

namespace zs::models {

/// softmax(q kᵀ / sqrt(d) + mask) v over `heads` heads. On CUDA with LibTorch 2.x this is
/// scaled_dot_product_attention (flash / memory-efficient kernels); elsewhere the plain path.
/// q: [B, Nq, H·d], k and v: [B, Nk, H·d]; mask (optional, additive): [Nq, Nk]. Returns [B, Nq, H·d].
at::Tensor multi_head_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, std::int64_t heads,
                                const at::Tensor& mask = {});

/// The additive causal mask [n, n]: 0 on and below the diagonal, -inf above.
at::Tensor causal_mask(std::int64_t n, at::ScalarType dtype, at::Device device);

}  // namespace zs::models
