#include "models/frozen_outputs.h"

#include <ATen/ATen.h>

#include "data/latent_cache.h"

namespace zs::models {

TextConditioning cached_conditioning(const std::vector<std::string>& captions, data::LatentCache& cache, bool pooled,
                                     const std::function<TextConditioning(const std::string&)>& encode_one,
                                     const at::TensorOptions& options) {
  const std::vector<std::string> names =
      pooled ? std::vector<std::string>{"context", "pooled"} : std::vector<std::string>{"context"};
  std::vector<at::Tensor> context, pool;
  for (const auto& caption : captions) {
    const std::string key = data::LatentCache::text_content_key(caption);
    std::vector<at::Tensor> rows;
    if (!cache.load(key, names, rows)) {
      const TextConditioning fresh = encode_one(caption);
      rows = {fresh.context[0].to(at::kFloat).cpu()};
      if (pooled) rows.push_back(fresh.pooled[0].to(at::kFloat).cpu());
      std::vector<std::pair<std::string, at::Tensor>> entry;
      for (std::size_t i = 0; i < names.size(); ++i) entry.emplace_back(names[i], rows[i]);
      cache.store(key, entry);
    }
    context.push_back(rows[0]);
    if (pooled) pool.push_back(rows[1]);
  }
  // Captions of their own lengths (Qwen-Image) are padded to the longest, with the mask.
  TextConditioning out = pad_conditioning(context);
  out.context = out.context.to(options);
  if (out.mask.defined()) out.mask = out.mask.to(options.device());
  if (pooled) out.pooled = at::stack(pool).to(options);
  return out;
}

DiagonalGaussian cached_posteriors(const at::Tensor& images, data::LatentCache* cache, const std::vector<std::string>* keys,
                                   const std::function<DiagonalGaussian(const at::Tensor&)>& encode_one,
                                   at::ScalarType dtype) {
  const auto n = static_cast<std::size_t>(images.size(0));
  const bool cached = cache && keys && keys->size() == n;
  std::vector<at::Tensor> means(n), logvars(n);
  for (std::size_t i = 0; i < n; ++i) {
    if (cached && cache->load((*keys)[i], means[i], logvars[i])) continue;
    const DiagonalGaussian fresh = encode_one(images.narrow(0, static_cast<std::int64_t>(i), 1));
    means[i] = fresh.mean[0].to(at::kFloat).cpu();
    logvars[i] = fresh.logvar[0].to(at::kFloat).cpu();
    if (cached) cache->store((*keys)[i], means[i], logvars[i]);
  }
  const auto opts = images.options().dtype(dtype);
  DiagonalGaussian posterior;
  posterior.mean = at::stack(means).to(opts);
  posterior.logvar = at::stack(logvars).to(opts);
  return posterior;
}

}  // namespace zs::models
