#include "train/frozen_cache.h"

#include <array>
#include <filesystem>
#include <set>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <c10/core/GradMode.h>

#include "core/install_paths.h"
#include "core/text.h"
#include "data/dataset.h"
#include "data/latent_cache.h"
#include "models/quantized_base.h"
#include "models/trainable_model.h"

namespace zs::train {

namespace fs = std::filesystem;

data::MetadataOptions metadata_options(const config::DataConfig& data, std::function<void(const std::string&)> on_warning) {
  const config::DataMetadataConfig& m = data.metadata;
  data::MetadataOptions o;
  o.allow_external_paths = data.allow_external_paths;
  o.on_warning = std::move(on_warning);
  o.consider_every_nth = m.consider_every_nth;
  o.blacklist_tags = m.blacklist_tags;
  o.non_caption_tags = m.non_caption_tags;
  o.replacements = m.replacements;
  o.tag_separator = m.tag_separator;
  o.abs_min_score = m.abs_min_score;
  o.min_score = m.min_score;
  o.score_tags = m.score_tags;
  for (const auto& [tag, value] : m.tag_bonus_scores) o.tag_bonus_scores.emplace_back(tag, std::stod(value));
  return o;
}

data::LoaderOptions loader_options(const config::TrainerConfig& cfg) {
  data::LoaderOptions lo;
  lo.batch_size = cfg.training.batch_size;
  lo.resolution = cfg.data.resolution;
  lo.flip_p = cfg.data.flip_p;
  lo.caption_dropout = cfg.data.caption_dropout;
  lo.shuffle_tag_p = cfg.data.metadata.shuffle_tag_p;
  lo.tag_separator = cfg.data.metadata.tag_separator;
  lo.seed = static_cast<std::uint64_t>(cfg.training.seed);
  lo.num_workers = static_cast<int>(cfg.data.num_workers);
  lo.buckets = cfg.data.aspect_buckets;
  lo.bucket_step = cfg.data.bucket_step;
  lo.repeats = cfg.data.repeats;
  lo.accumulation = cfg.training.gradient_accumulation_steps;
  return lo;
}

Caches::Caches() = default;
Caches::~Caches() = default;
Caches::Caches(Caches&&) noexcept = default;
Caches& Caches::operator=(Caches&&) noexcept = default;

Caches open_caches(const config::TrainerConfig& cfg, const models::TrainableModel& model) {
  Caches c;
  const std::string root = cfg.data.latent_cache_dir.empty() ? default_cache_dir(cfg.logging.runs_root)
                                                             : cfg.data.latent_cache_dir;
  if (model.has_latent_space() && cfg.data.cache_latents)
    c.latents = std::make_unique<data::LatentCache>(root, data::LatentCache::vae_key(model.source_path()), cfg.data.resolution);
  if (!model.source_path().empty() && !model.text_encoders_trained() && cfg.data.cache_text_embeddings) {
    std::vector<std::string> components = model.text_components();
    if (cfg.model.text_encoder_precision != "bf16")
      for (auto& component : components) component += "~" + cfg.model.text_encoder_precision;
    c.texts = std::make_unique<data::LatentCache>(root, data::LatentCache::text_key(model.source_path(), components), "text");
  }
  return c;
}

std::string quantize_text_encoders(const config::TrainerConfig& cfg, models::TrainableModel& model) {
  const quant::BaseFormat format = quant::base_format_from_string(cfg.model.text_encoder_precision);
  if (format == quant::BaseFormat::bf16 || model.text_encoders_trained()) return "";
  models::QuantizedBytes q;
  for (const models::ModelComponent& c : model.components()) {
    if (c.module && c.role != models::ModelComponent::Role::denoiser) q += models::quantize_linears(*c.module, format);
  }
  return "text encoders: " + std::to_string(q.layers) + " Linear weights kept as " + cfg.model.text_encoder_precision +
         " (" + format_bytes(q.before) + " -> " + format_bytes(q.after) + ")";
}

void place_quantized_weights(models::TrainableModel& model, const at::Device& device) {
  for (const models::ModelComponent& c : model.components())
    if (c.module && c.role != models::ModelComponent::Role::denoiser && !c.streams_on_gpu) models::move_quantized(*c.module, device);
}

std::vector<std::string> sampling_captions(const config::TrainerConfig& cfg) {
  if (cfg.sampling.prompts.empty() || cfg.sampling.negative_prompt.empty()) return {};
  return {cfg.sampling.negative_prompt};
}

std::vector<std::string> sampling_prompts(const config::TrainerConfig& cfg) {
  if (cfg.sampling.prompts.empty()) return {};
  std::vector<std::string> out = cfg.sampling.prompts;
  out.emplace_back();
  return out;
}

CacheNeeds cache_needs(data::DataLoader& loader, bool latents, int rank, int world,
                       const std::vector<std::string>& prompts, const std::vector<std::string>& extras) {
  CacheNeeds needs;
  const auto& o = loader.options();
  const auto mine = [&](std::size_t i) { return static_cast<int>(i % static_cast<std::size_t>(world)) == rank; };
  std::set<std::string> captions;
  for (std::size_t i = 0; i < loader.items().size(); ++i) {
    const auto& item = loader.items()[i];
    captions.insert(item.caption);
    if (!item.tags.empty() && o.shuffle_tag_p > 0) needs.finite = false;
    if (!latents || !mine(i)) continue;
    needs.images.push_back({i, false, loader.cache_key(i, false)});
    if (o.flip_p > 0) needs.images.push_back({i, true, loader.cache_key(i, true)});
  }
  if (o.caption_dropout > 0) captions.insert("");
  captions.insert(prompts.begin(), prompts.end());
  std::size_t k = 0;
  for (const auto& caption : captions)
    if (mine(k++)) needs.captions.push_back(caption);
  std::set<std::string> more;
  for (const auto& e : extras)
    if (!captions.count(e)) more.insert(e);
  k = 0;
  for (const auto& e : more)
    if (mine(k++)) needs.extras.push_back(e);
  return needs;
}

CacheMissing cache_missing(const CacheNeeds& needs, const data::LatentCache* latents, const data::LatentCache* texts) {
  CacheMissing m;
  if (latents)
    for (const auto& image : needs.images) m.images += !latents->has(image.key);
  if (texts)
    for (const auto& caption : needs.captions) m.captions += !texts->has(data::LatentCache::text_content_key(caption));
  return m;
}

std::int64_t fill_caches(models::TrainableModel& model, data::DataLoader& loader, const CacheNeeds& needs,
                         data::LatentCache* latents, data::LatentCache* texts, const at::Device& device,
                         const std::function<void(std::int64_t, std::int64_t)>& progress) {
  c10::NoGradGuard no_grad;
  std::vector<const CacheNeeds::Image*> images;
  std::vector<const std::string*> captions;
  if (latents)
    for (const auto& need : needs.images)
      if (!latents->has(need.key)) images.push_back(&need);
  if (texts)
    for (const auto* list : {&needs.captions, &needs.extras})
      for (const auto& caption : *list)
        if (!texts->has(data::LatentCache::text_content_key(caption))) captions.push_back(&caption);
  const auto total = static_cast<std::int64_t>(images.size() + captions.size());
  std::int64_t done = 0;
  if (progress) progress(0, total);
  // The sample drawn from each posterior is thrown away; only the posterior is stored.
  at::Generator gen = at::detail::createCPUGenerator(0);
  for (const auto* need : images) {
    const auto [height, width] = loader.item_size(need->item);
    std::array<double, 6> geometry{};
    at::Tensor image = data::DataLoader::load_image(loader.items()[need->item].image, height, width, &geometry);
    if (need->flip) image = image.flip({2});
    const std::vector<std::string> keys = {need->key};
    model.to_model_space(image.unsqueeze(0).to(device), gen, latents, &keys);
    if (progress) progress(++done, total);
  }
  for (const auto* caption : captions) {
    model.condition({*caption}, device, texts);
    if (progress) progress(++done, total);
  }
  return done;
}

}  // namespace zs::train
