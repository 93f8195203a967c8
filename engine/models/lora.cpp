#include "models/lora.h"

#include <cmath>

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/nn/functional/conv.h>

#include "core/error.h"
#include "quant/base_quant.h"

namespace zs::models {

namespace {

at::Tensor dropped(const at::Tensor& x, double p, bool training) {
  return (training && p > 0) ? at::dropout(x, p, true) : x;
}

// The adapter's input in the dtype its weights have (mixed precision: the compute dtype).
at::Tensor as_adapter_input(const at::Tensor& x, const LoraAdapter& a) {
  return x.scalar_type() == a.down.scalar_type() ? x : x.to(a.down.scalar_type());
}

// x·Wᵀ with W a quantized base, dequantized in forward and again in backward: the graph keeps the
// codes (ZeRO-3 gathers them again before the unit's backward), never the dequantized weight. (The
// bias is added outside: LibTorch 1.13's custom functions cannot take an undefined input.)
struct QuantizedLinearFn : public torch::autograd::Function<QuantizedLinearFn> {
  static quant::QuantizedWeight weight_of(torch::autograd::AutogradContext* ctx) {
    quant::QuantizedWeight q;
    q.format = static_cast<quant::BaseFormat>(ctx->saved_data["format"].toInt());
    q.shape = ctx->saved_data["shape"].toIntVector();
    q.codes = ctx->saved_data["codes"].toTensor();
    q.scales = ctx->saved_data["scales"].toTensor();
    return q;
  }
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x, const quant::QuantizedWeight& q) {
    ctx->saved_data["format"] = static_cast<std::int64_t>(q.format);
    ctx->saved_data["shape"] = q.shape;
    ctx->saved_data["codes"] = q.codes;
    ctx->saved_data["scales"] = q.scales;
    return at::linear(x, quant::dequantize(q, x.scalar_type()));
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const at::Tensor& g = grads[0];
    return {at::matmul(g, quant::dequantize(weight_of(ctx), g.scalar_type())), at::Tensor()};
  }
};

}  // namespace

at::Tensor LoraAdapter::linear_update(const at::Tensor& x, bool training) const {
  const at::Tensor h = at::linear(dropped(as_adapter_input(x, *this), dropout, training), down);
  return at::linear(h, up).mul(scale()).to(x.scalar_type());
}

at::Tensor LoraAdapter::conv_update(const at::Tensor& x, bool training,
                                    const torch::nn::detail::ConvNdOptions<2>& o) const {
  namespace F = torch::nn::functional;
  const auto down_options = F::Conv2dFuncOptions().stride(o.stride()).padding(o.padding()).dilation(o.dilation());
  const at::Tensor h = F::conv2d(dropped(as_adapter_input(x, *this), dropout, training), down, down_options);
  return at::conv2d(h, up).mul(scale()).to(x.scalar_type());
}

at::Tensor AdaptedLinearImpl::forward(const at::Tensor& x) {
  at::Tensor y;
  if (!quantized) {
    y = LinearImpl::forward(x);
  } else {
    // A part that streams through the device (or is parked in CPU memory) brings its codes along
    // for this call only: they stay where the part keeps them.
    quant::QuantizedWeight q = *quantized;
    if (q.codes.device() != x.device()) {
      q.codes = q.codes.to(x.device());
      q.scales = q.scales.to(x.device());
    }
    if (c10::GradMode::is_enabled() && (x.requires_grad() || (bias.defined() && bias.requires_grad()))) {
      y = QuantizedLinearFn::apply(x, q);
      if (bias.defined()) y = y + bias;
    } else {
      y = at::linear(x, quant::dequantize(q, x.scalar_type()), bias);
    }
  }
  if (lora && lora->enabled) y = y + lora->linear_update(x, is_training());
  return y;
}

at::Tensor AdaptedConv2dImpl::forward(const at::Tensor& x) {
  at::Tensor y = Conv2dImpl::forward(x);
  if (lora && lora->enabled) y = y + lora->conv_update(x, is_training(), options);
  return y;
}

