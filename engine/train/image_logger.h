#pragma once
// The image logger: samples the model with its family's sampler (DDIM, FlowMatch Euler) and
// guidance (classifier-free, or embedded for guidance-distilled models) and writes
// samples/step_<N>/ (000.png ... in generation order, grid.png, prompts.json) atomically.

#include <cstdint>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "io/image.h"
#include "models/trainable_model.h"
#include "settings/trainer_config.h"

namespace zs::train {

/// Generates images: `prompts` × `images_per_prompt`; image k (in prompt-major order) starts
/// from noise seeded with `seed + k`, and takes `steps` steps of the model's sampler;
/// `guidance_scale` is classifier-free guidance's scale (1: off), or for models that embed
/// guidance the value they embed; guidance's unconditional branch is conditioned on
/// `negative_prompt` (sampling.negative_prompt; "" the empty prompt). Returns [N, C, R, R] in
/// [-1, 1] on the CPU.
at::Tensor sample_images(models::TrainableModel& model, const std::vector<std::string>& prompts,
                         std::int64_t images_per_prompt, std::int64_t resolution, std::int64_t steps,
                         double guidance_scale, std::int64_t seed, const at::Device& device,
                         const std::string& negative_prompt = "");

/// [C, H, W] in [-1, 1] -> 8-bit RGB (grey for 1 channel; the first 3 channels otherwise).
io::Image to_image(const at::Tensor& chw);
/// A grid with `columns` columns and a 2-pixel gap; images under 64 pixels are enlarged by an
/// integer factor (nearest neighbour) so they can be seen.
io::Image make_grid(const std::vector<io::Image>& images, int columns);

/// Samples per the config's `sampling` section (steps and guidance resolved by the model's family)
/// at data.resolution and writes `samples_root`/step_<step>/ (via a hidden temporary folder,
/// then rename). Returns the folder and the number of images; a file that cannot be written (a
/// full disk) leaves no folder and is reported in `error` instead: samples never end a run.
struct SampleFolder {
  std::string dir;
  std::int64_t count = 0;
  std::string error;  ///< why the images could not be written ("" when they were)
};
/// With `write_files` false the images are only computed (other ranks under ZeRO stage 3,
/// whose collectives the sampler's forward passes take part in).
SampleFolder write_samples(models::TrainableModel& model, const config::TrainerConfig& cfg, const at::Device& device,
                           const std::string& samples_root, std::int64_t step, bool write_files = true);
/// The file part of write_samples: `images` [N, C, H, W] in [-1, 1] as step_<step>/000.png …,
/// grid.png and prompts.json. Throws zs::Error(io) naming the file that cannot be written, and then
/// leaves no temporary folder behind.
SampleFolder write_sample_files(const at::Tensor& images, const config::SamplingConfig& sampling,
                                const std::string& samples_root, std::int64_t step);

}  // namespace zs::train
