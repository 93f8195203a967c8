#pragma once
// The fastest training setting that fits a card: the wizard's "Use the fastest setting that
// fits". Where lowest_fitting (memory_estimator.h) walks ZeRO stages and offloads only, this
// search also turns the levers that change what a step computes or keeps: the optimizer, fp32
// master weights, the fused step and activation checkpointing. Each candidate is estimated by
// estimate_memory, the estimator the panel shows, so the setting it picks is one the panel says
// fits.
//
// The cost order (fastest first), compared key by key; a later key only breaks ties of the
// earlier ones:
//   1. Offload, least data moved per step first: none; the optimizer in CPU memory (gradients
//      go down and weights come up once per step, and the step runs on the CPU); the parameters
//      in CPU memory (every weight crosses PCIe in each forward and again in each backward); both;
//      then NVMe (a disk is ten times slower than PCIe): the optimizer, the optimizer with the
//      parameters in CPU memory, both on NVMe.
//   2. Activation checkpointing: off; on (one more forward per step, about a third more time);
//      on with the kept inputs in CPU memory (cpu_checkpointing: they also cross PCIe).
//   3. ZeRO stage, lowest first: each stage adds communication (stage 3 gathers every sharded
//      unit in forward and again in backward).
//   4. The fused step off before on: it costs no time, but clips by the previous step's norm,
//      so the exact step is kept where memory allows.
//   5. The optimizer: AdamW, then 8-bit AdamW (block-wise quantised moments, dequantised every
//      step), then Adafactor (factored second moments: the furthest from AdamW's updates).
//   6. fp32 master weights kept before none (bf16 weights rounded stochastically).
// Offload and checkpointing dominate a step's time (the CPU step of a full fine-tune takes
// seconds; checkpointing costs a third), so they come first; 4-6 change the numbers a step
// computes more than its time, and come last so a full fine-tune keeps AdamW's exact step
// whenever the card allows it. The kohya/OneTrainer recipe for SDXL on 24 GB (Adafactor, no
// masters, fused, no offload) is what this order picks there.
//
// LoRA adds the frozen base's storage (model.base_precision), as key 1b right after the offload
// tier: bf16, fp8, int8, nf4 — within a tier the base's numerics come before checkpointing's
// time, so a resident quantized base ranks before streaming a bf16 one (the tier after), and
// fp8 before nf4 even where nf4 would spare checkpointing. fp8 before int8 (the same bytes; the
// peers' default, with relative precision for small weights), nf4 last (the coarsest grid).
//
// Candidates: stages 0-3; offload as validation allows (the optimizer from stage 1, parameters at
// stage 3, the optimizer on NVMe unfused only; NVMe only with `nvme`); AdamW, AdamW8bit and
// Adafactor; masters fp32 or (bf16 only) none; fused on or off (not under fp16); checkpointing
// off, on, on in CPU memory. A LoRA run whose text encoders do not train in full has only its adapters' tiny state
// to place, so its candidates keep AdamW with fp32 masters, unfused, and the optimizer on the
// device: its levers are the stage and parameter offload of the frozen base, and checkpointing.

#include <cstdint>
#include <string>
#include <vector>

#include "estimate/memory_estimator.h"

namespace zs::estimate {

/// One candidate: what the search chooses (the config key each sets in brackets).
struct TrainingSetting {
  int stage = 0;                              ///< zero.stage
  Offload offload_optimizer = Offload::none;  ///< zero.offload_optimizer.device
  Offload offload_param = Offload::none;      ///< zero.offload_param.device
  bool gradient_checkpointing = false;        ///< training.gradient_checkpointing
  bool cpu_checkpointing = false;             ///< training.cpu_checkpointing (with checkpointing only)
  bool fused_backward = false;                ///< optimizer.fused_backward
  std::string optimizer = "AdamW";            ///< optimizer.type: AdamW | AdamW8bit | Adafactor
  bool master_weights = true;                 ///< optimizer.master_weights fp32 (false: none)
  quant::BaseFormat base_precision = quant::BaseFormat::bf16;  ///< model.base_precision (LoRA)
  /// The setting as `--set` settings, every key above ("zero.stage=2", ...).
  std::vector<std::string> settings() const;
  /// One line for people: "ZeRO stage 2, optimizer in CPU memory, Adafactor, no fp32 masters,
  /// fused step, gradient checkpointing".
  std::string describe() const;
  bool operator==(const TrainingSetting&) const = default;
};

/// The candidates for `options` (its precision, LoRA, text-encoder training), fastest first: the
/// header's cost order. NVMe offload is among them with `nvme` only.
std::vector<TrainingSetting> fastest_candidates(const EstimateOptions& options, bool nvme = true);

/// The setting `options` describe (cpu_checkpointing only with checkpointing): equal to the
/// search's pick when the answers already are the fastest that fits.
TrainingSetting setting_of(const EstimateOptions& options);

/// `options` with `setting` applied (the delayed update kept only where it still applies: CPU
/// optimizer offload, AdamW or AdamW8bit with masters, unfused).
EstimateOptions with_setting(EstimateOptions options, const TrainingSetting& setting);

/// CPU memory a setting needs on this machine: every process's offloaded state, EMA, kept
/// inputs and buffers, or the peak while the model loads where that is larger (what the
/// panel's CPU bar shows, and what cpu_fits compares).
std::int64_t host_memory_needed(const MemoryEstimate& estimate);

struct FastestFit {
  bool found = false;      ///< some candidate fits the card
  bool host_fits = true;   ///< it also fits host_bytes (false: none fitting the card does; the fastest for the card is given)
  TrainingSetting setting;
  int rank = -1;           ///< the setting's place in fastest_candidates (0: the fastest of all)
  int tried = 0;           ///< candidates estimated
  MemoryEstimate estimate; ///< of the setting, against the card and host_bytes
  std::int64_t host_needed = 0;  ///< host_memory_needed(estimate)
};

/// The first of fastest_candidates(options, nvme) whose device total fits `gpu_bytes` and whose
/// host_memory_needed fits `host_bytes` (0: unknown, not compared). When no candidate fits both
/// but some fit the card, the first of those, with host_fits false. A larger card never gets a
/// later (slower) candidate, where both searches find one that fits the host (always with
/// host_bytes 0).
FastestFit fastest_fitting(const ModelShape& model, const EstimateOptions& options, std::int64_t gpu_bytes,
                           std::int64_t host_bytes, bool nvme = true);

}  // namespace zs::estimate
