#pragma once
// Rectified flow, the objective of the flow-matching transformer families (Flux.1, Qwen-Image):
// x_σ = (1 − σ)·x0 + σ·ε, the denoiser predicts the velocity ε − x0; training draws σ by
// training.timestep_sampling, shifted for the image size as the family's scheduler shifts;
// samples follow diffusers' FlowMatchEulerDiscreteScheduler (diffusers
// src/diffusers/schedulers/scheduling_flow_match_euler_discrete.py) with the sigmas FluxPipeline
// and QwenImagePipeline give it (pipeline_flux.py: linspace(1, 1/N, N), calculate_shift).

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "diffusion/objective.h"

namespace zs::diffusion {

/// The scheduler_config.json keys of diffusers' FlowMatchEulerDiscreteScheduler that training and
/// sampling use (karras/exponential/beta sigmas, inverted and stochastic sampling are refused).
struct FlowScheduleConfig {
  std::int64_t num_train_timesteps = 1000;
  double shift = 1.0;                  ///< the static shift (use_dynamic_shifting false)
  bool use_dynamic_shifting = false;   ///< shift by the image's sequence length (mu)
  double base_shift = 0.5, max_shift = 1.15;
  std::int64_t base_image_seq_len = 256, max_image_seq_len = 4096;
  std::string time_shift_type = "exponential";  ///< exponential | linear
  double shift_terminal = 0;           ///< > 0: sigmas stretched so the last non-zero one is this
  /// FLUX.2's pipelines: sampling's mu is flux2_empirical_mu (the image's tokens and the step
  /// count) instead of calculate_shift. Not in scheduler_config.json: the family sets it.
  bool empirical_mu = false;

  /// Parses a scheduler_config.json object; `source` names the file in errors, which name the key.
  static FlowScheduleConfig from_json(const nlohmann::json& j, const std::string& source);
  nlohmann::json to_json() const;
};

/// mu for an image of `image_seq_len` packed tokens: linear between (base_image_seq_len,
/// base_shift) and (max_image_seq_len, max_shift), as pipeline_flux.py's calculate_shift.
double calculate_shift(const FlowScheduleConfig& c, std::int64_t image_seq_len);

/// FLUX.2's mu (pipeline_flux2.py compute_empirical_mu, from BFL's flux2 sampling.py): above 4300
/// tokens 0.00016927·seq + 0.45666666; below, the line through its values at 10 and 200 steps
/// (slopes 8.73809524e-05 and 0.00016927 per token) evaluated at `steps`.
double flux2_empirical_mu(std::int64_t image_seq_len, std::int64_t steps);

/// The scheduler's shift of one sigma in (0, 1]: with dynamic shifting the time shift at `mu`
/// (exponential: e^mu / (e^mu + 1/σ − 1); linear: mu / (mu + 1/σ − 1)), else the static
/// shift·σ / (1 + (shift − 1)·σ).
double shift_sigma(const FlowScheduleConfig& c, double sigma, double mu);

/// The sampling sigmas for `steps` steps at `image_seq_len` tokens, as FluxPipeline hands them to
/// set_timesteps: linspace(1, 1/steps, steps) shifted (shift_sigma at calculate_shift's mu, or
/// flux2_empirical_mu's, then shift_terminal's stretch), followed by 0. steps + 1 values.
std::vector<double> sampling_sigmas(const FlowScheduleConfig& c, std::int64_t steps, std::int64_t image_seq_len);

/// How training draws σ (training.timestep_sampling).
struct TimestepSampling {
  std::string mode = "shift";  ///< uniform | sigmoid | logit_normal | shift
  double sigmoid_scale = 1.0;  ///< sigmoid, shift: σ = sigmoid(scale · N(0, 1))
  double logit_mean = 0.0, logit_std = 1.0;  ///< logit_normal: σ = sigmoid(N(mean, std))
};

/// Rectified flow as a training objective. Timesteps are σ in [0, 1] (float32), as the
/// flow-matching denoisers take them (they scale by 1000 themselves).
class FlowMatching final : public Objective {
 public:
  /// `patch`: image latents per token side (Flux and Qwen-Image pack 2×2), so a sample of
  /// [B, C, h, w] is (h/patch)·(w/patch) tokens for the shift.
  FlowMatching(FlowScheduleConfig config, TimestepSampling sampling, std::int64_t patch);
  const FlowScheduleConfig& config() const { return config_; }
  /// σ per sample by the sampling mode; "shift" then shifts it for the sample's size as the
  /// scheduler shifts sampling sigmas (shift_sigma at calculate_shift of its tokens).
  at::Tensor sample_timesteps(at::IntArrayRef sample_shape, at::Generator& gen) const override;
  /// The middle of the k-th of `count` equal slices of [0, 1], shifted as training shifts.
  at::Tensor validation_timestep(std::int64_t k, std::int64_t count, at::IntArrayRef sample_shape,
                                 const c10::Device& device) const override;
  /// (1 − σ)·x0 + σ·noise, σ [B] broadcast over the sample.
  at::Tensor add_noise(const at::Tensor& x0, const at::Tensor& noise, const at::Tensor& sigma) const override;
  /// The mean squared error per sample [B] of `pred` against noise − x0, both in float32.
  at::Tensor loss(const at::Tensor& pred, const at::Tensor& x0, const at::Tensor& noise,
                  const at::Tensor& sigma) const override;
  /// Ones: flow matching has no min-SNR weighting (the family refuses training.min_snr_gamma).
  at::Tensor weights(const at::Tensor& sigma, double min_snr_gamma) const override;
  /// Tokens of a sample of `sample_shape` [B, C, h, w].
  std::int64_t tokens(at::IntArrayRef sample_shape) const;

 private:
  double shifted(double sigma, at::IntArrayRef sample_shape) const;
  FlowScheduleConfig config_;
  TimestepSampling sampling_;
  std::int64_t patch_;
};

/// FlowMatchEulerDiscreteScheduler's deterministic Euler step over sampling_sigmas: the denoiser
/// sees σ_i, and x ← x + (σ_{i+1} − σ_i)·v computed in float32 (as diffusers upcasts), returned
/// in the output's dtype.
class FlowMatchEulerSampler final : public Sampler {
 public:
  FlowMatchEulerSampler(const FlowScheduleConfig& config, std::int64_t steps, std::int64_t image_seq_len);
  const std::vector<double>& sigmas() const { return sigmas_; }
  std::size_t steps() const override { return sigmas_.size() - 1; }
  at::Tensor timestep(std::size_t i, std::int64_t n, const c10::Device& device) const override;
  at::Tensor step(std::size_t i, const at::Tensor& model_output, const at::Tensor& sample) const override;

 private:
  std::vector<double> sigmas_;
};

}  // namespace zs::diffusion
