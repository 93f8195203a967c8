#include "diffusion/flow_matching.h"

#include <cmath>
#include <stdexcept>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include "core/error.h"

namespace zs::diffusion {

namespace {

template <typename T>
T read(const nlohmann::json& j, const char* key, T fallback, const std::string& source) {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  try {
    return j[key].get<T>();
  } catch (const nlohmann::json::exception&) {
    throw Error(ErrorKind::config, source + ": '" + key + "' has the wrong type (" + j[key].dump() + ")");
  }
}

void refuse_if_set(const nlohmann::json& j, const char* key, const std::string& source) {
  if (j.contains(key) && j[key].is_boolean() && j[key].get<bool>())
    throw Error(ErrorKind::config, source + ": '" + key +
                                       "' is true; ZeroStudio samples flow-matching models with the plain Euler "
                                       "schedule only (set it to false, or remove it)");
}

}  // namespace

FlowScheduleConfig FlowScheduleConfig::from_json(const nlohmann::json& j, const std::string& source) {
  if (!j.is_object()) throw Error(ErrorKind::config, source + ": not a JSON object");
  FlowScheduleConfig c;
  c.num_train_timesteps = read<std::int64_t>(j, "num_train_timesteps", c.num_train_timesteps, source);
  c.shift = read<double>(j, "shift", c.shift, source);
  c.use_dynamic_shifting = read<bool>(j, "use_dynamic_shifting", c.use_dynamic_shifting, source);
  c.base_shift = read<double>(j, "base_shift", c.base_shift, source);
  c.max_shift = read<double>(j, "max_shift", c.max_shift, source);
  c.base_image_seq_len = read<std::int64_t>(j, "base_image_seq_len", c.base_image_seq_len, source);
  c.max_image_seq_len = read<std::int64_t>(j, "max_image_seq_len", c.max_image_seq_len, source);
  c.time_shift_type = read<std::string>(j, "time_shift_type", c.time_shift_type, source);
  c.shift_terminal = read<double>(j, "shift_terminal", c.shift_terminal, source);
  for (const char* k : {"use_karras_sigmas", "use_exponential_sigmas", "use_beta_sigmas", "invert_sigmas",
                        "stochastic_sampling"})
    refuse_if_set(j, k, source);
  if (c.time_shift_type != "exponential" && c.time_shift_type != "linear")
    throw Error(ErrorKind::config, source + ": 'time_shift_type' is '" + c.time_shift_type +
                                       "'; it must be exponential or linear");
  if (c.num_train_timesteps < 1)
    throw Error(ErrorKind::config, source + ": 'num_train_timesteps' must be at least 1");
  if (!(c.shift > 0)) throw Error(ErrorKind::config, source + ": 'shift' must be positive");
  if (c.use_dynamic_shifting && c.max_image_seq_len == c.base_image_seq_len)
    throw Error(ErrorKind::config, source + ": 'base_image_seq_len' and 'max_image_seq_len' must differ");
  if (c.shift_terminal < 0 || c.shift_terminal >= 1)
    throw Error(ErrorKind::config, source + ": 'shift_terminal' must be in [0, 1)");
  return c;
}

nlohmann::json FlowScheduleConfig::to_json() const {
  nlohmann::json j = {{"_class_name", "FlowMatchEulerDiscreteScheduler"},
                      {"num_train_timesteps", num_train_timesteps},
                      {"shift", shift},
                      {"use_dynamic_shifting", use_dynamic_shifting},
                      {"base_shift", base_shift},
                      {"max_shift", max_shift},
                      {"base_image_seq_len", base_image_seq_len},
                      {"max_image_seq_len", max_image_seq_len},
                      {"time_shift_type", time_shift_type}};
  j["shift_terminal"] = shift_terminal > 0 ? nlohmann::json(shift_terminal) : nlohmann::json(nullptr);
  return j;
}

double calculate_shift(const FlowScheduleConfig& c, std::int64_t image_seq_len) {
  const double m = (c.max_shift - c.base_shift) / static_cast<double>(c.max_image_seq_len - c.base_image_seq_len);
  const double b = c.base_shift - m * static_cast<double>(c.base_image_seq_len);
  return static_cast<double>(image_seq_len) * m + b;
}

double flux2_empirical_mu(std::int64_t image_seq_len, std::int64_t steps) {
  const double a1 = 8.73809524e-05, b1 = 1.89833333, a2 = 0.00016927, b2 = 0.45666666;
  const auto seq = static_cast<double>(image_seq_len);
  if (image_seq_len > 4300) return a2 * seq + b2;
  const double m_200 = a2 * seq + b2, m_10 = a1 * seq + b1;
  const double a = (m_200 - m_10) / 190.0, b = m_200 - 200.0 * a;
  return a * static_cast<double>(steps) + b;
}

double shift_sigma(const FlowScheduleConfig& c, double sigma, double mu) {
  if (!c.use_dynamic_shifting) return c.shift * sigma / (1 + (c.shift - 1) * sigma);
  if (sigma <= 0) return 0;
  const double scale = c.time_shift_type == "exponential" ? std::exp(mu) : mu;
  return scale / (scale + (1 / sigma - 1));
}

std::vector<double> sampling_sigmas(const FlowScheduleConfig& c, std::int64_t steps, std::int64_t image_seq_len) {
  if (steps < 1) throw Error(ErrorKind::config, "sampling.steps: " + std::to_string(steps) + " must be at least 1");
  if (steps < 2 && c.shift_terminal > 0)
    throw Error(ErrorKind::config, "sampling.steps: 1 step cannot end at the scheduler's shift_terminal (" +
                                       std::to_string(c.shift_terminal) + "); use 2 or more");
  const double mu = c.empirical_mu ? flux2_empirical_mu(image_seq_len, steps) : calculate_shift(c, image_seq_len);
  // set_timesteps takes the pipeline's sigmas as a float32 array and shifts (and stretches) them
  // in float32 arithmetic, each operation rounded (numpy: a Python float beside a float32 array
  // is a float32): the values here are those float32 numbers. (A model's time embedding takes
  // σ·1000, where one float32 ulp of σ already moves its sinusoid by ~6e-5.)
  const auto f = [](double v) { return static_cast<float>(v); };
  std::vector<float> sigmas;
  const double last = 1.0 / static_cast<double>(steps);
  for (std::int64_t i = 0; i < steps; ++i) {
    // np.linspace(1.0, 1 / steps, steps): start + i·step, the end exact
    const float s = f(steps == 1 ? 1.0 : (i == steps - 1 ? last : 1.0 + static_cast<double>(i) * (last - 1.0) / (steps - 1)));
    if (!c.use_dynamic_shifting) {
      sigmas.push_back(f(c.shift) * s / (1.0f + f(c.shift - 1) * s));
    } else {
      const float scale = f(c.time_shift_type == "exponential" ? std::exp(mu) : mu);
      sigmas.push_back(s <= 0 ? 0.0f : scale / (scale + (1.0f / s - 1.0f)));
    }
  }
  if (c.shift_terminal > 0) {
    // diffusers' stretch_shift_to_terminal: 1 − (1 − σ)/((1 − σ_last)/(1 − terminal))
    const float scale = (1.0f - sigmas.back()) / f(1 - c.shift_terminal);
    for (float& s : sigmas) s = 1.0f - (1.0f - s) / scale;
  }
  std::vector<double> out(sigmas.begin(), sigmas.end());
  out.push_back(0.0);
  return out;
}

FlowMatching::FlowMatching(FlowScheduleConfig config, TimestepSampling sampling, std::int64_t patch)
    : config_(std::move(config)), sampling_(std::move(sampling)), patch_(patch) {
  const std::string& m = sampling_.mode;
  if (m != "uniform" && m != "sigmoid" && m != "logit_normal" && m != "shift")
    throw Error(ErrorKind::config, "training.timestep_sampling: '" + m +
                                       "' is not one of uniform, sigmoid, logit_normal, shift");
  if (patch_ < 1) throw std::invalid_argument("FlowMatching: patch must be at least 1");
}

std::int64_t FlowMatching::tokens(at::IntArrayRef shape) const {
  if (shape.size() < 4) throw std::invalid_argument("FlowMatching: samples are [B, C, h, w]");
  return (shape[2] / patch_) * (shape[3] / patch_);
}

double FlowMatching::shifted(double sigma, at::IntArrayRef shape) const {
  return shift_sigma(config_, sigma, calculate_shift(config_, tokens(shape)));
}

at::Tensor FlowMatching::sample_timesteps(at::IntArrayRef shape, at::Generator& gen) const {
  const std::int64_t b = shape[0];
  const std::string& m = sampling_.mode;
  at::Tensor sigma;
  if (m == "uniform") {
    sigma = at::rand({b}, gen);
  } else if (m == "logit_normal") {
    sigma = at::sigmoid(at::randn({b}, gen) * sampling_.logit_std + sampling_.logit_mean);
  } else {  // sigmoid, shift
    sigma = at::sigmoid(at::randn({b}, gen) * sampling_.sigmoid_scale);
  }
  if (m == "shift") {
    at::Tensor d = sigma.to(at::kDouble).contiguous();
    double* p = d.data_ptr<double>();
    for (std::int64_t i = 0; i < b; ++i) p[i] = shifted(p[i], shape);
    sigma = d.to(at::kFloat);
  }
  return sigma;
}

at::Tensor FlowMatching::validation_timestep(std::int64_t k, std::int64_t count, at::IntArrayRef shape,
                                             const c10::Device& device) const {
  double sigma = (2.0 * static_cast<double>(k) + 1.0) / (2.0 * static_cast<double>(count));
  if (sampling_.mode == "shift") sigma = shifted(sigma, shape);
  return at::full({shape[0]}, sigma, at::TensorOptions().dtype(at::kFloat).device(device));
}

at::Tensor FlowMatching::add_noise(const at::Tensor& x0, const at::Tensor& noise, const at::Tensor& sigma) const {
  std::vector<std::int64_t> view(static_cast<std::size_t>(x0.dim()), 1);
  view[0] = x0.size(0);
  const at::Tensor s = sigma.to(x0.device(), x0.scalar_type()).reshape(view);
  return (1 - s) * x0 + s * noise;
}

at::Tensor FlowMatching::loss(const at::Tensor& pred, const at::Tensor& x0, const at::Tensor& noise,
                              const at::Tensor& sigma) const {
  (void)sigma;
  return (pred.to(at::kFloat) - (noise.to(at::kFloat) - x0.to(at::kFloat))).pow(2).flatten(1).mean(1);
}

at::Tensor FlowMatching::weights(const at::Tensor& sigma, double min_snr_gamma) const {
  (void)min_snr_gamma;
  return at::ones({sigma.numel()}, at::TensorOptions().device(sigma.device()));
}

FlowMatchEulerSampler::FlowMatchEulerSampler(const FlowScheduleConfig& config, std::int64_t steps,
                                             std::int64_t image_seq_len)
    : sigmas_(sampling_sigmas(config, steps, image_seq_len)) {}

at::Tensor FlowMatchEulerSampler::timestep(std::size_t i, std::int64_t n, const c10::Device& device) const {
  return at::full({n}, sigmas_.at(i), at::TensorOptions().dtype(at::kFloat).device(device));
}

at::Tensor FlowMatchEulerSampler::step(std::size_t i, const at::Tensor& model_output, const at::Tensor& sample) const {
  // diffusers: dt = σ_next − σ in float32 (the sigmas tensor), the sample upcast to float32.
  // Float64 models (the exactness tests) keep their precision.
  if (sample.scalar_type() == at::kDouble) return sample + (sigmas_.at(i + 1) - sigmas_.at(i)) * model_output;
  const float dt = static_cast<float>(sigmas_.at(i + 1)) - static_cast<float>(sigmas_.at(i));
  return (sample.to(at::kFloat) + dt * model_output).to(model_output.scalar_type());
}

}  // namespace zs::diffusion
