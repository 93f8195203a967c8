#pragma once
// Adafactor (transformers' src/transformers/optimization.py; Shazeer & Stern 2018) over one ZeRO
// unit's flat buffer, of which this rank updates the owned elements. A parameter of two or more
// dimensions keeps its second moment factored over its last two dimensions (a row and a column
// statistic); a vector keeps it whole. Those statistics, and the whole-tensor RMS values that
// scale_parameter and update clipping take, are kept exact when a shard cuts a parameter: each
// rank sums its elements' contributions and the sums are all-reduced (two small collectives per
// unit and step), so every rank holds the same, whole statistics (they are small: O + I for an
// [O, I] matrix) and updates its own elements as one process would.

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <c10/util/ArrayRef.h>

#include "zero/unit_optimizer.h"

namespace zs::zero {

/// transformers' Adafactor arguments. The defaults are what kohya's sd-scripts (docs/train_network:
/// `--optimizer_args "relative_step=False" "scale_parameter=False" "warmup_init=False"`) and OneTrainer
/// (modules/util/optimizer_util.py's Adafactor defaults) use to fine-tune diffusion models with an
/// explicit learning rate; transformers' own defaults turn relative_step and scale_parameter on.
struct AdafactorOptions {
  std::optional<double> beta1;        ///< first-moment decay; none: no first moment (transformers' default)
  double decay_rate = -0.8;           ///< β₂ₜ = 1 − step^decay_rate
  double eps1 = 1e-30;                ///< added to the squared gradient
  double eps2 = 1e-3;                 ///< floor of the parameter scale (scale_parameter)
  double clip_threshold = 1.0;        ///< the update is scaled down to RMS ≤ this
  double weight_decay = 0.0;          ///< decoupled, × the step's lr
  bool scale_parameter = false;       ///< lr × max(eps2, RMS(p))
  bool relative_step = false;         ///< lr = min(1e-2, 1/√step) (no lr given)
  bool warmup_init = false;           ///< with relative_step: min(1e-6·step, 1/√step)
};

/// The step size transformers' _get_lr computes: `lr` (or the relative step) × the parameter scale.
double adafactor_step_size(const AdafactorOptions& o, double lr, std::int64_t step, double param_rms);

/// One unit's Adafactor state on this rank (a UnitOptimizer: its checkpoints keep exp_avg with
/// beta1 and, from rank 0, each parameter's statistics as "adafactor:<parameter>").
class AdafactorUnit final : public UnitOptimizer {
 public:
  /// The unit's parameters at `offsets` with `shapes`; this rank updates elements
  /// [owned_offset, owned_offset + owned) of the flat buffer. State in `opts` (dtype and device).
  AdafactorUnit(const std::vector<std::int64_t>& offsets, const std::vector<std::vector<std::int64_t>>& shapes,
                std::int64_t owned_offset, std::int64_t owned, const AdafactorOptions& options, at::TensorOptions opts);
  /// Sums a tensor over the ranks that share the unit (nothing when one rank owns it all).
  using Reduce = std::function<void(at::Tensor&)>;
  /// One update of the owned weights `w` (in place) from their gradients `g` (any float dtype).
  /// `lr` is the step's learning rate (ignored with relative_step); `step` counts from 1.
  void step(at::Tensor w, const at::Tensor& g, double lr, std::int64_t step, const Reduce& reduce);

  /// Parameter i's second-moment statistics, flat (row then column for a factored one; its
  /// squares for a vector): the same on every rank.
  at::Tensor statistics(std::size_t i) const;
  std::size_t parameters() const { return slots_.size(); }
  /// [owned] first moment (beta1 only; else undefined).
  at::Tensor& exp_avg() { return exp_avg_; }
  /// Bytes held (statistics and first moment).
  std::int64_t bytes() const;
  /// Elements of parameter i's statistics (what statistics(i) holds), known without them.
  std::int64_t statistics_numel(std::size_t i) const;
  /// Elements of parameter `shape`'s statistics (row + column, or its size).
  static std::int64_t statistics_numel(c10::IntArrayRef shape);

  // UnitOptimizer
  StateLayout layout(bool masters, std::int64_t element_bytes) const override;
  void step(const UnitStep& s) override { step(s.weights, s.grad, s.lr, s.step, s.reduce); }
  at::Tensor moment(Moment k) const override { return k == Moment::first ? exp_avg_ : at::Tensor(); }
  void set_moment(Moment k, const at::Tensor& values) override;
  std::vector<Moment> moments() const override;
  std::vector<std::pair<const char*, at::Tensor*>> swappable() override { return {{"exp_avg.swp", &exp_avg_}}; }
  void full_state(const UnitView& u, const MomentRead& read, const Gather& gather, NamedTensors& out) const override;
  void save_extra(const UnitView& u, const std::string& prefix, bool rank0, const at::TensorOptions& opts,
                  NamedTensors& out) const override;
  void load(const UnitView& u, const Read& read, const MomentWrite& write) override;
  std::int64_t checkpoint_bytes(const UnitView& u, bool rank0, std::int64_t element_bytes) const override;

 private:
  struct Slot {
    std::int64_t offset = 0, numel = 0;
    std::int64_t rows = 0, cols = 0;  // the last two dimensions (factored), else 0
    std::int64_t stats_offset = 0;    // where its statistics start in stats_
  };
  /// The owned part of parameter `slot`: its elements [lo, lo + n).
  struct Piece {
    std::size_t slot;
    std::int64_t lo, n;
  };
  std::vector<Piece> owned_pieces() const;
  /// step() on contiguous CPU tensors, weights in the state's dtype T (float or double), gradients
  /// G (T, or bf16 under float): one pass over the owned elements per phase, nothing of their size
  /// allocated (the tensor form made about ten temporaries of a unit's size, and fresh pages cost
  /// the kernel's zeroing: issue 39's Flux run).
  template <typename T, typename G>
  void step_loops(at::Tensor& w, const at::Tensor& g, double lr, std::int64_t step, const Reduce& reduce);
  std::vector<Slot> slots_;
  std::int64_t owned_offset_ = 0, owned_ = 0;
  AdafactorOptions o_;
  at::Tensor stats_;    // every parameter's statistics, flat
  at::Tensor exp_avg_;  // [owned]
};

}  // namespace zs::zero
