#pragma once
// What a denoiser is conditioned on for a batch of captions, and how batches of it combine
// (definitions in trainable_model.cpp). Apart from trainable_model.h so that what a model holds
// (frozen_parking.h) can name it.

#include <vector>

#include <ATen/core/Tensor.h>

namespace zs::models {

/// What the denoiser is conditioned on for a batch of captions. Each family fills what it has.
struct TextConditioning {
  at::Tensor context;  ///< [B, T, D] the text sequence the denoiser attends to (SD 1.x: CLIP's last
                       ///< hidden state; SDXL: both encoders' penultimate states, concatenated)
  at::Tensor pooled;   ///< [B, P] a pooled text embedding (SDXL: text_encoder_2's text_embeds;
                       ///< undefined where the family has none)
  at::Tensor mask;     ///< [B, T] 1 for a caption's tokens, 0 for the padding after them (Qwen-Image:
                       ///< captions keep their own lengths); undefined: every row is valid
};

/// `a` then `b` in one batch (classifier-free guidance runs both in one forward). Where their
/// lengths differ or either has a mask, the shorter is padded with zero rows and the mask marks them.
TextConditioning concat_conditioning(const TextConditioning& a, const TextConditioning& b);

/// Per-caption rows [n_i, D] as one batch: right-padded with zeros to the longest, with the mask
/// (int64, 1 valid); the mask stays undefined when every caption has the same length.
TextConditioning pad_conditioning(const std::vector<at::Tensor>& rows);

}  // namespace zs::models
