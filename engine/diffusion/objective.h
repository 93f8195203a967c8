#pragma once
// What a family trains its denoiser toward and how it samples: the interfaces the trainer,
// validation and the image logger use, so that none of them knows whether a model learns DDPM's
// ε or v (diffusion/noise_schedule.h) or, for flow-matching families, a velocity.

#include <cstddef>
#include <cstdint>

#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>
#include <c10/util/ArrayRef.h>
#include <c10/core/Device.h>

namespace zs::diffusion {

/// The training objective: timesteps, the noised input and the loss.
class Objective {
 public:
  virtual ~Objective() = default;
  /// Random timesteps for samples of `sample_shape` [B, C, h, w] (one per sample) as the denoiser
  /// takes them, drawn from `gen` on the CPU. Objectives that shift by image size read h and w.
  virtual at::Tensor sample_timesteps(at::IntArrayRef sample_shape, at::Generator& gen) const = 0;
  /// The k-th of `count` evenly spread timesteps for validation (the same for every run of the
  /// model), as the denoiser takes them, for a batch of `sample_shape`, on `device`.
  virtual at::Tensor validation_timestep(std::int64_t k, std::int64_t count, at::IntArrayRef sample_shape,
                                         const c10::Device& device) const = 0;
  /// The denoiser's input at timesteps `t` [B] for clean samples `x0` and `noise` [B, ...].
  virtual at::Tensor add_noise(const at::Tensor& x0, const at::Tensor& noise, const at::Tensor& t) const = 0;
  /// The loss per sample [B], float32, of the prediction `pred` against the objective's target.
  virtual at::Tensor loss(const at::Tensor& pred, const at::Tensor& x0, const at::Tensor& noise,
                          const at::Tensor& t) const = 0;
  /// Per-sample loss weights [B] (min-SNR-γ where the objective has it; ones for gamma <= 0).
  virtual at::Tensor weights(const at::Tensor& t, double min_snr_gamma) const = 0;
};

/// A sampler: a fixed list of steps from noise to a clean sample.
class Sampler {
 public:
  virtual ~Sampler() = default;
  virtual std::size_t steps() const = 0;
  /// The denoiser's timestep input at step `i` for a batch of `n` on `device`.
  virtual at::Tensor timestep(std::size_t i, std::int64_t n, const c10::Device& device) const = 0;
  /// The sample after step `i` given the denoiser's output for `sample`.
  virtual at::Tensor step(std::size_t i, const at::Tensor& model_output, const at::Tensor& sample) const = 0;
};

}  // namespace zs::diffusion
