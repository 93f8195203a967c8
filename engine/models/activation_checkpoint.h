#pragma once
// Activation checkpointing: run a block without keeping its activations and run it again in
// backward (with the random state of the first run restored, so dropout draws the same values
// and the gradients are identical to a run without checkpointing).

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
at::Tensor checkpoint(CheckpointedFn fn, const at::Tensor& x, const at::Tensor& aux);

}  // namespace zs::models
