#pragma once
// Activation checkpointing: run a block without keeping its activations and run it again in
// backward (with the random state of the first run restored, so dropout draws the same values
// and the gradients are identical to a run without checkpointing).

#include <cstdint>
#include <functional>

#include <ATen/core/Tensor.h>

namespace zs::models {

/// A block of the network: y = fn(x, aux). `aux` is a second input that may need gradients too
/// (the timestep embedding or the text context); it may be undefined.
using CheckpointedFn = std::function<at::Tensor(const at::Tensor& x, const at::Tensor& aux)>;

/// Runs `fn` without recording its graph when gradients are being recorded; its backward runs
/// `fn` again with gradients on and back-propagates through that run. Gradients reach `x`,
/// `aux` and the parameters `fn` uses (accumulated into their .grad, as without checkpointing).
/// `fn` must own what it captures (it runs again after the caller has returned). Without grad
/// mode, or when nothing needs a gradient, it is simply fn(x, aux).
/// `input_to_cpu` (DeepSpeed's cpu_checkpointing): the kept input waits for backward in CPU
/// memory (pinned on CUDA, copied on the current stream) and returns to x's device for the rerun.
at::Tensor checkpoint(CheckpointedFn fn, const at::Tensor& x, const at::Tensor& aux, bool input_to_cpu = false);

/// Bytes of the inputs that checkpoints keep for backward, by where they wait: on the compute
/// device, or in CPU memory (cpu_checkpointing; on a CPU-only run the device is CPU memory too,
/// and the inputs count as "cpu" when the setting is on). Process-wide.
struct CheckpointedBytes {
  std::int64_t device = 0;
  std::int64_t cpu = 0;
};
CheckpointedBytes checkpointed_bytes();       ///< alive now
CheckpointedBytes checkpointed_peak();        ///< the highest of each since the last reset
void reset_checkpointed_peak();

}  // namespace zs::models
