#include "train/validation_set.h"

#include <zlib.h>

#include <filesystem>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <c10/core/GradMode.h>

#include "core/error.h"
#include "diffusion/objective.h"
#include "comm/communicator.h"
#include "models/trainable_model.h"

namespace zs::train {

namespace fs = std::filesystem;

bool held_out(const std::string& path_in_dataset, double fraction) {
  if (fraction <= 0) return false;
  const auto crc = crc32(0L, reinterpret_cast<const Bytef*>(path_in_dataset.data()), static_cast<uInt>(path_in_dataset.size()));
  return static_cast<double>(crc) / 4294967296.0 < fraction;
}

std::vector<data::DataItem> split_validation(const config::TrainerConfig& cfg, const std::string& data_root,
                                             std::vector<data::DataItem>& training, const data::MetadataOptions& options) {
  const auto& v = cfg.validation;
  if (!v.path.empty()) return data::scan_dataset(v.path, options);
  std::vector<data::DataItem> held;
  if (v.fraction <= 0) return held;
  std::vector<data::DataItem> kept;
  for (auto& item : training) {
    const std::string rel = fs::path(item.image).lexically_relative(data_root).generic_string();
    (held_out(rel, v.fraction) ? held : kept).push_back(std::move(item));
  }
  if (held.empty() || kept.empty())
    throw Error(ErrorKind::config, "validation.fraction " + std::to_string(v.fraction) + " holds out " +
                                       std::to_string(held.size()) + " of " + std::to_string(held.size() + kept.size()) +
                                       " images of " + data_root + "; raise or lower it, or use validation.path");
  training = std::move(kept);
  return held;
}

double validation_loss(models::TrainableModel& model, const diffusion::Objective& objective,
                       const std::vector<data::DataItem>& items, const config::TrainerConfig& cfg,
                       comm::Communicator& comm, const c10::Device& device, data::LatentCache* text_cache) {
  c10::NoGradGuard no_grad;
  const bool was_training = model.is_training();
  model.train(false);
  const std::int64_t timesteps = cfg.validation.timesteps;
  const auto world = static_cast<std::int64_t>(comm.world_size()), rank = static_cast<std::int64_t>(comm.rank());
  const auto n = static_cast<std::int64_t>(items.size());
  const std::int64_t per_rank = (n + world - 1) / world;
  const std::int64_t batch = cfg.training.batch_size;
  const auto seed = static_cast<std::uint64_t>(cfg.validation.seed);
  // Item i, timestep slot k (k = K for the VAE's posterior sample): its own generator.
  auto generator = [&](std::int64_t i, std::size_t k) {
    return at::detail::createCPUGenerator(seed * 0x9E3779B97F4A7C15ull + static_cast<std::uint64_t>(i) * 1009 + k + 1);
  };
  double sum = 0, count = 0;
  for (std::int64_t first = 0; first < per_rank; first += batch) {
    std::vector<at::Tensor> x0s, geometries;
    std::vector<std::string> captions;
    std::vector<std::int64_t> index;
    std::vector<double> weight;
    for (std::int64_t j = first; j < std::min(first + batch, per_rank); ++j) {
      const std::int64_t i = rank + j * world;
      const bool real = i < n;  // padding keeps every rank's batches (and stage 3's gathers) in step
      const auto& item = items[static_cast<std::size_t>(real ? i : 0)];
      std::array<double, 6> geometry{};
      const at::Tensor image = data::DataLoader::load_image(item.image, cfg.data.resolution, &geometry);
      at::Generator g = generator(real ? i : 0, static_cast<std::size_t>(timesteps));
      x0s.push_back(model.to_model_space(image.unsqueeze(0).to(device), g));
      geometries.push_back(at::tensor(std::vector<double>(geometry.begin(), geometry.end()), at::kFloat).unsqueeze(0));
      captions.push_back(item.caption);
      index.push_back(real ? i : 0);
      weight.push_back(real ? 1.0 : 0.0);
    }
    const at::Tensor x0 = at::cat(x0s);
    const models::TextConditioning cond = model.condition(captions, device, text_cache);
    const at::Tensor w = at::tensor(weight, at::kDouble);
    for (std::int64_t k = 0; k < timesteps; ++k) {
      std::vector<at::Tensor> noise;
      for (std::size_t b = 0; b < index.size(); ++b) {
        at::Generator g = generator(index[b], static_cast<std::size_t>(k));
        noise.push_back(at::randn(x0s[b].sizes(), g, at::TensorOptions().dtype(at::kFloat)).to(x0.device(), x0.scalar_type()));
      }
      const at::Tensor eps = at::cat(noise);
      const at::Tensor t = objective.validation_timestep(k, timesteps, x0.sizes(), device);
      const at::Tensor pred = model.predict(objective.add_noise(x0, eps, t), t, cond, at::cat(geometries));
      const at::Tensor per_item = objective.loss(pred, x0, eps, t);
      sum += (per_item.to(at::kCPU, at::kDouble) * w).sum().item<double>();
    }
    for (const double x : weight) count += x * static_cast<double>(timesteps);
  }
  at::Tensor totals = at::tensor(std::vector<double>{sum, count}, at::kDouble);
  comm.all_reduce(totals);
  model.train(was_training);
  return totals[0].item<double>() / std::max(totals[1].item<double>(), 1.0);
}

}  // namespace zs::train
