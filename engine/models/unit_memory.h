#pragma once
// How a ZeRO unit's memory grows with a run, counted by the family that built the unit
// (UnitShape::memory): the activations autograd keeps per sample, the input gradient
// checkpointing keeps instead, and Adafactor's factored statistics. The memory estimator walks
// the units and asks; a new family brings its own kinds of unit here without touching it.
// Shared kinds live in unit_memory.cpp (the in/out layers, CLIP text encoders, the flow
// transformers' joint and single blocks); the UNet's in models/sd/sd_unit_memory.cpp.

#include <cstdint>
#include <optional>

#include "models/attention_options.h"

namespace zs::models {

struct UnitShape;

/// Element counts for one unit and one sample.
struct UnitActivation {
  double saved = 0;      ///< kept from forward to backward
  double output = 0;     ///< the unit's output (what a checkpoint of the next unit keeps)
  double transient = 0;  ///< what backward allocates on top while it runs this unit
  /// Highest (still saved + allocated) while backward runs through the unit: it frees the
  /// unit's later parts before it reaches the earlier ones (0: saved + transient).
  double peak = 0;
  double backward_peak() const { return peak > 0 ? peak : saved + transient; }
};

/// What a unit's activations depend on besides its own shape.
struct ActivationQuery {
  std::int64_t side = 1;              ///< the denoiser's input side (its sample), before a unit's level
  std::int64_t context_tokens = 77;   ///< text conditioning length
  std::int64_t model_out_channels = 4;  ///< channels the denoiser predicts (the loss terms)
  std::int64_t batch_size = 1;        ///< micro batch (the blocked attention's score blocks are shared by it)
  AttentionOptions attention;
  /// Spatial positions of a sample at the unit's level: (side >> level)², at least 1.
  double positions(const UnitShape& u) const;
};

/// One kind of unit's memory model (stateless: the families hand out shared instances).
class UnitMemory {
 public:
  virtual ~UnitMemory() = default;
  virtual UnitActivation activation(const UnitShape& u, const ActivationQuery& q) const = 0;
  /// Under gradient checkpointing: the elements per sample of the input that is kept instead of
  /// the unit's activations; nullopt where the unit is not checkpointed (it keeps them all).
  virtual std::optional<double> checkpointed_input(const UnitShape& u, const ActivationQuery& q) const = 0;
  /// Adafactor's statistics for `parameters` of this unit (elements): an [O, I] matrix keeps O + I,
  /// a vector or a 1×1 kernel its size, a 3×3 kernel 3·(O + I)·… as factored over its rows.
  virtual std::int64_t adafactor_state_elements(const UnitShape& u, std::int64_t parameters) const;
};

/// Adafactor's statistics of `parameters` of unit `u` in linear layers about as wide as its widest
/// channels (O + I per [O, I] matrix, vectors whole): 4/width of them, 1/8 below a width of 32.
std::int64_t adafactor_linear_elements(const UnitShape& u, std::int64_t parameters);

/// What self-attention's backward allocates on top of the saved tensors, per sample, for
/// `tokens` queries and keys of `channels` over `heads` heads: the plain path the gradients of
/// the probabilities and the scores [heads, N, N]; the blocked path dq, dk, dv, a row sum and
/// two score blocks (the probabilities and dS, shared by the batch).
double attention_transient(const ActivationQuery& q, std::int64_t heads, std::int64_t tokens, double channels, bool blocked);

/// Whether self-attention over `tokens` takes a blocked path (keeping each row's log-sum-exp
/// instead of its probabilities) on the estimate's device.
bool attention_blocked(const ActivationQuery& q, std::int64_t tokens);

/// The kinds every family may use.
const UnitMemory& io_unit_memory();            ///< "io": the small in/out layers and the loss terms
const UnitMemory& text_encoder_unit_memory();  ///< a CLIP-style text encoder (trained ones keep activations)
/// A flow transformer's double-stream block (Flux's MMDiT blocks, Qwen-Image's): text and image
/// tokens with two sets of weights over the joint sequence.
const UnitMemory& joint_block_unit_memory();
/// A single-stream block (Flux): attention and MLP in parallel over all tokens.
const UnitMemory& single_block_unit_memory();

}  // namespace zs::models