at::Tensor& LoraLayer::weight() const {
  if (conv) return dynamic_cast<AdaptedConv2dImpl*>(layer)->weight;
  return dynamic_cast<AdaptedLinearImpl*>(layer)->weight;
}

std::vector<std::pair<std::string, at::Tensor>> LoraLayer::tensors() const {
  return {{name + ".lora_down.weight", adapter->down}, {name + ".lora_up.weight", adapter->up}};
}

bool lora_target_matches(const std::string& name, const std::vector<std::string>& targets) {
  for (const auto& t : targets) {
    if (t.empty()) continue;
    if (name == t) return true;
    if (name.size() > t.size() && name.compare(name.size() - t.size(), t.size(), t) == 0 &&
        name[name.size() - t.size() - 1] == '.')
      return true;
  }
  return false;
}

std::vector<std::string> default_text_encoder_lora_targets() { return {"q_proj", "k_proj", "v_proj", "out_proj"}; }

std::vector<LoraLayer> attach_lora(torch::nn::Module& root, const std::vector<std::string>& targets,
                                   const LoraOptions& o, std::uint64_t seed, at::ScalarType dtype) {
  if (o.rank < 1) throw Error(ErrorKind::config, "lora.rank: must be at least 1 (got " + std::to_string(o.rank) + ")");
  if (o.init != "kaiming" && o.init != "gaussian")
    throw Error(ErrorKind::config, "lora.init: '" + o.init + "' is not one of kaiming, gaussian");
  std::vector<bool> used(targets.size(), false);
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  for (const LoraLayer& l : adaptable_layers(root)) {
    bool selected = false;
    for (std::size_t i = 0; i < targets.size(); ++i)
      if (lora_target_matches(l.name, {targets[i]})) used[i] = selected = true;
    if (!selected || l.adapter) continue;
    // Shapes from the layer's options, not its weight: a base built straight into ZeRO-3 shards
    // (zero3_init_flag) holds empty placeholders.
    const at::Tensor& w = l.weight();
    std::vector<std::int64_t> down_shape, up_shape;
    if (l.conv) {
      const auto& co = dynamic_cast<AdaptedConv2dImpl*>(l.layer)->options;
      down_shape = {o.rank, co.in_channels() / co.groups(), co.kernel_size()->at(0), co.kernel_size()->at(1)};
      up_shape = {co.out_channels(), o.rank, 1, 1};
    } else {
      const auto& lo = dynamic_cast<AdaptedLinearImpl*>(l.layer)->options;
      down_shape = {o.rank, lo.in_features()};
      up_shape = {lo.out_features(), o.rank};
    }
    auto a = std::make_shared<LoraAdapter>();
    a->alpha = o.alpha;
    a->dropout = o.dropout;
    // Drawn on the CPU in float64 from the one generator (the same numbers on every rank and
    // device), then moved to the layer's device.
    at::Tensor down = at::empty(down_shape, at::TensorOptions().dtype(at::kDouble));
    if (o.init == "kaiming") {
      // LibTorch's (and PyTorch's) Linear default: kaiming_uniform(a = √5) = U(−1/√fan_in, 1/√fan_in).
      const double fan_in = static_cast<double>(down.numel() / o.rank);
      const double bound = 1.0 / std::sqrt(fan_in);
      down.uniform_(-bound, bound, gen);
    } else {
      down.normal_(0.0, 1.0 / static_cast<double>(o.rank), gen);
    }
    const auto opts = at::TensorOptions().dtype(dtype).device(w.device());
    a->down = down.to(opts);
    a->up = at::zeros(up_shape, opts);
    set_adapter(l, std::move(a));
  }
  for (std::size_t i = 0; i < targets.size(); ++i)
    if (!used[i])
      throw Error(ErrorKind::config, "lora targets: '" + targets[i] +
                                         "' names no Linear or Conv2d layer of the model (targets name a layer's last "
                                         "path components, e.g. to_q, to_out.0, ff.net.2, proj_in, conv1)");
  return lora_layers(root);
}

