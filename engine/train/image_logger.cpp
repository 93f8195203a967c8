#include "train/image_logger.h"

#include <cmath>
#include <cstdio>
#include <filesystem>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <c10/core/GradMode.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "data/dataset.h"
#include "diffusion/objective.h"
#include "io/atomic_file.h"
#include "models/model_family.h"

namespace zs::train {

namespace fs = std::filesystem;

at::Tensor sample_images(models::TrainableModel& model, const std::vector<std::string>& prompts,
                         std::int64_t images_per_prompt, std::int64_t resolution, std::int64_t steps,
                         double guidance_scale, std::int64_t seed, const at::Device& device,
                         const std::string& negative_prompt) {
  c10::NoGradGuard no_grad;
  const bool was_training = model.is_training();
  model.train(false);
  std::vector<std::string> captions;
  std::vector<at::Tensor> noise;
  const std::int64_t channels = model.sample_channels();
  for (const auto& p : prompts)
    for (std::int64_t i = 0; i < images_per_prompt; ++i) {
      at::Generator gen = at::detail::createCPUGenerator(static_cast<std::uint64_t>(seed + static_cast<std::int64_t>(captions.size())));
      noise.push_back(at::randn({channels, model.sample_size(resolution), model.sample_size(resolution)}, gen));
      captions.push_back(p);
    }
  const auto n = static_cast<std::int64_t>(captions.size());
  at::Tensor x = at::stack(noise).to(device);
  const std::unique_ptr<diffusion::Sampler> sampler = model.sampler(steps, x.sizes());
  const models::TextConditioning cond = model.condition(captions, device);
  // Guidance-distilled models embed the scale; the others run classifier-free guidance.
  const bool embedded = model.embeds_guidance();
  if (embedded) model.set_sampling_guidance(guidance_scale);
  const bool guided = !embedded && model.guides(guidance_scale);
  models::TextConditioning both = cond;
  if (guided) {
    // The unconditional branch: the negative prompt's conditioning, through the same path as the
    // captions' (remembered by park_frozen, so a parked model needs no encoder for it).
    both = models::concat_conditioning(
        model.condition(std::vector<std::string>(captions.size(), negative_prompt), device), cond);
  }
  // Generated at the training resolution, uncropped (what models that read the geometry see).
  const at::Tensor geometry = data::uncropped_geometry(guided ? 2 * n : n, resolution, resolution).to(device);
  for (std::size_t i = 0; i < sampler->steps(); ++i) {
    const at::Tensor tt = sampler->timestep(i, guided ? 2 * n : n, device);
    at::Tensor out = model.predict(guided ? at::cat({x, x}) : x, tt, both, geometry);
    if (guided) {
      const auto parts = out.chunk(2);
      out = model.combine_guidance(parts[0], parts[1], guidance_scale);
    }
    x = sampler->step(i, out, x);
  }
  if (embedded) model.set_sampling_guidance(-1);
  x = model.to_images(x);  // the decoder for latent models
  model.train(was_training);
  return x.clamp(-1, 1).to(at::kCPU);
}

io::Image to_image(const at::Tensor& chw) {
  const at::Tensor t = ((chw.to(at::kFloat).clamp(-1, 1) + 1) * 127.5).round().to(at::kByte);
  const at::Tensor rgb = (t.size(0) >= 3 ? t.slice(0, 0, 3) : t.slice(0, 0, 1).expand({3, t.size(1), t.size(2)}))
                             .permute({1, 2, 0}).contiguous();
  io::Image img{static_cast<int>(t.size(2)), static_cast<int>(t.size(1)), {}};
  img.rgb.assign(rgb.data_ptr<std::uint8_t>(), rgb.data_ptr<std::uint8_t>() + rgb.numel());
  return img;
}

io::Image make_grid(const std::vector<io::Image>& images, int columns) {
  if (images.empty()) throw Error(ErrorKind::io, "make_grid: no images");
  constexpr int kGap = 2;
  // Small images are enlarged (nearest neighbour) so each cell is at least 64 pixels wide.
  const int scale = std::max(1, 64 / std::max(1, images[0].width));
  const int w = images[0].width * scale, h = images[0].height * scale;
  const int cols = std::max(1, std::min(columns, static_cast<int>(images.size())));
  const int rows = static_cast<int>((images.size() + cols - 1) / cols);
  io::Image grid{cols * w + (cols + 1) * kGap, rows * h + (rows + 1) * kGap, {}};
  grid.rgb.assign(static_cast<std::size_t>(grid.width) * grid.height * 3, 32);
  for (std::size_t i = 0; i < images.size(); ++i) {
    const int ox = kGap + static_cast<int>(i % cols) * (w + kGap), oy = kGap + static_cast<int>(i / cols) * (h + kGap);
    const int src_w = images[i].width;
    for (int y = 0; y < h; ++y)
      for (int x = 0; x < w; ++x)
        std::copy_n(images[i].rgb.data() + (static_cast<std::size_t>(y / scale) * src_w + x / scale) * 3, 3,
                    grid.rgb.data() + (static_cast<std::size_t>(oy + y) * grid.width + ox + x) * 3);
  }
  return grid;
}

SampleFolder write_samples(models::TrainableModel& model, const config::TrainerConfig& cfg, const at::Device& device,
                           const std::string& samples_root, std::int64_t step, bool write_files) {
  const config::SamplingConfig& sampling = cfg.sampling;
  if (sampling.prompts.empty()) return {};
  const at::Tensor images =
      sample_images(model, sampling.prompts, sampling.images_per_prompt, cfg.data.resolution,
                    models::sampling_steps(cfg), models::sampling_guidance(cfg), sampling.seed, device,
                    sampling.negative_prompt);
  if (!write_files) return {};
  try {
    return write_sample_files(images, sampling, samples_root, step);
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::io) throw;
    return {"", 0, e.what()};
  }
}

