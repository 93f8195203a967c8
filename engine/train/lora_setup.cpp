#include "train/lora_setup.h"

#include <algorithm>
#include <filesystem>
#include <vector>

#include "core/error.h"
#include "data/latent_cache.h"
#include "models/lora.h"
#include "models/model_family.h"
#include "models/weights.h"

namespace zs::train {

namespace fs = std::filesystem;

models::LoraOptions lora_options(const config::LoraConfig& c) {
  models::LoraOptions o;
  o.rank = c.rank;
  o.alpha = c.alpha.value_or(static_cast<double>(c.rank));
  o.dropout = c.dropout;
  o.init = c.init;
  return o;
}

std::size_t attach_adapters(const config::TrainerConfig& cfg, const models::TrainedParts& trained,
                            models::TrainableModel& model) {
  const models::LoraOptions o = lora_options(cfg.lora);
  const auto seed = static_cast<std::uint64_t>(cfg.training.seed);
  std::size_t n = 0;
  if (trained.lora) n += model.attach_denoiser_lora(models::lora_targets(cfg), o, seed + 1000);
  if (trained.text == models::TextEncoderTraining::lora) {
    const std::vector<std::string> targets = models::text_encoder_lora_targets(cfg);
    std::uint64_t k = 1;
    for (auto& [component, encoder] : model.text_encoder_modules())
      n += models::attach_lora(*encoder, targets, o, seed + 1000 + k++).size();
  }
  return n;
}

bool checkpoint_needs_base(const models::TrainedParts& trained, const models::TrainableModel& model) {
  // A pipeline's frozen encoders under full training are what they always were: the pipeline's.
  return trained.lora || trained.text == models::TextEncoderTraining::lora ||
         (model.source_path().empty() && trained.text == models::TextEncoderTraining::frozen);
}

void save_preset_base(const models::TrainableModel& model, const std::string& model_dir) { model.save_base(model_dir); }

nlohmann::json base_model_reference(const models::TrainableModel& model, const std::string& model_dir) {
  const std::string root = model.source_path().empty() ? model_dir : model.source_path();
  const bool single = fs::is_regular_file(root);  // a single-file checkpoint; else a folder
  std::vector<std::string> files;
  if (single) {
    files.push_back(root);
  } else {
    std::error_code ec;
    for (const auto& e : fs::recursive_directory_iterator(root, ec)) {
      const std::string ext = e.path().extension().string();
      if (e.is_regular_file() && (ext == ".safetensors" || ext == ".bin")) files.push_back(e.path().string());
    }
    std::sort(files.begin(), files.end());
  }
  if (files.empty())
    throw Error(ErrorKind::checkpoint, root + ": no weight files (*.safetensors) to refer the checkpoints to");
  // Each file's CRC-32 and size under its path below the root, hashed together.
  std::string listing;
  for (const auto& f : files)
    listing += fs::relative(f, single ? fs::path(root).parent_path() : fs::path(root)).string() +
               "=" + data::LatentCache::content_key(f) + "\n";
  return {{"path", root}, {"hash", data::LatentCache::text_content_key(listing)}, {"files", files.size()}};
}

void check_base_model(const nlohmann::json& saved, const nlohmann::json& now, const std::string& checkpoint) {
  const std::string was = saved.value("hash", ""), is = now.value("hash", "");
  if (was == is) return;
  throw Error(ErrorKind::checkpoint,
              checkpoint + ": holds only what was trained on top of the base model " + saved.value("path", "?") +
                  " (content hash " + was + "), but " + now.value("path", "?") + " has changed since (hash now " + is +
                  "); put the base model it was trained on back, or start a new run");
}

}  // namespace zs::train
