#include "zero/reference_adamw.h"

#include <cmath>

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include "core/error.h"

namespace zs::zero {

ReferenceAdamW::ReferenceAdamW(NamedTensors parameters, double beta1, double beta2, double eps, double weight_decay)
    : params_(std::move(parameters)), beta1_(beta1), beta2_(beta2), eps_(eps), weight_decay_(weight_decay) {
  for (const auto& [name, p] : params_) {
    exp_avg_.push_back(at::zeros_like(p, at::MemoryFormat::Contiguous));
    exp_avg_sq_.push_back(at::zeros_like(p, at::MemoryFormat::Contiguous));
  }
}

void ReferenceAdamW::zero_grad() {
  for (auto& [name, p] : params_) {
    at::Tensor& g = p.mutable_grad();
    if (g.defined()) g.zero_();
  }
}

double ReferenceAdamW::clip_grad_norm(double max_norm) {
  c10::NoGradGuard no_grad;
  std::vector<at::Tensor> norms;
  for (const auto& [name, p] : params_)
    if (p.grad().defined()) norms.push_back(p.grad().norm());
  if (norms.empty()) return 0.0;
  const double total = at::stack(norms).norm().item<double>();
  if (max_norm > 0 && total > max_norm) {
    const double scale = max_norm / (total + 1e-6);
    for (auto& [name, p] : params_)
      if (p.grad().defined()) p.mutable_grad().mul_(scale);
  }
  return total;
}

void ReferenceAdamW::set_lr_scale(const std::string& prefix, double scale) {
  lr_scale_.resize(params_.size(), 1.0);
  for (std::size_t i = 0; i < params_.size(); ++i)
    if (params_[i].first.starts_with(prefix)) lr_scale_[i] = scale;
}

void ReferenceAdamW::step(double step_lr) {
  c10::NoGradGuard no_grad;
  ++step_;
  const double c1 = 1.0 - std::pow(beta1_, static_cast<double>(step_));
  const double c2 = 1.0 - std::pow(beta2_, static_cast<double>(step_));
  const double sqrt_c2 = std::sqrt(c2);
  for (std::size_t i = 0; i < params_.size(); ++i) {
    at::Tensor& p = params_[i].second;
    const at::Tensor& g = p.grad();
    if (!g.defined()) continue;
    const double lr = step_lr * (lr_scale_.empty() ? 1.0 : lr_scale_[i]);
    const double step_size = lr / c1;
    if (weight_decay_ > 0) p.mul_(1.0 - lr * weight_decay_);
    exp_avg_[i].mul_(beta1_).add_(g, 1.0 - beta1_);
    exp_avg_sq_[i].mul_(beta2_).addcmul_(g, g, 1.0 - beta2_);
    const at::Tensor denom = exp_avg_sq_[i].sqrt().div_(sqrt_c2).add_(eps_);
    p.addcdiv_(exp_avg_[i], denom, -step_size);
  }
}

NamedTensors ReferenceAdamW::state() const {
  NamedTensors out;
  for (std::size_t i = 0; i < params_.size(); ++i) {
    out.emplace_back("exp_avg." + params_[i].first, exp_avg_[i]);
    out.emplace_back("exp_avg_sq." + params_[i].first, exp_avg_sq_[i]);
  }
  out.emplace_back("step", at::full({1}, step_, at::kLong));
  return out;
}

void ReferenceAdamW::load_state(const std::function<at::Tensor(const std::string&)>& get) {
  c10::NoGradGuard no_grad;
  for (std::size_t i = 0; i < params_.size(); ++i) {
    const at::Tensor m = get("exp_avg." + params_[i].first), v = get("exp_avg_sq." + params_[i].first);
    if (m.sizes() != exp_avg_[i].sizes() || v.sizes() != exp_avg_sq_[i].sizes())
      throw Error(ErrorKind::checkpoint, "optimizer state for " + params_[i].first + " has the wrong shape");
    exp_avg_[i].copy_(m);
    exp_avg_sq_[i].copy_(v);
  }
  step_ = get("step").item<std::int64_t>();
}

ModelStateBytes ReferenceAdamW::model_state() const {
  ModelStateBytes b;
  for (std::size_t i = 0; i < params_.size(); ++i) {
    const auto& p = params_[i].second;
    b.parameters += p.numel() * static_cast<std::int64_t>(p.element_size());
    if (p.grad().defined()) b.gradients += p.grad().numel() * static_cast<std::int64_t>(p.grad().element_size());
    b.optimizer_states += 2 * exp_avg_[i].numel() * static_cast<std::int64_t>(exp_avg_[i].element_size());
  }
  return b;
}

}  // namespace zs::zero
