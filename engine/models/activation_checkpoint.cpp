#include "models/activation_checkpoint.h"

#include <atomic>

#include <ATen/ATen.h>
#include <ATen/core/ivalue.h>
#include <c10/core/GradMode.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/custom_function.h>

namespace zs::models {

namespace {

struct Counter {
  std::atomic<std::int64_t> now{0}, peak{0};
  void add(std::int64_t n) {
    const std::int64_t v = now.fetch_add(n) + n;
    std::int64_t p = peak.load();
    while (v > p && !peak.compare_exchange_weak(p, v)) {
    }
  }
};
Counter& counter(bool cpu) {
  static Counter on_device, in_cpu;
  return cpu ? in_cpu : on_device;
}

// What the backward needs besides the inputs: the block and the random state of the first run.
struct Saved final : public torch::CustomClassHolder {
  CheckpointedFn fn;
  at::Tensor cpu_rng;
  at::Tensor device_rng;  // the accelerator's generator state when x lives there
  c10::Device device{at::kCPU};
  bool has_aux = true;  // false: aux is a placeholder (Function inputs cannot be undefined in 1.13)
  bool input_to_cpu = false;
  bool x_requires_grad = false;
  std::int64_t kept_bytes = 0;  // accounted while this lives (until backward or the graph goes)
  ~Saved() override {
    if (kept_bytes) counter(input_to_cpu).add(-kept_bytes);
  }
};

at::Generator generator_of(c10::Device device) { return at::globalContext().defaultGenerator(device); }

struct Checkpoint : public torch::autograd::Function<Checkpoint> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x, const at::Tensor& aux,
                            c10::intrusive_ptr<Saved> saved) {
    saved->cpu_rng = generator_of(at::kCPU).get_state();
    if (!x.device().is_cpu()) {
      saved->device = x.device();
      saved->device_rng = generator_of(x.device()).get_state();
    }
    saved->x_requires_grad = x.requires_grad();
    at::Tensor kept = x;
    if (saved->input_to_cpu && !x.device().is_cpu()) {
      // Pinned, on the current stream: the copy is ordered before any later use of x's memory.
      kept = at::empty(x.sizes(), x.options().device(at::kCPU).pinned_memory(true));
      kept.copy_(x, /*non_blocking=*/true);
    }
    saved->kept_bytes = static_cast<std::int64_t>(x.numel()) * static_cast<std::int64_t>(x.element_size());
    counter(saved->input_to_cpu).add(saved->kept_bytes);
    ctx->save_for_backward({kept, aux});
    ctx->saved_data["saved"] = c10::IValue::make_capsule(saved);
    c10::NoGradGuard no_grad;  // (Function::apply already runs forward without grad)
    return saved->fn(x, saved->has_aux ? aux : at::Tensor());
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto saved = c10::static_intrusive_pointer_cast<Saved>(ctx->saved_data["saved"].toCapsule());
    const auto inputs = ctx->get_saved_variables();
    auto leaf = [](const at::Tensor& t) {
      if (!t.defined()) return t;
      return t.detach().set_requires_grad(t.requires_grad());
    };
    at::Tensor x = inputs[0];
    if (x.device() != saved->device) x = x.to(saved->device, /*non_blocking=*/true);  // cpu_checkpointing
    x = x.detach().set_requires_grad(saved->x_requires_grad);
    const at::Tensor aux = leaf(inputs[1]);
    // Replay with the first run's random state, then put the current state back.
    at::Generator cpu = generator_of(at::kCPU);
    const at::Tensor cpu_now = cpu.get_state();
    cpu.set_state(saved->cpu_rng);
    at::Tensor device_now;
    if (saved->device_rng.defined()) {
      device_now = generator_of(saved->device).get_state();
      generator_of(saved->device).set_state(saved->device_rng);
    }
    at::Tensor y;
    {
      c10::AutoGradMode grad_on(true);
      y = saved->fn(x, saved->has_aux ? aux : at::Tensor());
    }
    cpu.set_state(cpu_now);
    if (device_now.defined()) generator_of(saved->device).set_state(device_now);
    if (y.requires_grad()) torch::autograd::backward({y}, {grads[0]});
    auto grad_of = [](const at::Tensor& t) { return t.defined() && t.requires_grad() ? t.grad() : at::Tensor(); };
    return {grad_of(x), grad_of(aux), at::Tensor()};
  }
};

}  // namespace

at::Tensor checkpoint(CheckpointedFn fn, const at::Tensor& x, const at::Tensor& aux, bool input_to_cpu) {
  const bool needs_graph = c10::GradMode::is_enabled();
  if (!needs_graph) return fn(x, aux);
  auto saved = c10::make_intrusive<Saved>();
  saved->fn = std::move(fn);
  saved->has_aux = aux.defined();
  saved->input_to_cpu = input_to_cpu;
  return Checkpoint::apply(x, saved->has_aux ? aux : at::empty({0}, x.options()), saved);
}

CheckpointedBytes checkpointed_bytes() { return {counter(false).now.load(), counter(true).now.load()}; }

CheckpointedBytes checkpointed_peak() { return {counter(false).peak.load(), counter(true).peak.load()}; }

void reset_checkpointed_peak() {
  for (bool cpu : {false, true}) counter(cpu).peak.store(counter(cpu).now.load());
}

}  // namespace zs::models
