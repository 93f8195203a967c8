#include "zero/reference_ema.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

namespace zs::zero {

ReferenceEma::ReferenceEma(const NamedTensors& parameters, double decay) : decay_(decay) {
  for (const auto& [name, p] : parameters) shadow_.emplace_back(name, p.detach().to(at::kCPU, at::kFloat, false, true));
}

void ReferenceEma::update(const NamedTensors& parameters) {
  c10::NoGradGuard no_grad;
  for (std::size_t i = 0; i < shadow_.size(); ++i)
    shadow_[i].second.lerp_(parameters[i].second.detach().to(at::kCPU, at::kFloat), 1.0 - decay_);
}

void ReferenceEma::swap_into(NamedTensors& parameters) {
  c10::NoGradGuard no_grad;
  for (std::size_t i = 0; i < shadow_.size(); ++i) {
    at::Tensor live = parameters[i].second.detach().to(at::kCPU, at::kFloat, false, true);
    parameters[i].second.copy_(shadow_[i].second);
    shadow_[i].second.copy_(live);
  }
}

}  // namespace zs::zero
