#pragma once
// DDPM noise schedules as diffusers defines them, the training targets, min-SNR-γ weights,
// and a DDIM sampler (eta 0) that matches diffusers' DDIMScheduler step for step.

#include <cstdint>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <nlohmann/json_fwd.hpp>

#include "diffusion/objective.h"

namespace zs::diffusion {

/// diffusers' scheduler_config.json keys that training and DDIM sampling use.
struct ScheduleConfig {
  std::int64_t num_train_timesteps = 1000;
  double beta_start = 0.00085;
  double beta_end = 0.012;
  std::string beta_schedule = "scaled_linear";  ///< linear | scaled_linear | squaredcos_cap_v2
  std::string prediction_type = "epsilon";      ///< epsilon | v_prediction
  std::int64_t steps_offset = 1;
  bool set_alpha_to_one = false;
  std::string timestep_spacing = "leading";     ///< leading | trailing | linspace
  bool clip_sample = false;                     ///< DDIM clamps predicted x0 to [-1, 1] (pixel-space models)

  /// Parses a scheduler_config.json object; `source` names the file in errors.
  static ScheduleConfig from_json(const nlohmann::json& j, const std::string& source);
  static ScheduleConfig from_file(const std::string& path);
  nlohmann::json to_json() const;
};

/// The forward process: betas and ᾱ_t, noising and targets. All tensors float32 on the CPU;
/// the methods move what they need to the inputs' device. The SD family's objective.
class NoiseSchedule final : public Objective {
 public:
  explicit NoiseSchedule(ScheduleConfig config);
  const ScheduleConfig& config() const { return config_; }
  std::int64_t num_train_timesteps() const { return config_.num_train_timesteps; }
  const at::Tensor& betas() const { return betas_; }                   ///< [T]
  const at::Tensor& alphas_cumprod() const { return alphas_cumprod_; }  ///< [T], ᾱ_t

  /// Integer timesteps uniform in [0, T): at::randint(0, T, {B}, gen), as diffusers' examples.
  at::Tensor sample_timesteps(at::IntArrayRef sample_shape, at::Generator& gen) const override;
  /// The k-th of `count` timesteps at the middles of equal slices of [0, T): (2k+1)·T / (2·count).
  at::Tensor validation_timestep(std::int64_t k, std::int64_t count, at::IntArrayRef sample_shape,
                                 const c10::Device& device) const override;
  /// sqrt(ᾱ_t)·x0 + sqrt(1−ᾱ_t)·noise. x0, noise [B, ...]; t [B] integer.
  at::Tensor add_noise(const at::Tensor& x0, const at::Tensor& noise, const at::Tensor& t) const override;
  /// v = sqrt(ᾱ_t)·noise − sqrt(1−ᾱ_t)·x0.
  at::Tensor velocity(const at::Tensor& x0, const at::Tensor& noise, const at::Tensor& t) const;
  /// What the model learns to predict under config().prediction_type.
  at::Tensor target(const at::Tensor& x0, const at::Tensor& noise, const at::Tensor& t) const;
  /// The denoising loss per sample [B], float32: the mean squared error between the model's
  /// prediction `pred` [B, C, H, W] and target(x0, noise, t), both taken to float32 first
  /// whatever the compute dtype (diffusers' examples/text_to_image/train_text_to_image.py:
  /// F.mse_loss(model_pred.float(), target.float())). Training and validation both use it.
  at::Tensor loss(const at::Tensor& pred, const at::Tensor& x0, const at::Tensor& noise,
                  const at::Tensor& t) const override;
  /// Per-sample loss weights [B] for min-SNR-γ (Hang et al. 2023); gamma <= 0 gives ones.
  at::Tensor min_snr_weights(const at::Tensor& t, double gamma) const;
  at::Tensor weights(const at::Tensor& t, double min_snr_gamma) const override { return min_snr_weights(t, min_snr_gamma); }

 private:
  at::Tensor gather(const at::Tensor& values, const at::Tensor& t, std::int64_t dims) const;
  ScheduleConfig config_;
  at::Tensor betas_, alphas_cumprod_;
};

/// DDIM with eta 0, as diffusers' DDIMScheduler (clip_sample with range 1, no thresholding).
/// Holds its own copy of the schedule (its tensors are shared, not copied).
class DdimSampler final : public Sampler {
 public:
  DdimSampler(const NoiseSchedule& schedule, std::int64_t num_inference_steps);
  /// Timesteps from noisiest to cleanest, e.g. [901, 801, ..., 1] for 10 steps, leading, offset 1.
  const std::vector<std::int64_t>& timesteps() const { return timesteps_; }

  struct StepResult {
    at::Tensor prev_sample;            ///< x_{t-Δ}
    at::Tensor pred_original_sample;   ///< predicted x0
  };
  /// One step from timestep `t` given the model's prediction (epsilon or v per the schedule).
  StepResult step(const at::Tensor& model_output, std::int64_t t, const at::Tensor& sample) const;

  std::size_t steps() const override { return timesteps_.size(); }
  at::Tensor timestep(std::size_t i, std::int64_t n, const c10::Device& device) const override;
  at::Tensor step(std::size_t i, const at::Tensor& model_output, const at::Tensor& sample) const override;

 private:
  NoiseSchedule schedule_;
  std::int64_t step_ratio_;
  std::vector<std::int64_t> timesteps_;
  double final_alpha_cumprod_;
};

}  // namespace zs::diffusion
