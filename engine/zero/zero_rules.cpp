#include "zero/zero_rules.h"

#include "core/error.h"

namespace zs::zero {

const char* optimizer_name(OptimizerType t) {
  switch (t) {
    case OptimizerType::adamw8bit: return "AdamW8bit";
    case OptimizerType::adafactor: return "Adafactor";
    default: return "AdamW";
  }
}

std::optional<OptimizerType> find_optimizer(const std::string& name) {
  for (auto t : {OptimizerType::adamw, OptimizerType::adamw8bit, OptimizerType::adafactor})
    if (name == optimizer_name(t)) return t;
  return std::nullopt;
}

OptimizerType optimizer_from_name(const std::string& name) {
  if (auto t = find_optimizer(name)) return *t;
  throw Error(ErrorKind::config, "optimizer.type: " + name + " is not one of AdamW, AdamW8bit, Adafactor");
}

Precision precision_from_name(const std::string& name) {
  if (name == "bf16") return Precision::bf16;
  if (name == "fp16") return Precision::fp16;
  return Precision::full;
}

std::vector<OptionProblem> option_problems(const RuleSettings& s) {
  std::vector<OptionProblem> p;
  if (!s.master_weights && s.compute != Precision::bf16)
    p.push_back({"optimizer.master_weights", "none keeps only bf16 weights: it needs precision: bf16 (fp32 has no "
                                             "masters to drop; fp16's loss scaling needs them)"});
  if (s.delayed_update) {
    // The host thread updates masters and moments only: no collectives (Adafactor all-reduces
    // its statistics inside the step), no weights (the device trains on them meanwhile).
    const char* key = "zero.offload_optimizer.delayed_update";
    if (s.offload_optimizer != Offload::cpu)
      p.push_back({key, "needs zero.offload_optimizer.device: cpu (the update runs on a host thread)"});
    if (s.optimizer == OptimizerType::adafactor)
      p.push_back({key, "works with AdamW and AdamW8bit; Adafactor sums its statistics over the ranks inside the step"});
    if (s.fused_backward)
      p.push_back({key, "and optimizer.fused_backward exclude each other (the fused step runs during backward already)"});
    if (!s.master_weights)
      p.push_back({key, "needs optimizer.master_weights: fp32 (the masters run one update ahead of the weights)"});
  }
  if (s.fused_backward && s.compute == Precision::fp16)
    p.push_back({"optimizer.fused_backward", "cannot run under precision fp16: loss scaling must see every gradient "
                                             "before any unit steps; use precision: bf16"});
  if (s.fused_backward && s.offload_optimizer == Offload::nvme)
    p.push_back({"optimizer.fused_backward", "steps each unit from memory during backward; with zero.offload_optimizer.device "
                                             "nvme the state comes from files after backward: use device cpu"});
  return p;
}

std::int64_t shard_multiple(OptimizerType t) { return t == OptimizerType::adamw8bit ? kQuantBlock : 1; }

bool keeps_master_weights(bool master_weights, bool mixed_precision, Offload offload_optimizer) {
  return master_weights && (mixed_precision || offload_optimizer != Offload::none);
}

bool holds_bf16_grads(const RuleSettings& s) {
  // fp16 keeps the float32 copy (loss scaling unscales it in place); the fused backward step and
  // the lean optimizers read their own way.
  return s.host_bf16_grads && s.compute == Precision::bf16 &&
         keeps_master_weights(s.master_weights, true, s.offload_optimizer) && s.offload_optimizer == Offload::cpu &&
         s.optimizer == OptimizerType::adamw && !s.fused_backward;
}

bool uses_8bit_state(OptimizerType t, std::int64_t numel) {
  return t == OptimizerType::adamw8bit && numel >= kMin8bitSize;
}

}  // namespace zs::zero
