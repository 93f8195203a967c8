#pragma once
// What the frozen encoders of any family compute, through the run's caches: the text
// conditioning per caption (data.cache_text_embeddings) and the VAE's posterior per image
// (data.cache_latents). Each item is computed on its own, so a cached row never depends on which
// others shared its batch, and cached and fresh runs agree bit for bit.

#include <functional>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "models/autoencoder_kl.h"
#include "models/trainable_model.h"

namespace zs::data {
class LatentCache;
}

namespace zs::models {

/// The conditioning of `captions`, each caption's rows ("context", and "pooled" when `pooled`)
/// read from `cache` or computed by `encode_one` and stored, stacked (padded with a mask where the
/// captions' lengths differ: pad_conditioning) and moved to `options`.
TextConditioning cached_conditioning(const std::vector<std::string>& captions, data::LatentCache& cache, bool pooled,
                                     const std::function<TextConditioning(const std::string&)>& encode_one,
                                     const at::TensorOptions& options);

/// The posteriors of `images` [B, 3, H, W], each read from `cache` under its key or computed by
/// `encode_one` (a [1, 3, H, W] image) and stored; without a cache or a key per image, computed.
/// Returned in `dtype` on the images' device.
DiagonalGaussian cached_posteriors(const at::Tensor& images, data::LatentCache* cache, const std::vector<std::string>* keys,
                                   const std::function<DiagonalGaussian(const at::Tensor&)>& encode_one,
                                   at::ScalarType dtype);

}  // namespace zs::models
