#include "models/trainable_model.h"

#include <algorithm>
#include <stdexcept>

#include <ATen/ATen.h>
#include <torch/nn/module.h>

#include "core/error.h"
#include "models/attention.h"
#include "models/denoiser_module.h"

namespace zs::models {

namespace {

/// `c` padded with zero rows to `length` tokens, and its mask [B, length] (int64).
std::pair<at::Tensor, at::Tensor> padded(const TextConditioning& c, std::int64_t length) {
  const std::int64_t b = c.context.size(0), n = c.context.size(1);
  at::Tensor mask = c.mask.defined() ? c.mask.to(at::kLong) : at::ones({b, n}, c.context.options().dtype(at::kLong));
  if (n == length) return {c.context, mask};
  const at::Tensor zeros = at::zeros({b, length - n, c.context.size(2)}, c.context.options());
  return {at::cat({c.context, zeros}, 1), at::cat({mask, at::zeros({b, length - n}, mask.options())}, 1)};
}

}  // namespace

TextConditioning concat_conditioning(const TextConditioning& a, const TextConditioning& b) {
  TextConditioning out;
  if (a.pooled.defined()) out.pooled = at::cat({a.pooled, b.pooled});
  if (!a.mask.defined() && !b.mask.defined() && a.context.size(1) == b.context.size(1)) {
    out.context = at::cat({a.context, b.context});
    return out;
  }
  const std::int64_t length = std::max(a.context.size(1), b.context.size(1));
  const auto [ca, ma] = padded(a, length);
  const auto [cb, mb] = padded(b, length);
  out.context = at::cat({ca, cb});
  out.mask = at::cat({ma, mb});
  return out;
}

TextConditioning pad_conditioning(const std::vector<at::Tensor>& rows) {
  std::int64_t length = 0;
  bool same = true;
  for (const auto& r : rows) {
    if (length && r.size(0) != length) same = false;
    length = std::max(length, r.size(0));
  }
  TextConditioning out;
  if (same) {
    out.context = at::stack(rows);
    return out;
  }
  std::vector<at::Tensor> context, mask;
  for (const auto& r : rows) {
    const std::int64_t n = r.size(0);
    context.push_back(at::cat({r, at::zeros({length - n, r.size(1)}, r.options())}));
    mask.push_back(at::cat({at::ones({n}, r.options().dtype(at::kLong)), at::zeros({length - n}, r.options().dtype(at::kLong))}));
  }
  out.context = at::stack(context);
  out.mask = at::stack(mask);
  return out;
}

at::Tensor TrainableModel::combine_guidance(const at::Tensor& uncond, const at::Tensor& cond, double scale) const {
  return uncond + scale * (cond - uncond);
}

std::size_t TrainableModel::load_lora_file(const std::string& path) {
  throw Error(ErrorKind::config, "lora.init_from: " + path + ": this model family reads no LoRA files yet");
}

DenoiserModule* TrainableModel::denoiser() const {
  for (const ModelComponent& c : components())
    if (c.role == ModelComponent::Role::denoiser && c.module) {
      auto* d = dynamic_cast<DenoiserModule*>(c.module);
      if (!d) throw std::logic_error("TrainableModel: the denoiser component is not a DenoiserModule");
      return d;
    }
  return nullptr;
}

void TrainableModel::set_unit_hooks(std::shared_ptr<UnitHooks> hooks) {
  if (DenoiserModule* d = denoiser()) d->set_unit_hooks(std::move(hooks));
}

void TrainableModel::set_gradient_checkpointing(bool on, bool to_cpu) {
  if (DenoiserModule* d = denoiser()) {
    d->set_gradient_checkpointing(on);
    d->set_cpu_checkpointing(to_cpu);
  }
}

void TrainableModel::train(bool on) {
  for (const ModelComponent& c : components())
    if (c.module)
      c.module->train(c.role == ModelComponent::Role::denoiser       ? on
                      : c.role == ModelComponent::Role::text_encoder ? on && text_encoders_trained()
                                                                     : false);
}

bool TrainableModel::is_training() const {
  const DenoiserModule* d = denoiser();
  return d && d->is_training();
}

void TrainableModel::set_attention(const AttentionOptions& o) {
  for (const ModelComponent& c : components())
    if (c.module) set_attention_options(*c.module, o);
}

void TrainableModel::to(const at::Device& device, bool with_denoiser) {
  for (const ModelComponent& c : components()) {
    if (!c.module || (c.role == ModelComponent::Role::denoiser && !with_denoiser) || (c.streams_on_gpu && device.is_cuda()))
      continue;
    c.module->to(device);
  }
}

}  // namespace zs::models
