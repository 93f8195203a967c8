#pragma once
// The engine's rules that others must apply the same way: which optimizer settings run together,
// how an optimizer cuts shards, when master weights exist, when bf16 gradients are held, which
// units keep 8-bit state. ZeroOptimizer, the config's validation and the memory estimator all ask
// here (one rule, not two). No LibTorch here: the config and the estimator include it.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "zero/zero_plan.h"

namespace zs::zero {

/// optimizer.type: what updates the rank's part (the plan, gathers, offload and checkpoints are the same).
enum class OptimizerType {
  adamw,      ///< AdamW, fp32 moments
  adamw8bit,  ///< AdamW with bitsandbytes' block-wise 8-bit moments (blockwise_quant.h)
  adafactor,  ///< transformers' Adafactor: factored second moment (adafactor.h)
};
/// "AdamW", "AdamW8bit", "Adafactor" (the config's spelling).
const char* optimizer_name(OptimizerType t);
/// The config's spelling back; nothing for anything else.
std::optional<OptimizerType> find_optimizer(const std::string& name);
/// The config's spelling back; throws zs::Error(config) naming optimizer.type for anything else.
OptimizerType optimizer_from_name(const std::string& name);

/// The precision the model computes in, as the rules tell them apart.
enum class Precision {
  full,  ///< the optimizer's own (fp32; fp64 in the exactness tests)
  bf16,
  fp16,
};
/// precision: "bf16", "fp16"; anything else (fp32) is full.
Precision precision_from_name(const std::string& name);

/// The settings the rules read, as ZeroOptions (ZeroOptions::rule_settings) and the config both say them.
struct RuleSettings {
  OptimizerType optimizer = OptimizerType::adamw;  ///< optimizer.type
  Precision compute = Precision::full;             ///< precision
  bool master_weights = true;                      ///< optimizer.master_weights: fp32 (false: none)
  bool fused_backward = false;                     ///< optimizer.fused_backward
  bool delayed_update = false;                     ///< zero.offload_optimizer.delayed_update
  bool host_bf16_grads = true;                     ///< ZeroOptions::host_bf16_grads (the config has no key: on)
  Offload offload_optimizer = Offload::none;       ///< zero.offload_optimizer.device
};

/// A combination the engine cannot run: the config key to change and why (no key in front).
struct OptionProblem {
  std::string key;
  std::string message;
};
/// Every problem of `s`, in a stable order (empty: it runs). Config validation reports each at its
/// key; ZeroOptimizer refuses to start with them.
std::vector<OptionProblem> option_problems(const RuleSettings& s);

/// Every shard (PlanOptions::shard_multiple) is a multiple of this many elements: 8-bit AdamW's
/// quantization block (kQuantBlock), so blocks count from each unit's start at any world size; 1
/// for the others.
std::int64_t shard_multiple(OptimizerType t);
/// Whether the optimizer keeps fp32 master weights next to the compute weights: unless
/// master_weights is none, when the model computes in another precision than the optimizer's
/// (`mixed_precision`) or the optimizer state is offloaded.
bool keeps_master_weights(bool master_weights, bool mixed_precision, Offload offload_optimizer);
/// The host pipeline (issue 38): whether a step's bf16 gradients stay bf16 in CPU memory where they
/// land (AdamW with masters in CPU memory under bf16, unfused) instead of going into a float32 copy.
bool holds_bf16_grads(const RuleSettings& s);
/// Whether a unit of `numel` elements keeps 8-bit moments (8-bit AdamW from kMin8bitSize elements,
/// bitsandbytes' min_8bit_size, applied per unit); smaller ones keep float32 moments.
bool uses_8bit_state(OptimizerType t, std::int64_t numel);

}  // namespace zs::zero