SampleFolder write_sample_files(const at::Tensor& images, const config::SamplingConfig& sampling,
                                const std::string& samples_root, std::int64_t step) {
  const fs::path final_dir = fs::path(samples_root) / ("step_" + std::to_string(step));
  const fs::path tmp_dir = fs::path(samples_root) / (".step_" + std::to_string(step) + ".tmp");
  std::error_code ec;
  io::remove_tree(tmp_dir, ec);
  fs::create_directories(tmp_dir, ec);
  if (ec) throw Error(ErrorKind::io, tmp_dir.string() + ": cannot create the sample folder: " + ec.message());
  // Whatever leaves early (a full disk) leaves no half-written folder; once renamed, nothing is left here.
  struct RemoveOnExit {
    fs::path dir;
    ~RemoveOnExit() {
      std::error_code ignored;
      io::remove_tree(dir, ignored);
    }
  } remove_on_exit{tmp_dir};
  std::vector<io::Image> pngs;
  nlohmann::json listing = nlohmann::json::array();
  for (std::int64_t k = 0; k < images.size(0); ++k) {
    char name[32];
    std::snprintf(name, sizeof name, "%03lld.png", static_cast<long long>(k));
    pngs.push_back(to_image(images[k]));
    io::write_png((tmp_dir / name).string(), pngs.back());
    listing.push_back({{"file", name},
                       {"prompt", sampling.prompts[static_cast<std::size_t>(k / sampling.images_per_prompt)]},
                       {"seed", sampling.seed + k}});
  }
  const int columns = sampling.images_per_prompt > 1 ? static_cast<int>(sampling.images_per_prompt)
                                                     : static_cast<int>(std::ceil(std::sqrt(static_cast<double>(pngs.size()))));
  io::write_png((tmp_dir / "grid.png").string(), make_grid(pngs, columns));
  io::write_file_atomic((tmp_dir / "prompts.json").string(), listing.dump(2) + "\n");
  io::remove_tree(final_dir, ec);  // a re-sample of the same step (after a resume) replaces it
  fs::rename(tmp_dir, final_dir, ec);
  if (ec) throw Error(ErrorKind::io, final_dir.string() + ": cannot move the samples into place: " + ec.message());
  return {final_dir.string(), images.size(0)};
}

}  // namespace zs::train
