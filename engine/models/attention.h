#pragma once
// Scaled dot-product attention: the one entry point for the UNet's transformer blocks, the VAE's
// mid-block attention and the text encoders. Three paths compute the same function:
//  - plain: softmax(q kᵀ·s + mask) v with autograd keeping the tokens × tokens probabilities
//    for backward (fastest for short sequences, memory grows with Nq·Nk);
//  - blocked: queries and keys in blocks with a running row max and sum (online softmax); only
//    q, k, v, the output and each row's log-sum-exp are kept, and backward recomputes the
//    blocks, so its memory grows with the tokens, not their square;
//  - fused: LibTorch 2.x's scaled_dot_product_attention (flash / memory-efficient kernels on
//    CUDA), where it exists.

#include <cstdint>
#include <string>

#include <ATen/core/Tensor.h>

#include "models/attention_options.h"

namespace torch::nn {
class Module;
}

namespace zs::models {

/// softmax(q kᵀ / sqrt(d) + mask) v over `heads` heads.
/// q: [B, Nq, H·d], k and v: [B, Nk, H·d]; mask (optional, additive, no gradient): [Nq, Nk].
/// Returns [B, Nq, H·d]. The path follows `o`; every path is differentiable in q, k and v.
at::Tensor multi_head_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, std::int64_t heads,
                                const at::Tensor& mask = {}, const AttentionOptions& o = {});

/// The additive causal mask [n, n]: 0 on and below the diagonal, -inf above.
at::Tensor causal_mask(std::int64_t n, at::ScalarType dtype, at::Device device);

/// A module that calls multi_head_attention carries its options here (the UNet's, the VAE's and
/// CLIP's attention modules); set_attention_options reaches every one below a root module.
struct AttentionSite {
  virtual ~AttentionSite() = default;
  AttentionOptions attention;
};
/// Sets `o` on every AttentionSite in `root`'s module tree; returns how many there were.
std::size_t set_attention_options(torch::nn::Module& root, const AttentionOptions& o);

/// What ran since the last reset, for the run log: e.g. "blocked (up to 4096×4096 tokens),
/// plain (up to 4096×77 tokens)"; empty when nothing ran.
std::string attention_paths_used();
void reset_attention_paths_used();

}  // namespace zs::models
