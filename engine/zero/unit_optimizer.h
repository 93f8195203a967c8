#pragma once
// One unit's optimizer on this rank, behind one interface: its state over the owned elements, its
// update, its checkpoint tensors and its layout (state_layout.h). AdamW (adamw_unit.h), 8-bit
// AdamW (adamw8bit_unit.h) and Adafactor (adafactor.h) implement it; ZeroOptimizer decides where
// and when a step runs (in memory, fused into backward, delayed on a host thread, from NVMe) and
// where the weights and gradients come from.

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>

#include "zero/state_bytes.h"
#include "zero/state_layout.h"

namespace zs::zero {

/// Which moment: AdamW's exp_avg and exp_avg_sq (Adafactor has the first only, with beta1).
enum class Moment { first, second };

/// One update's inputs.
struct UnitStep {
  at::Tensor weights;       ///< [owned] updated in place: the masters, or the weights in the state's precision
  at::Tensor grad;          ///< [owned] gradients (AdamW reads bf16 ones in CPU memory as they are)
  double lr = 0;            ///< the unit's learning rate
  std::int64_t step = 1;    ///< counts from 1
  double grad_scale = 1.0;  ///< AdamW: × every gradient inside the fused kernel (a held bf16 gradient's scale)
  at::Tensor out;           ///< AdamW: when defined, also receives the updated weights (compute dtype)
  bool exact = false;       ///< AdamW: the reference arithmetic, never the fused kernel
  std::function<void(at::Tensor&)> reduce;  ///< Adafactor: sums its statistics over the ranks sharing the unit
};

/// What a unit's checkpoint code needs to know of its parameters and the rank's part.
struct UnitView {
  const std::vector<std::pair<std::string, at::Tensor>>& params;  ///< names (the tensors are not read)
  const std::vector<std::int64_t>& offsets;                       ///< each parameter's start in the flat buffer
  const std::vector<std::int64_t>& sizes;                         ///< elements
  const std::vector<std::vector<std::int64_t>>& shapes;
  std::int64_t owned_offset = 0, owned = 0, padded = 0;
};

class UnitOptimizer {
 public:
  virtual ~UnitOptimizer() = default;
  /// The state's parts (with `masters` the unit also keeps master weights of `element_bytes`).
  virtual StateLayout layout(bool masters, std::int64_t element_bytes) const = 0;
  /// One update of s.weights from s.grad.
  virtual void step(const UnitStep& s) = 0;
  /// AdamW: steps with the fused CPU kernel, which also writes the compute weights (UnitStep::out)
  /// and reads held bf16 gradients in the same pass. The others are stepped on a float copy.
  virtual bool fused_kernel() const { return false; }
  /// A moment as float values [owned] (8-bit ones dequantized; undefined when the optimizer has
  /// none of that kind, or it lives in files).
  virtual at::Tensor moment(Moment k) const = 0;
  /// Sets a moment from float values [owned] (8-bit ones quantized afresh; ignored when it has none).
  virtual void set_moment(Moment k, const at::Tensor& values) = 0;
  /// The moments a checkpoint keeps as "<unit>/exp_avg" and "<unit>/exp_avg_sq".
  virtual std::vector<Moment> moments() const { return {Moment::first, Moment::second}; }
  /// State tensors that, with the optimizer on NVMe, live in files between steps (file name, field).
  virtual std::vector<std::pair<const char*, at::Tensor*>> swappable() = 0;
  /// Pins the state in CPU memory (for copies with the device).
  virtual void pin() {}

  using Read = std::function<at::Tensor(const std::string& kind, std::int64_t first, std::int64_t count)>;
  using MomentRead = std::function<at::Tensor(Moment)>;
  using MomentWrite = std::function<void(Moment, const at::Tensor&)>;
  using Gather = std::function<at::Tensor(const at::Tensor& part)>;  // [owned] -> [padded]
  /// The whole state under the parameters' names (ZeroOptimizer::state()): `read` gives this rank's
  /// moments where they live, `gather` all ranks' parts of a flat tensor.
  virtual void full_state(const UnitView& u, const MomentRead& read, const Gather& gather, NamedTensors& out) const;
  /// Checkpoint tensors beyond the moments, as "<prefix><kind>" (in `opts`, on the CPU); `rank0`:
  /// this is rank 0 (which saves what every rank holds alike).
  virtual void save_extra(const UnitView& /*u*/, const std::string& /*prefix*/, bool /*rank0*/,
                          const at::TensorOptions& /*opts*/, NamedTensors& /*out*/) const {}
  /// Restores the state from a checkpoint's unit (`read` by kind, as saved); `write` puts a moment
  /// where it lives.
  virtual void load(const UnitView& u, const Read& read, const MomentWrite& write);
  /// Elements per float checkpoint tensor beyond the weights: the moments, and what save_extra adds
  /// (in bytes, of `element_bytes` floats; rank0 as save_extra).
  virtual std::int64_t checkpoint_bytes(const UnitView& u, bool rank0, std::int64_t element_bytes) const;
};

}  // namespace zs::zero
