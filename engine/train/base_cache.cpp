#include "train/base_cache.h"

#include <filesystem>
#include <utility>
#include <vector>

#include <ATen/ATen.h>
#include <c10/util/StringUtil.h>
#include <torch/nn/module.h>

#include "core/error.h"
#include "core/install_paths.h"
#include "core/text.h"
#include "data/latent_cache.h"
#include "io/safetensors.h"
#include "models/model_family.h"

namespace zs::train {

namespace fs = std::filesystem;

namespace {
/// The layout of the cached files; a change to the quantizers' codes bumps it, so old copies miss.
constexpr const char* kBaseCacheVersion = "v1";
}  // namespace

std::string quantized_base_dir(const config::TrainerConfig& cfg) {
  const quant::BaseFormat format = quant::base_format_from_string(cfg.model.base_precision);
  if (format == quant::BaseFormat::bf16 || !cfg.data.cache_quantized_base || cfg.model.path.empty()) return "";
  const std::string root = cfg.data.latent_cache_dir.empty() ? default_cache_dir(cfg.logging.runs_root)
                                                             : cfg.data.latent_cache_dir;
  const std::string key =
      data::LatentCache::weights_key("base", cfg.model.path, {models::family_of(cfg).denoiser_folder()});
  return (fs::path(root) / (key + "-" + cfg.model.base_precision + "-" + kBaseCacheVersion)).string();
}

QuantizedBaseLoad::QuantizedBaseLoad(quant::BaseFormat format, std::string dir, bool writes,
                                     std::function<void(const std::string&)> warn)
    : format_(format), dir_(std::move(dir)), writes_(writes && !dir_.empty()), warn_(std::move(warn)) {}

QuantizedBaseLoad::~QuantizedBaseLoad() = default;

models::UnitBuilt QuantizedBaseLoad::callback() {
  return models::UnitBuilt(
      [this](const std::string& unit, const std::string&, torch::nn::Module& module) { built(unit, module); },
      [this](const std::string& unit, const std::string& name) { return supplies(unit, name); });
}

bool QuantizedBaseLoad::supplies(const std::string& unit, const std::string& name) {
  if (unit != consulted_) {
    consulted_ = unit;
    reader_.reset();
    const fs::path file = fs::path(dir_) / (unit + ".safetensors");
    std::error_code ec;
    if (!dir_.empty() && fs::is_regular_file(file, ec)) {
      try {
        reader_ = std::make_unique<io::SafetensorsReader>(file.string());
      } catch (const std::exception&) {
        reader_.reset();  // damaged or half-copied: read the model files and write it again
      }
    }
  }
  return reader_ && reader_->contains(name + ":codes") && reader_->contains(name + ":scales");
}

void QuantizedBaseLoad::built(const std::string& unit, torch::nn::Module& module) {
  // Only a unit the loader read (and asked about) comes from, or goes to, the cache.
  const bool read_from_files = unit == consulted_;
  const bool had_copy = read_from_files && reader_;
  if (had_copy) {
    cached += models::adopt_quantized(module, [&](const std::string& name, const at::Tensor& weight) {
      std::shared_ptr<quant::QuantizedWeight> q;
      if (!reader_->contains(name + ":codes")) return q;
      q = std::make_shared<quant::QuantizedWeight>();
      q->format = format_;
      q->shape = weight.sizes().vec();
      q->codes = reader_->tensor(name + ":codes");
      q->scales = reader_->tensor(name + ":scales");
      if (!quant::well_formed(*q))
        throw Error(ErrorKind::checkpoint,
                    reader_->path() + ": " + name + " holds codes or scales that do not fit a " + to_string(format_) +
                        " weight of shape " + c10::str(at::IntArrayRef(q->shape)) +
                        " (a copy of another model or format); delete the folder " + dir_ + " to quantize again");
      return q;
    });
  }
  // Layers the copy did not have (or every layer, without one) were read from the files.
  quantized += models::quantize_linears(module, format_);
  if (writes_ && read_from_files && !had_copy) write(unit, module);
  consulted_.clear();
  reader_.reset();
}

void QuantizedBaseLoad::write(const std::string& unit, const torch::nn::Module& module) {
  std::vector<std::pair<std::string, at::Tensor>> tensors;
  for (const auto& [name, q] : models::quantized_weights(module)) {
    tensors.emplace_back(name + ":codes", q->codes);
    tensors.emplace_back(name + ":scales", q->scales);
  }
  if (tensors.empty()) return;
  try {
    fs::create_directories(dir_);
    io::write_safetensors((fs::path(dir_) / (unit + ".safetensors")).string(), tensors,
                          {{"format", to_string(format_)}, {"zerostudio", std::string("quantized base ") + kBaseCacheVersion}});
    ++units_written;
  } catch (const std::exception& e) {
    // Disk full or read-only: this run still trains; the next one quantizes again.
    if (warn_) warn_(std::string("quantized base not kept for later runs (") + e.what() + "); turn it off with "
                     "data.cache_quantized_base: false");
    writes_ = false;
  }
}

std::string QuantizedBaseLoad::summary(const std::string& precision) const {
  std::string out;
  if (cached.layers > 0)
    out = "base: " + std::to_string(cached.layers) + " Linear weights of the blocks read as " + precision +
          " from the cache " + dir_ + " (" + format_bytes(cached.after) + " instead of " + format_bytes(cached.before) +
          " from the model files)";
  if (quantized.layers > 0) {
    if (!out.empty()) out += "; ";
    out += "base: " + std::to_string(quantized.layers) + " Linear weights of the blocks quantized to " + precision +
           " while loading (" + format_bytes(quantized.before) + " read -> " + format_bytes(quantized.after) + ")";
    if (units_written > 0) out += ", kept in " + dir_ + " for later runs";
  }
  return out;
}

}  // namespace zs::train
