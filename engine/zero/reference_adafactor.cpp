#include "zero/reference_adafactor.h"

#include <algorithm>
#include <cmath>

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include "core/error.h"

namespace zs::zero {

namespace {

double rms(const at::Tensor& t) { return t.norm().item<double>() / std::sqrt(static_cast<double>(t.numel())); }

}  // namespace

ReferenceAdafactor::ReferenceAdafactor(NamedTensors parameters, AdafactorOptions options)
    : params_(std::move(parameters)), o_(options) {
  if (o_.warmup_init && !o_.relative_step)
    throw Error(ErrorKind::config, "optimizer.adafactor.warmup_init needs optimizer.adafactor.relative_step: true");
  for (const auto& [name, p] : params_) {
    const auto opts = p.options();
    Slot s;
    if (o_.beta1) s.exp_avg = at::zeros(p.sizes(), opts);
    if (p.dim() >= 2) {
      const auto shape = p.sizes().vec();
      std::vector<std::int64_t> row(shape.begin(), shape.end() - 1), col(shape.begin(), shape.end() - 2);
      col.push_back(shape.back());
      s.row = at::zeros(row, opts);
      s.col = at::zeros(col, opts);
    } else {
      s.sq = at::zeros(p.sizes(), opts);
    }
    slots_.push_back(std::move(s));
  }
}

void ReferenceAdafactor::step(std::optional<double> lr) {
  if (o_.relative_step == lr.has_value())
    throw Error(ErrorKind::config, o_.relative_step ? "Adafactor: relative_step computes the learning rate; give none"
                                                    : "Adafactor: a learning rate is needed without relative_step");
  c10::NoGradGuard no_grad;
  ++step_;
  const double t = static_cast<double>(step_);
  const double beta2t = 1.0 - std::pow(t, o_.decay_rate);
  for (std::size_t i = 0; i < params_.size(); ++i) {
    at::Tensor& p = params_[i].second;
    if (!p.grad().defined()) continue;
    Slot& s = slots_[i];
    const at::Tensor grad = p.grad().to(s.exp_avg.defined() ? s.exp_avg.scalar_type()
                                                            : (s.sq.defined() ? s.sq : s.row).scalar_type());
    at::Tensor w = p.detach().to(grad.scalar_type());
    // The step size: the parameter's RMS before the update, as transformers takes it.
    double step_size = lr.value_or(0);
    if (o_.relative_step) step_size = std::min(o_.warmup_init ? 1e-6 * t : 1e-2, 1.0 / std::sqrt(t));
    if (o_.scale_parameter) step_size *= std::max(o_.eps2, rms(w));
    const at::Tensor squared = grad * grad + o_.eps1;
    at::Tensor update;
    if (s.row.defined()) {
      s.row.mul_(beta2t).add_(squared.mean(-1), 1.0 - beta2t);
      s.col.mul_(beta2t).add_(squared.mean(-2), 1.0 - beta2t);
      const at::Tensor r = (s.row / s.row.mean(-1, true)).rsqrt().unsqueeze(-1);
      const at::Tensor c = s.col.unsqueeze(-2).rsqrt();
      update = r * c * grad;
    } else {
      s.sq.mul_(beta2t).add_(squared, 1.0 - beta2t);
      update = s.sq.rsqrt() * grad;
    }
    update = update / std::max(1.0, rms(update) / o_.clip_threshold) * step_size;
    if (o_.beta1) {
      s.exp_avg.mul_(*o_.beta1).add_(update, 1.0 - *o_.beta1);
      update = s.exp_avg;
    }
    if (o_.weight_decay != 0) w.add_(w, -o_.weight_decay * step_size);
    w.sub_(update);
    p.copy_(w);
  }
}

NamedTensors ReferenceAdafactor::state() const {
  NamedTensors out;
  for (std::size_t i = 0; i < params_.size(); ++i) {
    const std::string& name = params_[i].first;
    const Slot& s = slots_[i];
    if (s.exp_avg.defined()) out.emplace_back("exp_avg." + name, s.exp_avg);
    if (s.row.defined()) {
      out.emplace_back("exp_avg_sq_row." + name, s.row);
      out.emplace_back("exp_avg_sq_col." + name, s.col);
    } else {
      out.emplace_back("exp_avg_sq." + name, s.sq);
    }
  }
  return out;
}

std::int64_t ReferenceAdafactor::state_elements(c10::IntArrayRef shape, bool first_moment) {
  std::int64_t numel = 1;
  for (auto d : shape) numel *= d;
  std::int64_t n = first_moment ? numel : 0;
  if (shape.size() < 2) return n + numel;
  const std::int64_t last = shape.back(), second = shape[shape.size() - 2];
  return n + numel / last + numel / second;
}

}  // namespace zs::zero
