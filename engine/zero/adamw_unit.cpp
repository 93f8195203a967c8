#include "zero/adamw_unit.h"

#include <cmath>

#include <ATen/ATen.h>

#include "zero/cpu_adam.h"

namespace zs::zero {

void adam_reference(at::Tensor p, at::Tensor m, at::Tensor v, const at::Tensor& g, const AdamSettings& o, double lr,
                    std::int64_t step) {
  const double c1 = 1.0 - std::pow(o.beta1, static_cast<double>(step));
  const double c2 = 1.0 - std::pow(o.beta2, static_cast<double>(step));
  if (o.weight_decay > 0) p.mul_(1.0 - lr * o.weight_decay);
  m.mul_(o.beta1).add_(g, 1.0 - o.beta1);
  v.mul_(o.beta2).addcmul_(g, g, 1.0 - o.beta2);
  const at::Tensor denom = v.sqrt().div_(std::sqrt(c2)).add_(o.eps);
  p.addcdiv_(m, denom, -lr / c1);
}

void copy_converted(at::Tensor& out, const at::Tensor& w) {
  out.copy_(out.device() == w.device() ? w : w.to(out.scalar_type()), /*non_blocking=*/false);
}

void adam_master(at::Tensor w, at::Tensor m, at::Tensor v, const at::Tensor& grad, const AdamSettings& o, double lr,
                 std::int64_t step, at::Tensor out, double grad_scale) {
  // bf16 gradients in CPU memory go into the fused kernel as they are (widened there); other
  // gradient shards in the compute dtype are upcast one unit at a time (the step's only temporary).
  const bool bf16_in = grad.scalar_type() == at::kBFloat16 && grad.device().is_cpu() && w.scalar_type() == at::kFloat;
  const at::Tensor g = grad.scalar_type() == w.scalar_type() || bf16_in ? grad : grad.to(w.scalar_type());
  const bool fused = w.device().is_cpu() && w.scalar_type() == at::kFloat && g.device().is_cpu() &&
                     (g.scalar_type() == at::kFloat || bf16_in) && w.is_contiguous() && g.is_contiguous() &&
                     m.is_contiguous() && v.is_contiguous();
  if (fused) {
    const AdamHyper h{lr, o.beta1, o.beta2, o.eps, o.weight_decay, step, grad_scale};
    const bool half_out = out.defined() && out.device().is_cpu() && out.is_contiguous() &&
                          (out.scalar_type() == at::kBFloat16 || out.scalar_type() == at::kHalf);
    cpu_adamw(w, g, m, v, h, half_out ? out : at::Tensor());
    if (out.defined() && !half_out) copy_converted(out, w);
    return;
  }
  at::Tensor g32 = g.to(w.options());
  if (grad_scale != 1.0) g32 = g32 * grad_scale;
  adam_reference(w, m, v, g32, o, lr, step);
  if (out.defined()) copy_converted(out, w);
}

AdamWUnit::AdamWUnit(std::int64_t owned, const AdamSettings& settings, const at::TensorOptions& opts, bool streamed)
    : owned_(owned), o_(settings) {
  if (streamed) return;
  exp_avg_ = at::zeros({owned}, opts);
  exp_avg_sq_ = at::zeros({owned}, opts);
}

StateLayout AdamWUnit::layout(bool masters, std::int64_t element_bytes) const {
  return adamw_state_layout(owned_, masters, element_bytes);
}

void AdamWUnit::step(const UnitStep& s) {
  if (s.exact) adam_reference(s.weights, exp_avg_, exp_avg_sq_, s.grad, o_, s.lr, s.step);
  else adam_master(s.weights, exp_avg_, exp_avg_sq_, s.grad, o_, s.lr, s.step, s.out, s.grad_scale);
}

void AdamWUnit::set_moment(Moment k, const at::Tensor& values) {
  (k == Moment::first ? exp_avg_ : exp_avg_sq_).copy_(values);
}

std::vector<std::pair<const char*, at::Tensor*>> AdamWUnit::swappable() {
  return {{"exp_avg.swp", &exp_avg_}, {"exp_avg_sq.swp", &exp_avg_sq_}};
}

void AdamWUnit::pin() {
  for (at::Tensor* t : {&exp_avg_, &exp_avg_sq_})
    if (t->defined()) *t = t->pin_memory();
}

}  // namespace zs::zero
