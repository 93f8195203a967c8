#include "models/quantized_base.h"

#include <memory>
#include <string>

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <torch/nn/module.h>

#include "models/lora.h"

namespace zs::models {

namespace {

/// Puts `q` in the layer's place of its weight (on the weight's device) and empties the weight.
void install(AdaptedLinearImpl& layer, std::shared_ptr<quant::QuantizedWeight> q, QuantizedBytes& out) {
  c10::NoGradGuard no_grad;
  at::Tensor& w = layer.weight;
  out.before += w.numel() * static_cast<std::int64_t>(w.element_size());
  out.after += q->bytes();
  ++out.layers;
  q->codes = q->codes.to(w.device());
  q->scales = q->scales.to(w.device());
  w.set_requires_grad(false);
  w.set_data(at::empty({0}, w.options()));
  layer.quantized = std::move(q);
}

/// Quantizes the layer's weight into its `quantized` state and empties the weight.
void quantize_layer(AdaptedLinearImpl& layer, quant::BaseFormat format, QuantizedBytes& out) {
  c10::NoGradGuard no_grad;
  const at::Tensor& w = layer.weight;
  const at::Tensor source = w.device().is_cpu() ? w : w.cpu();
  // A plain fp8 file's weights keep their values (unit scales); the rest get block scales.
  quant::QuantizedWeight stored = format == quant::BaseFormat::fp8 ? quant::fp8_as_stored(source) : quant::QuantizedWeight{};
  install(layer, std::make_shared<quant::QuantizedWeight>(stored.codes.defined() ? std::move(stored) : quant::quantize(source, format)), out);
}

/// The Linear layers of `root` (lora's adaptable layers that are not convolutions).
std::vector<AdaptedLinearImpl*> linear_layers(const torch::nn::Module& root) {
  std::vector<AdaptedLinearImpl*> out;
  for (const LoraLayer& l : adaptable_layers(root))
    if (!l.conv) out.push_back(dynamic_cast<AdaptedLinearImpl*>(l.layer));
  return out;
}

}  // namespace

BaseQuantizer::BaseQuantizer(torch::nn::Module& root, quant::BaseFormat format) : format_(format) {
  for (AdaptedLinearImpl* l : linear_layers(root))
    if (l->weight.defined() && (l->quantized || l->weight.dim() == 2)) layers_.emplace(l->weight.unsafeGetTensorImpl(), l);
}

QuantizedBytes BaseQuantizer::quantize(ParamUnit& unit) {
  QuantizedBytes out;
  if (format_ == quant::BaseFormat::bf16) return out;
  std::vector<std::pair<std::string, at::Tensor>> parameters;
  std::vector<bool> raw;
  for (std::size_t i = 0; i < unit.parameters.size(); ++i) {
    auto& [name, t] = unit.parameters[i];
    const auto it = layers_.find(t.unsafeGetTensorImpl());
    if (it == layers_.end()) {
      parameters.emplace_back(name, t);
      raw.push_back(i < unit.raw.size() && unit.raw[i]);
      continue;
    }
    AdaptedLinearImpl& layer = *it->second;
    if (!layer.quantized) {
      quantize_layer(layer, format_, out);
    } else {  // quantized as it was read (config::quantizes_while_loading)
      ++out.layers;
      out.after += layer.quantized->bytes();
    }
    parameters.emplace_back(name + ":codes", layer.quantized->codes);
    parameters.emplace_back(name + ":scales", layer.quantized->scales);
    raw.push_back(true);
    raw.push_back(true);
    layers_.erase(it);
  }
  unit.parameters = std::move(parameters);
  unit.raw = std::move(raw);
  return out;
}

QuantizedBytes quantize_linears(torch::nn::Module& root, quant::BaseFormat format) {
  QuantizedBytes out;
  if (format == quant::BaseFormat::bf16) return out;
  for (AdaptedLinearImpl* l : linear_layers(root))
    if (!l->quantized && l->weight.dim() == 2) quantize_layer(*l, format, out);
  return out;
}

std::vector<std::pair<std::string, std::shared_ptr<const quant::QuantizedWeight>>> quantized_weights(
    const torch::nn::Module& root) {
  std::vector<std::pair<std::string, std::shared_ptr<const quant::QuantizedWeight>>> out;
  for (const LoraLayer& l : adaptable_layers(root))
    if (const auto* linear = dynamic_cast<const AdaptedLinearImpl*>(l.layer); linear && linear->quantized)
      out.emplace_back(l.name + ".weight", linear->quantized);
  return out;
}

QuantizedBytes adopt_quantized(torch::nn::Module& root, const StoredQuantized& stored) {
  QuantizedBytes out;
  for (const LoraLayer& l : adaptable_layers(root)) {
    auto* layer = dynamic_cast<AdaptedLinearImpl*>(l.layer);
    if (!layer || layer->quantized || layer->weight.dim() != 2) continue;
    if (std::shared_ptr<quant::QuantizedWeight> q = stored(l.name + ".weight", layer->weight)) install(*layer, std::move(q), out);
  }
  return out;
}

namespace {

void count(const at::Tensor& w, LinearWeights& out) {
  const std::int64_t rows = w.size(0), cols = w.size(1), n = rows * cols;
  out.elements += n;
  out.tensors += 1;
  out.row_blocks += rows * ((cols + quant::kBaseQuantBlock - 1) / quant::kBaseQuantBlock);
  out.flat_blocks += (n + quant::kBaseQuantBlock - 1) / quant::kBaseQuantBlock;
}

}  // namespace

std::vector<LinearWeights> linear_weights(const torch::nn::Module& root, const std::vector<ParamUnit>& units) {
  std::unordered_map<const c10::TensorImpl*, bool> linear;
  for (const AdaptedLinearImpl* l : linear_layers(root))
    if (l->weight.defined() && l->weight.dim() == 2) linear.emplace(l->weight.unsafeGetTensorImpl(), true);
  std::vector<LinearWeights> out(units.size());
  for (std::size_t i = 0; i < units.size(); ++i)
    for (const auto& [name, t] : units[i].parameters)
      if (linear.count(t.unsafeGetTensorImpl())) count(t, out[i]);
  return out;
}

LinearWeights linear_weights(const torch::nn::Module& root) {
  LinearWeights out;
  for (const AdaptedLinearImpl* l : linear_layers(root))
    if (l->weight.defined() && l->weight.dim() == 2) count(l->weight, out);
  return out;
}

std::int64_t quantized_bytes(const LinearWeights& w, quant::BaseFormat format) {
  switch (format) {
    case quant::BaseFormat::bf16: return 2 * w.elements;
    case quant::BaseFormat::fp8:
    case quant::BaseFormat::int8: return w.elements + 2 * w.row_blocks;   // codes, bfloat16 scales
    case quant::BaseFormat::nf4: return (w.elements + w.tensors) / 2 + 4 * w.flat_blocks;  // packed codes, float32 absmax
  }
  return 0;
}

std::int64_t quantized_unit_bytes(const LinearWeights& w, quant::BaseFormat format, std::int64_t other,
                                  std::int64_t compute_bytes) {
  if (format == quant::BaseFormat::bf16 || w.tensors == 0) return (w.elements + other) * compute_bytes;
  // Each quantized weight is two tensors, each starting on 16 bytes (half of 16 lost on average),
  // the rest of the unit's tensors likewise.
  return quantized_bytes(w, format) + 16 * w.tensors + other * compute_bytes;
}

void move_quantized(torch::nn::Module& root, const at::Device& device) {
  c10::NoGradGuard no_grad;
  for (AdaptedLinearImpl* l : linear_layers(root))
    if (l->quantized && l->quantized->codes.device() != device) {
      l->quantized->codes.set_data(l->quantized->codes.to(device));
      l->quantized->scales.set_data(l->quantized->scales.to(device));
    }
}

}  // namespace zs::models
