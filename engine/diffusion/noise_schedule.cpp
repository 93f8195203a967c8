#include "diffusion/noise_schedule.h"

#include <cmath>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/json_file.h"

namespace zs::diffusion {

using nlohmann::json;

ScheduleConfig ScheduleConfig::from_json(const json& j, const std::string& source) {
  ScheduleConfig c;
  try {
    if (j.contains("num_train_timesteps")) c.num_train_timesteps = j["num_train_timesteps"].get<std::int64_t>();
    if (j.contains("beta_start")) c.beta_start = j["beta_start"].get<double>();
    if (j.contains("beta_end")) c.beta_end = j["beta_end"].get<double>();
    if (j.contains("beta_schedule")) c.beta_schedule = j["beta_schedule"].get<std::string>();
    if (j.contains("prediction_type")) c.prediction_type = j["prediction_type"].get<std::string>();
    if (j.contains("steps_offset")) c.steps_offset = j["steps_offset"].get<std::int64_t>();
    if (j.contains("set_alpha_to_one")) c.set_alpha_to_one = j["set_alpha_to_one"].get<bool>();
    if (j.contains("timestep_spacing")) c.timestep_spacing = j["timestep_spacing"].get<std::string>();
    if (j.contains("clip_sample")) c.clip_sample = j["clip_sample"].get<bool>();
    if (j.contains("trained_betas") && !j["trained_betas"].is_null())
      throw Error(ErrorKind::config, source + ": trained_betas: explicit betas are not supported; use beta_schedule");
  } catch (const json::exception& e) {
    throw Error(ErrorKind::config, source + ": " + e.what());
  }
  if (c.beta_schedule != "linear" && c.beta_schedule != "scaled_linear" && c.beta_schedule != "squaredcos_cap_v2")
    throw Error(ErrorKind::config, source + ": beta_schedule: \"" + c.beta_schedule +
                                       "\" is not one of linear, scaled_linear, squaredcos_cap_v2");
  if (c.prediction_type != "epsilon" && c.prediction_type != "v_prediction")
    throw Error(ErrorKind::config, source + ": prediction_type: \"" + c.prediction_type +
                                       "\" is not one of epsilon, v_prediction");
  if (c.timestep_spacing != "leading" && c.timestep_spacing != "trailing" && c.timestep_spacing != "linspace")
    throw Error(ErrorKind::config, source + ": timestep_spacing: \"" + c.timestep_spacing +
                                       "\" is not one of leading, trailing, linspace");
  if (c.num_train_timesteps < 2) throw Error(ErrorKind::config, source + ": num_train_timesteps: must be at least 2");
  return c;
}

ScheduleConfig ScheduleConfig::from_file(const std::string& path) {
  return from_json(io::read_json_file(path, "scheduler config"), path);
}

json ScheduleConfig::to_json() const {
  return json{{"_class_name", "DDPMScheduler"},
              {"_diffusers_version", "0.25.0"},
              {"num_train_timesteps", num_train_timesteps},
              {"beta_start", beta_start},
              {"beta_end", beta_end},
              {"beta_schedule", beta_schedule},
              {"prediction_type", prediction_type},
              {"steps_offset", steps_offset},
              {"set_alpha_to_one", set_alpha_to_one},
              {"timestep_spacing", timestep_spacing},
              {"clip_sample", clip_sample},
              {"trained_betas", nullptr}};
}

NoiseSchedule::NoiseSchedule(ScheduleConfig config) : config_(std::move(config)) {
  const auto n = config_.num_train_timesteps;
  // Computed in float64, stored in float32, as diffusers does (its linspace runs in float32;
  // the difference is below 1e-7).
  const auto f64 = at::TensorOptions().dtype(at::kDouble);
  at::Tensor betas;
  if (config_.beta_schedule == "linear") {
    betas = at::linspace(config_.beta_start, config_.beta_end, n, f64);
  } else if (config_.beta_schedule == "scaled_linear") {
    betas = at::linspace(std::sqrt(config_.beta_start), std::sqrt(config_.beta_end), n, f64).pow(2);
  } else {  // squaredcos_cap_v2: Nichol & Dhariwal's cosine, betas capped at 0.999
    auto alpha_bar = [](double t) { return std::pow(std::cos((t + 0.008) / 1.008 * M_PI / 2), 2); };
    std::vector<double> b(n);
    for (std::int64_t i = 0; i < n; ++i) {
      const double t1 = static_cast<double>(i) / n, t2 = static_cast<double>(i + 1) / n;
      b[i] = std::min(1.0 - alpha_bar(t2) / alpha_bar(t1), 0.999);
    }
    betas = at::tensor(b, f64);
  }
  betas_ = betas.to(at::kFloat);
  alphas_cumprod_ = at::cumprod(1.0 - betas_, 0);
}

at::Tensor NoiseSchedule::gather(const at::Tensor& values, const at::Tensor& t, std::int64_t dims) const {
  at::Tensor v = values.to(t.device()).index_select(0, t.to(at::kLong).reshape({-1}));
  std::vector<std::int64_t> shape(static_cast<std::size_t>(dims), 1);
  shape[0] = v.size(0);
  return v.reshape(shape);
}

at::Tensor NoiseSchedule::add_noise(const at::Tensor& x0, const at::Tensor& noise, const at::Tensor& t) const {
  const at::Tensor a = gather(alphas_cumprod_, t, x0.dim()).to(x0.scalar_type());
  return a.sqrt() * x0 + (1 - a).sqrt() * noise;
}

at::Tensor NoiseSchedule::velocity(const at::Tensor& x0, const at::Tensor& noise, const at::Tensor& t) const {
  const at::Tensor a = gather(alphas_cumprod_, t, x0.dim()).to(x0.scalar_type());
  return a.sqrt() * noise - (1 - a).sqrt() * x0;
}

at::Tensor NoiseSchedule::sample_timesteps(at::IntArrayRef sample_shape, at::Generator& gen) const {
  return at::randint(0, config_.num_train_timesteps, {sample_shape[0]}, gen, at::kLong);
}

at::Tensor NoiseSchedule::validation_timestep(std::int64_t k, std::int64_t count, at::IntArrayRef sample_shape,
                                              const c10::Device& device) const {
  const std::int64_t t = (2 * k + 1) * config_.num_train_timesteps / (2 * count);
  return at::full({sample_shape[0]}, t, at::TensorOptions().dtype(at::kLong).device(device));
}

at::Tensor NoiseSchedule::target(const at::Tensor& x0, const at::Tensor& noise, const at::Tensor& t) const {
  return config_.prediction_type == "v_prediction" ? velocity(x0, noise, t) : noise;
}

at::Tensor NoiseSchedule::loss(const at::Tensor& pred, const at::Tensor& x0, const at::Tensor& noise,
                               const at::Tensor& t) const {
  return (pred.to(at::kFloat) - target(x0, noise, t).to(at::kFloat)).pow(2).flatten(1).mean(1);
}

at::Tensor NoiseSchedule::min_snr_weights(const at::Tensor& t, double gamma) const {
  if (gamma <= 0) return at::ones({t.numel()}, at::TensorOptions().device(t.device()));
  const at::Tensor a = gather(alphas_cumprod_, t, 1);
  const at::Tensor snr = a / (1 - a);
  const at::Tensor clipped = at::clamp_max(snr, gamma);
  return config_.prediction_type == "v_prediction" ? clipped / (snr + 1) : clipped / snr;
}

DdimSampler::DdimSampler(const NoiseSchedule& schedule, std::int64_t steps) : schedule_(schedule) {
  const auto& c = schedule.config();
  const std::int64_t T = c.num_train_timesteps;
  if (steps < 1 || steps > T)
    throw Error(ErrorKind::config, "sampling.steps: " + std::to_string(steps) + " must be between 1 and " +
                                       std::to_string(T));
  step_ratio_ = T / steps;
  if (c.timestep_spacing == "leading") {
    for (std::int64_t i = steps - 1; i >= 0; --i) timesteps_.push_back(i * step_ratio_ + c.steps_offset);
  } else if (c.timestep_spacing == "trailing") {
    // diffusers: np.round(np.arange(T, 0, -T / steps)) - 1. np.round rounds halves to even, as
    // std::nearbyint does in the default rounding mode (std::llround would round them up).
    const double ratio = static_cast<double>(T) / steps;
    for (std::int64_t i = 0; i < steps; ++i)
      timesteps_.push_back(static_cast<std::int64_t>(std::nearbyint(T - i * ratio)) - 1);
  } else {  // linspace: np.linspace(0, T - 1, steps).round()[::-1], i·step with the end exact
    const double step = static_cast<double>(T - 1) / static_cast<double>(std::max<std::int64_t>(steps - 1, 1));
    for (std::int64_t i = steps - 1; i >= 0; --i)
      timesteps_.push_back(i == steps - 1 && steps > 1 ? T - 1 : static_cast<std::int64_t>(std::nearbyint(i * step)));
  }
  for (auto& t : timesteps_) t = std::clamp<std::int64_t>(t, 0, T - 1);
  final_alpha_cumprod_ = c.set_alpha_to_one ? 1.0 : schedule.alphas_cumprod()[0].item<double>();
}

DdimSampler::StepResult DdimSampler::step(const at::Tensor& model_output, std::int64_t t, const at::Tensor& sample) const {
  const auto& ac = schedule_.alphas_cumprod();
  const std::int64_t prev = t - step_ratio_;
  const double a = ac[t].item<double>();
  const double a_prev = prev >= 0 ? ac[prev].item<double>() : final_alpha_cumprod_;
  at::Tensor x0, eps;
  if (schedule_.config().prediction_type == "v_prediction") {
    x0 = std::sqrt(a) * sample - std::sqrt(1 - a) * model_output;
    eps = std::sqrt(a) * model_output + std::sqrt(1 - a) * sample;
  } else {
    eps = model_output;
    x0 = (sample - std::sqrt(1 - a) * model_output) / std::sqrt(a);
  }
  // As diffusers: the clamped x0 feeds the step, the noise estimate stays the model's.
  if (schedule_.config().clip_sample) x0 = x0.clamp(-1.0, 1.0);
  return {std::sqrt(a_prev) * x0 + std::sqrt(1 - a_prev) * eps, x0};
}

at::Tensor DdimSampler::timestep(std::size_t i, std::int64_t n, const c10::Device& device) const {
  return at::full({n}, timesteps_.at(i), at::TensorOptions().dtype(at::kLong).device(device));
}

at::Tensor DdimSampler::step(std::size_t i, const at::Tensor& model_output, const at::Tensor& sample) const {
  return step(model_output, timesteps_.at(i), sample).prev_sample;
}

}  // namespace zs::diffusion
