#pragma once
// The trainer's optimizer interface (ZeRO's sharded optimizers implement it later) and a plain AdamW.

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>

namespace zs::train {

/// Bytes of model state one rank holds, for the metrics events (ZeRO's Ψ accounting).
struct ModelStateBytes {
  std::int64_t parameters = 0;
  std::int64_t gradients = 0;
  std::int64_t optimizer_states = 0;
};

/// Bytes of model state one rank keeps off the compute device (ZeRO offload).
struct OffloadedBytes {
  std::int64_t parameters = 0;        ///< CPU memory
  std::int64_t gradients = 0;         ///< CPU memory (the fp32 gradients the CPU step reads)
  std::int64_t optimizer_states = 0;  ///< CPU memory (fp32 masters and Adam moments)
  std::int64_t nvme_bytes = 0;        ///< files under nvme_path
};

using NamedTensors = std::vector<std::pair<std::string, at::Tensor>>;

/// What the trainer needs from an optimizer: gradients in, updated parameters out.
class Optimizer {
 public:
  virtual ~Optimizer() = default;
  /// Clears the gradients of every trained parameter.
  virtual void zero_grad() = 0;
  /// Combines the gradients of all ranks (after the last micro-batch's backward of a step);
  /// a no-op in one process.
  virtual void reduce_gradients() {}
  /// Tells the optimizer whether the coming backward is the step's last micro-batch (gradients
  /// are communicated only then, overlapped with that backward).
  virtual void set_last_micro_step(bool last) { (void)last; }
  /// Global L2 norm of the gradients before clipping; scales them to `max_norm` when above it
  /// (max_norm <= 0: no clipping).
  virtual double clip_grad_norm(double max_norm) = 0;
  /// One update with learning rate `lr`.
  virtual void step(double lr) = 0;
  /// Optimizer state for a checkpoint (names are stable across runs of the same model).
  virtual NamedTensors state() const = 0;
  /// Restores state(); `get(name)` returns the stored tensor or throws.
  virtual void load_state(const std::function<at::Tensor(const std::string&)>& get) = 0;
  /// Model state on the compute device.
  virtual ModelStateBytes model_state() const = 0;
  /// Model state kept in CPU memory or NVMe files instead.
  virtual OffloadedBytes offloaded() const { return {}; }
  /// Loss scaling: multiplies the reduced gradients by `inv_scale` and reports whether any of
  /// them, on any rank, is inf or NaN (a collective under ZeRO). Call after reduce_gradients.
  virtual bool unscale_and_check_overflow(double inv_scale) = 0;
  /// Drops this step's gradients without updating (after an overflow).
  virtual void skip_step() = 0;
  /// Updates done so far.
  virtual std::int64_t steps() const = 0;
  /// Every trained parameter whole, for checkpoints and the EMA, when the model's own tensors
  /// are not (ZeRO stage 3: a collective). Empty: use the model's parameters.
  virtual NamedTensors full_parameters() { return {}; }

  // An EMA kept by the optimizer itself (ZeRO: each rank averages only its shard, on the CPU).
  // Optimizers without one return false from enable_ema and the trainer keeps a train::Ema.
  virtual bool enable_ema(double decay) { (void)decay; return false; }
  /// ema = decay·ema + (1−decay)·param on this rank's part.
  virtual void update_ema() {}
  /// The whole EMA under the parameters' names (a collective under ZeRO).
  virtual NamedTensors ema_state() { return {}; }
  virtual void load_ema(const std::function<at::Tensor(const std::string&)>& get) { (void)get; }
  /// Exchanges the live weights and the EMA (call again to undo); a collective under ZeRO.
  virtual void swap_ema() {}
};

/// AdamW with decoupled weight decay (Loshchilov & Hutter), bias-corrected, fp32 state.
class AdamW final : public Optimizer {
 public:
  AdamW(NamedTensors parameters, double beta1, double beta2, double eps, double weight_decay);
  void zero_grad() override;
  double clip_grad_norm(double max_norm) override;
  void step(double lr) override;
  NamedTensors state() const override;
  void load_state(const std::function<at::Tensor(const std::string&)>& get) override;
  ModelStateBytes model_state() const override;
  bool unscale_and_check_overflow(double inv_scale) override;
  void skip_step() override { zero_grad(); }
  std::int64_t steps() const override { return step_; }

 private:
  NamedTensors params_;
  std::vector<at::Tensor> exp_avg_, exp_avg_sq_;
  double beta1_, beta2_, eps_, weight_decay_;
  std::int64_t step_ = 0;
};

}  // namespace zs::train
