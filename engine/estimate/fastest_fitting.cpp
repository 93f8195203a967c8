#include "estimate/fastest_fitting.h"

#include <algorithm>

namespace zs::estimate {
namespace {

struct OffloadTier {
  Offload optimizer, param;
  int min_stage;  ///< the optimizer offloads from stage 1, parameters at stage 3 only
};

/// The offload tiers in the header's order 1.
const std::vector<OffloadTier>& offload_tiers(bool adapters_only) {
  static const std::vector<OffloadTier> full = {
      {Offload::none, Offload::none, 0}, {Offload::cpu, Offload::none, 1},  {Offload::none, Offload::cpu, 3},
      {Offload::cpu, Offload::cpu, 3},   {Offload::nvme, Offload::none, 1}, {Offload::nvme, Offload::cpu, 3},
      {Offload::nvme, Offload::nvme, 3}};
  // LoRA: the adapters' optimizer stays on the device; the frozen base may go to CPU or NVMe.
  static const std::vector<OffloadTier> adapters = {
      {Offload::none, Offload::none, 0}, {Offload::none, Offload::cpu, 3}, {Offload::none, Offload::nvme, 3}};
  return adapters_only ? adapters : full;
}

const char* where(Offload o) { return o == Offload::cpu ? "CPU memory" : "NVMe"; }

}  // namespace

std::vector<std::string> TrainingSetting::settings() const {
  auto flag = [](bool b) { return b ? "true" : "false"; };
  return {"zero.stage=" + std::to_string(stage),
          std::string("zero.offload_optimizer.device=") + offload_name(offload_optimizer),
          std::string("zero.offload_param.device=") + offload_name(offload_param),
          "optimizer.type=" + optimizer,
          std::string("optimizer.master_weights=") + (master_weights ? "fp32" : "none"),
          std::string("optimizer.fused_backward=") + flag(fused_backward),
          std::string("training.gradient_checkpointing=") + flag(gradient_checkpointing),
          std::string("training.cpu_checkpointing=") + flag(cpu_checkpointing),
          std::string("model.base_precision=") + quant::to_string(base_precision)};
}

std::string TrainingSetting::describe() const {
  std::string s = "ZeRO stage " + std::to_string(stage);
  if (offload_optimizer == Offload::none && offload_param == Offload::none) s += ", no offload";
  if (offload_optimizer != Offload::none) s += std::string(", optimizer in ") + where(offload_optimizer);
  if (offload_param != Offload::none) s += std::string(", parameters in ") + where(offload_param);
  s += ", " + (optimizer == "AdamW8bit" ? std::string("8-bit AdamW") : optimizer);
  s += master_weights ? ", fp32 masters" : ", no fp32 masters";
  if (fused_backward) s += ", fused step";
  if (base_precision != quant::BaseFormat::bf16) s += std::string(", ") + quant::to_string(base_precision) + " base";
  s += !gradient_checkpointing ? ", no checkpointing"
       : cpu_checkpointing     ? ", checkpointing (inputs in CPU memory)"
                               : ", checkpointing";
  return s;
}

std::vector<TrainingSetting> fastest_candidates(const EstimateOptions& o, bool nvme) {
  // Only the adapters train (and perhaps text-encoder adapters): their state is a few MB.
  const bool adapters_only = o.lora && o.text_training != models::TextEncoderTraining::full;
  const bool bf16 = o.precision == "bf16";
  const bool fp16 = o.precision == "fp16";
  const std::vector<std::string> optimizers =
      adapters_only ? std::vector<std::string>{"AdamW"} : std::vector<std::string>{"AdamW", "AdamW8bit", "Adafactor"};
  std::vector<bool> masters = {true};
  if (bf16 && !adapters_only) masters.push_back(false);
  std::vector<bool> fused = {false};
  if (!fp16 && !adapters_only) fused.push_back(true);
  std::vector<quant::BaseFormat> bases = {quant::BaseFormat::bf16};
  if (o.lora)
    bases.insert(bases.end(), {quant::BaseFormat::fp8, quant::BaseFormat::int8, quant::BaseFormat::nf4});
  std::vector<TrainingSetting> out;
  for (const OffloadTier& tier : offload_tiers(adapters_only)) {
    const bool on_nvme = tier.optimizer == Offload::nvme || tier.param == Offload::nvme;
    if (on_nvme && !nvme) continue;
    for (const quant::BaseFormat base : bases)
    for (int checkpointing = 0; checkpointing < 3; ++checkpointing)
      for (int stage = tier.min_stage; stage <= 3; ++stage)
        for (bool f : fused)
          for (const auto& optimizer : optimizers)
            for (bool m : masters) {
              // Validation's rule: a state read from NVMe after backward cannot step during it.
              if (tier.optimizer == Offload::nvme && f) continue;
              TrainingSetting s;
              s.stage = stage;
              s.offload_optimizer = tier.optimizer;
              s.offload_param = tier.param;
              s.gradient_checkpointing = checkpointing > 0;
              s.cpu_checkpointing = checkpointing > 1;
              s.fused_backward = f;
              s.optimizer = optimizer;
              s.master_weights = m;
              s.base_precision = base;
              out.push_back(std::move(s));
            }
  }
  return out;
}

TrainingSetting setting_of(const EstimateOptions& o) {
  TrainingSetting s;
  s.stage = o.stage;
  s.offload_optimizer = o.offload_optimizer;
  s.offload_param = o.offload_param;
  s.gradient_checkpointing = o.gradient_checkpointing;
  s.cpu_checkpointing = o.gradient_checkpointing && o.cpu_checkpointing;
  s.fused_backward = o.fused_backward;
  s.optimizer = o.optimizer;
  s.master_weights = o.master_weights;
  s.base_precision = o.base_format;
  return s;
}

EstimateOptions with_setting(EstimateOptions o, const TrainingSetting& s) {
  o.stage = s.stage;
  o.offload_optimizer = s.offload_optimizer;
  o.offload_param = s.offload_param;
  o.gradient_checkpointing = s.gradient_checkpointing;
  o.cpu_checkpointing = s.cpu_checkpointing;
  o.fused_backward = s.fused_backward;
  o.optimizer = s.optimizer;
  o.master_weights = s.master_weights;
  o.base_format = o.lora ? s.base_precision : quant::BaseFormat::bf16;
  // The delayed update stays where the engine runs it under these settings (zero::option_problems).
  if (o.delayed_update)
    for (const auto& problem : zero::option_problems(rule_settings(o)))
      if (problem.key == "zero.offload_optimizer.delayed_update") o.delayed_update = false;
  return o;
}

std::int64_t host_memory_needed(const MemoryEstimate& e) {
  return std::max(e.cpu.total(), e.cpu_load_peak) * std::max(e.options.processes_per_machine, 1);
}

FastestFit fastest_fitting(const ModelShape& model, const EstimateOptions& options, std::int64_t gpu_bytes,
                           std::int64_t host_bytes, bool nvme) {
  FastestFit fit;
  EstimateOptions o = options;
  o.gpu_memory = 0;  // no suggestion inside each estimate (lowest_fitting's nine more)
  o.cpu_memory = 0;
  const std::vector<TrainingSetting> candidates = fastest_candidates(options, nvme);
  int card_only = -1;  // the first that fits the card but not the host
  for (int i = 0; i < static_cast<int>(candidates.size()); ++i) {
    ++fit.tried;
    const MemoryEstimate e = estimate_memory(model, with_setting(o, candidates[i]));
    if (e.gpu.total() > gpu_bytes) continue;
    if (host_bytes > 0 && host_memory_needed(e) > host_bytes) {
      if (card_only < 0) card_only = i;
      continue;
    }
    fit.rank = i;
    break;
  }
  fit.host_fits = fit.rank >= 0 || card_only < 0;
  if (fit.rank < 0) fit.rank = card_only;
  if (fit.rank < 0) return fit;
  fit.found = true;
  fit.setting = candidates[fit.rank];
  EstimateOptions chosen = with_setting(options, fit.setting);
  chosen.gpu_memory = gpu_bytes;
  chosen.cpu_memory = host_bytes;
  fit.estimate = estimate_memory(model, chosen);
  fit.host_needed = host_memory_needed(fit.estimate);
  return fit;
}

}  // namespace zs::estimate
