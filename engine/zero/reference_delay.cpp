#include "zero/reference_delay.h"

#include <utility>

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

namespace zs::zero {

ReferenceDelay::ReferenceDelay(NamedTensors parameters, std::int64_t warmup)
    : params_(std::move(parameters)), warmup_(warmup) {}

void ReferenceDelay::begin_forward() {
  c10::NoGradGuard no_grad;
  masters_.clear();
  for (std::size_t i = 0; i < lagged_.size(); ++i) {
    masters_.push_back(params_[i].second.clone());
    params_[i].second.copy_(lagged_[i]);
  }
}

void ReferenceDelay::end_backward() {
  c10::NoGradGuard no_grad;
  for (std::size_t i = 0; i < masters_.size(); ++i) params_[i].second.copy_(masters_[i]);
  masters_.clear();
}

void ReferenceDelay::before_step(std::int64_t step) {
  lagged_.clear();
  if (step > warmup_)
    for (const auto& [name, p] : params_) lagged_.push_back(p.detach().clone());
}

NamedTensors ReferenceDelay::held() const {
  NamedTensors out = params_;
  for (std::size_t i = 0; i < lagged_.size(); ++i) out[i].second = lagged_[i];
  return out;
}

}  // namespace zs::zero