std::vector<LoraLayer> adaptable_layers(const torch::nn::Module& root) {
  // named_modules is depth-first, in registration order: module order.
  std::vector<LoraLayer> out;
  for (const auto& item : root.named_modules("", false)) {
    torch::nn::Module* m = item.value().get();
    if (auto* l = dynamic_cast<AdaptedLinearImpl*>(m))
      out.push_back(LoraLayer{item.key(), l->lora, m, false});
    else if (auto* c = dynamic_cast<AdaptedConv2dImpl*>(m))
      out.push_back(LoraLayer{item.key(), c->lora, m, true});
  }
  return out;
}

std::int64_t lora_parameter_count(torch::nn::Module& root, const std::vector<std::string>& targets, std::int64_t rank) {
  std::int64_t n = 0;
  for (const LoraLayer& l : adaptable_layers(root)) {
    if (!lora_target_matches(l.name, targets)) continue;
    const at::Tensor& w = l.weight();
    n += rank * (w.numel() / w.size(0) + w.size(0));
  }
  return n;
}

std::vector<LoraLayer> lora_layers(torch::nn::Module& root) {
  std::vector<LoraLayer> out = adaptable_layers(root);
  std::erase_if(out, [](const LoraLayer& l) { return !l.adapter; });
  return out;
}

void set_adapter(const LoraLayer& l, std::shared_ptr<LoraAdapter> adapter) {
  if (l.conv)
    dynamic_cast<AdaptedConv2dImpl&>(*l.layer).lora = std::move(adapter);
  else
    dynamic_cast<AdaptedLinearImpl&>(*l.layer).lora = std::move(adapter);
}

at::Tensor lora_delta(const LoraLayer& l) { return lora_delta(*l.adapter); }

at::Tensor lora_delta(const LoraAdapter& a) {
  if (a.down.dim() != 4) return at::matmul(a.up, a.down).mul(a.scale());
  // up is 1×1: delta[o, i, kh, kw] = Σ_r up[o, r] · down[r, i, kh, kw].
  const at::Tensor up2 = a.up.flatten(1);                       // [out, rank]
  const at::Tensor down2 = a.down.flatten(1);                   // [rank, in·kh·kw]
  return at::matmul(up2, down2).mul(a.scale()).view({a.up.size(0), a.down.size(1), a.down.size(2), a.down.size(3)});
}

void merge_lora(torch::nn::Module& root) {
  at::NoGradGuard no_grad;
  for (const auto& l : lora_layers(root)) {
    if (!l.conv && dynamic_cast<AdaptedLinearImpl*>(l.layer)->quantized)
      throw Error(ErrorKind::config, l.name + ": its base is quantized (model.base_precision); adapters merge into the "
                                              "full-precision base read from the model's files, not into this copy");
    at::Tensor& w = l.weight();
    w.add_(lora_delta(l).to(w.scalar_type()));
  }
  detach_lora(root);
}

void detach_lora(torch::nn::Module& root) {
  for (const auto& l : lora_layers(root)) set_adapter(l, nullptr);
}

ParamUnit lora_unit(torch::nn::Module& root, const std::string& name, const std::string& prefix) {
  for (auto& p : root.parameters()) p.set_requires_grad(false);
  ParamUnit unit{name, {}};
  for (const auto& l : lora_layers(root))
    for (auto& [key, t] : l.tensors()) {
      t.set_requires_grad(true);
      unit.parameters.emplace_back(prefix + key, t);
    }
  if (unit.parameters.empty())
    throw Error(ErrorKind::config, name + ": the model has no LoRA adapters to train (lora targets selected no layer)");
  return unit;
}

void set_lora_enabled(torch::nn::Module& root, bool on) {
  for (const auto& l : lora_layers(root)) l.adapter->enabled = on;
}

}  // namespace zs::models
