#include "train/ema.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include "core/error.h"

namespace zs::train {

Ema::Ema(const NamedTensors& parameters, double decay) : decay_(decay) {
  for (const auto& [name, p] : parameters) shadow_.emplace_back(name, p.detach().to(at::kCPU, at::kFloat, false, true));
}

void Ema::update(const NamedTensors& parameters) {
  c10::NoGradGuard no_grad;
  for (std::size_t i = 0; i < shadow_.size(); ++i)
    shadow_[i].second.lerp_(parameters[i].second.detach().to(at::kCPU, at::kFloat), 1.0 - decay_);
}

void Ema::swap_into(NamedTensors& parameters) {
  c10::NoGradGuard no_grad;
  for (std::size_t i = 0; i < shadow_.size(); ++i) {
    at::Tensor live = parameters[i].second.detach().to(at::kCPU, at::kFloat, false, true);
    parameters[i].second.copy_(shadow_[i].second);
    shadow_[i].second.copy_(live);
  }
}

void Ema::load(const std::function<at::Tensor(const std::string&)>& get) {
  c10::NoGradGuard no_grad;
  for (auto& [name, t] : shadow_) {
    const at::Tensor src = get(name);
    if (src.sizes() != t.sizes()) throw Error(ErrorKind::checkpoint, "EMA tensor " + name + " has the wrong shape");
    t.copy_(src);
  }
}

}  // namespace zs::train
