#pragma once
// The latent and text-embedding caches as a whole: what a dataset needs in them, what they lack,
// and the pass that fills them (`zerostudio cache`). A run whose caches hold everything trains
// without the frozen VAE and text encoders on its device (TrainableModel::park_frozen).

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <c10/core/Device.h>

#include "settings/trainer_config.h"

namespace zs::data {
class DataLoader;
class LatentCache;
struct MetadataOptions;
struct LoaderOptions;
}  // namespace zs::data
namespace zs::models {
class TrainableModel;
}

namespace zs::train {

/// How a config's dataset is read (data.metadata.*, data.allow_external_paths); skipped files and
/// items go to `on_warning`.
data::MetadataOptions metadata_options(const config::DataConfig& data,
                                       std::function<void(const std::string&)> on_warning = nullptr);
/// How the loader reads a config's dataset (one process; the caller sets shard and num_shards).
data::LoaderOptions loader_options(const config::TrainerConfig& cfg);

/// The caches a config asks for (data.cache_latents, data.cache_text_embeddings) for `model`:
/// null where off or where the model has nothing frozen to cache (no VAE; trained text encoder).
struct Caches {
  std::unique_ptr<data::LatentCache> latents, texts;
  Caches();
  ~Caches();
  Caches(Caches&&) noexcept;
  Caches& operator=(Caches&&) noexcept;
};
/// (A text cache is keyed by model.text_encoder_precision too: quantized encoders compute other
/// values.)
Caches open_caches(const config::TrainerConfig& cfg, const models::TrainableModel& model);

/// model.text_encoder_precision: the frozen text encoders' Linear weights quantized in place,
/// before the cast to the compute dtype — as training and the cache pass both do, so a cache holds
/// what training would compute. Returns the line to log ("" when nothing was quantized).
std::string quantize_text_encoders(const config::TrainerConfig& cfg, models::TrainableModel& model);
/// After model.to(device): the quantized weights of the frozen parts that stay on the device go
/// there too (Module::to moves parameters and buffers only; parts that stream or park bring their
/// codes along for each call).
void place_quantized_weights(models::TrainableModel& model, const at::Device& device);

/// Everything the loader can ask the caches for: each item's image unflipped and, with
/// data.flip_p > 0, flipped; each caption and, with caption dropout, the empty one. Finite
/// unless tags are shuffled (then captions cannot all be cached).
struct CacheNeeds {
  struct Image {
    std::size_t item = 0;
    bool flip = false;
    std::string key;
  };
  std::vector<Image> images;
  std::vector<std::string> captions;  ///< distinct
  /// Prompts the cache pass encodes too where they are not captions (the sample prompts and
  /// guidance's unconditional one: a run whose caches hold them never loads a text encoder that
  /// loads on demand), not counted as missing: caches filled before they were added stay complete.
  std::vector<std::string> extras;
  bool finite = true;
};
/// The share of process `rank` of `world` (every world-th item and distinct caption; all of
/// them by default). Reads each of its image files once (the content key; the loader keeps it).
/// `prompts` are cached beside the captions (sampling_captions).
CacheNeeds cache_needs(data::DataLoader& loader, bool latents, int rank = 0, int world = 1,
                       const std::vector<std::string>& prompts = {}, const std::vector<std::string>& extras = {});
/// What sampling conditions on that the text cache holds too: sampling.negative_prompt when it is
/// set and the image logger has prompts (the empty prompt only where caption dropout makes it a
/// caption, as before: caches filled then stay complete).
std::vector<std::string> sampling_captions(const config::TrainerConfig& cfg);
/// The sample prompts and the unconditional one of guidance (the empty prompt): CacheNeeds::extras.
std::vector<std::string> sampling_prompts(const config::TrainerConfig& cfg);

/// How many entries the caches lack (only the caches that exist count).
struct CacheMissing {
  std::int64_t images = 0, captions = 0;
  std::int64_t total() const { return images + captions; }
};
CacheMissing cache_missing(const CacheNeeds& needs, const data::LatentCache* latents, const data::LatentCache* texts);

/// Encodes and stores what of `needs` (its extras too) the caches lack, one image and one caption at a time as
/// training would; `progress(done, total)` after each. Returns how many entries it stored.
std::int64_t fill_caches(models::TrainableModel& model, data::DataLoader& loader, const CacheNeeds& needs,
                         data::LatentCache* latents, data::LatentCache* texts, const at::Device& device,
                         const std::function<void(std::int64_t, std::int64_t)>& progress = {});

}  // namespace zs::train
