#pragma once
// Memory per process for a training setup: ZeRO's model-state split for the chosen stage,
// offload and precision (from the same plan ZeroOptimizer carries out, zero/zero_plan.h), activations from the
// architecture at the chosen resolution and batch (calibrated against measured forward/backward
// passes of the tiny model), communication and offload buffers, and NVMe bytes. Also the lowest
// stage and offload that fit a given device memory.

#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "models/attention_options.h"
#include "models/model_family.h"
#include "models/model_shape.h"
#include "quant/base_quant.h"
#include "zero/zero_plan.h"
#include "zero/zero_rules.h"

namespace zs::config {
struct TrainerConfig;
}

namespace zs::estimate {

using Offload = zero::Offload;
// The model's shape is the family's (models/model_shape.h); the estimator reads it.
using models::ModelShape;
using models::UnitShape;

/// Everything the estimate depends on (the config's values, or the wizard's current answers).
struct EstimateOptions {
  int world_size = 1;                  ///< processes (ranks) in all
  int processes_per_machine = 1;       ///< ranks sharing this machine's CPU memory
  int stage = 0;                       ///< ZeRO stage 0-3
  std::string precision = "fp32";      ///< fp32 | bf16 | fp16 (compute dtype; masters are fp32)
  Offload offload_optimizer = Offload::none;
  Offload offload_param = Offload::none;  ///< stage 3 only (ignored otherwise, as DeepSpeed does)
  std::int64_t batch_size = 1;         ///< micro batch per process
  std::int64_t resolution = 512;       ///< image side in pixels
  bool gradient_checkpointing = false;
  bool cpu_checkpointing = false;      ///< with checkpointing: the kept unit inputs in CPU memory
  models::AttentionOptions attention;  ///< training.attention: plain keeps tokens² probabilities per head
  bool ema = false;                    ///< EMA of the rank's part, fp32 in CPU memory
  /// training.method lora: the UNet's weights are a frozen base (whole, or at stage 3 sharded,
  /// in the compute dtype; no gradients, masters, moments or EMA) and its adapters
  /// (ModelShape::lora_denoiser_parameters) are what trains.
  bool lora = false;
  /// How the text encoders train: frozen, full (optimizer units like the UNet's) or lora (frozen
  /// bases, adapters ModelShape::lora_text_parameters trained). Trained ones keep activations.
  models::TextEncoderTraining text_training = models::TextEncoderTraining::frozen;
  /// Both caches on (data.cache_latents and data.cache_text_embeddings): assumed complete
  /// (`zerostudio cache`), so the frozen VAE and text encoders wait in CPU memory instead of on
  /// the device; the cache-filling pass is estimated on its own (MemoryEstimate::cache_pass).
  bool frozen_off_device = false;
  std::optional<bool> overlap_comm;   ///< unset: the ZeRO plan's default
  bool zero3_init = false;             ///< stage 3: the model is built straight into shards (zero3_init_flag)
  std::int64_t persistence_threshold = zero::kDefaultPersistenceThreshold;  ///< stage 3: smaller units stay whole
  std::int64_t prefetch_bucket_size = 50'000'000; ///< stage 3: units up to this size are prefetched
  std::int64_t reduce_bucket_size = 500'000'000;  ///< stages 0-1: elements per gradient all-reduce
  std::int64_t allgather_bucket_size = 500'000'000;
  std::int64_t sub_group_size = 1'000'000'000;    ///< NVMe optimizer: elements per sub-group
  int buffer_count = 4;                ///< NVMe optimizer: staging slots (at least 3 are used)
  /// optimizer.type: AdamW (8 bytes of moments an element), AdamW8bit (2 bytes of codes and a
  /// float32 absmax per 256; units below 4096 elements 8 bytes), Adafactor (its statistics, whole
  /// on every rank: see adafactor_state_elements; 4 bytes more an element with beta1).
  std::string optimizer = "AdamW";
  bool adafactor_beta1 = false;
  /// optimizer.master_weights fp32 (masters under bf16/fp16 or offload) or none (bf16 weights only).
  bool master_weights = true;
  /// optimizer.fused_backward: from stage 2 on a unit's reduced gradients exist only from its
  /// reduction to its step (with accumulation > 1 they stay, as without it).
  bool fused_backward = false;
  /// zero.offload_optimizer.delayed_update: a second float32 gradient part in CPU memory (the one
  /// the host thread's update reads while the next step's gradients arrive).
  bool delayed_update = false;
  std::int64_t accumulation = 1;       ///< training.gradient_accumulation_steps
  /// model.base_precision (LoRA): the frozen blocks' Linear weights stored so — codes and scales,
  /// laid out, sharded, offloaded and gathered as bytes (models::quantized_unit_bytes); io stays in
  /// the compute dtype, as make_optimizer quantizes.
  quant::BaseFormat base_format = quant::BaseFormat::bf16;
  /// ... quantized unit by unit as the files are read (a LoRA base from model files,
  /// config::quantizes_while_loading): the load peak holds the quantized base and one unit in
  /// float32, not the whole base in float32.
  bool quantize_while_loading = false;
  /// model.text_encoder_precision: the frozen text encoders' Linear weights stored so.
  quant::BaseFormat text_format = quant::BaseFormat::bf16;
  std::int64_t gpu_memory = 0;         ///< bytes of the compute device (0: unknown, "fits" is true)
  std::int64_t cpu_memory = 0;         ///< bytes of this machine's RAM (0: unknown)
};

/// Bytes in one place (the compute device or CPU memory), per process.
struct MemoryBreakdown {
  std::int64_t parameters = 0;        ///< compute-dtype weights (CPU: offloaded shards and the EMA)
  std::int64_t gradients = 0;         ///< gradients kept between backward and step
  std::int64_t optimizer_states = 0;  ///< fp32 masters and Adam moments
  std::int64_t activations = 0;       ///< saved activations and backward's temporaries at the peak
  std::int64_t buffers = 0;           ///< gathered units, gradients in flight, collective and staging
                                      ///< buffers: what they add to the peak beyond the activations
  std::int64_t total() const { return parameters + gradients + optimizer_states + activations + buffers; }
};

/// The lowest setting that fits (the seeds' advice: the lowest DeepSpeed level that works).
struct Suggestion {
  bool found = false;
  int stage = 0;
  Offload offload_optimizer = Offload::none;
  Offload offload_param = Offload::none;
};

/// DeepSpeed's own estimators (estimate_zero2/zero3_model_states_mem_needs) for the same setup,
/// for comparison: model states only, GPU per process, CPU per machine, 1.5 buffer factor. Stage
/// 3 follows zero3_init_flag (DeepSpeed's zero_init); NVMe offload counts as its cpu_offload.
struct DeepSpeedFigures {
  bool available = false;  ///< DeepSpeed has estimators for stages 2 and 3 only
  std::int64_t gpu = 0;    ///< bytes per process
  std::int64_t cpu = -1;   ///< bytes per machine (-1: not available)
  std::int64_t total_parameters = 0;          ///< DeepSpeed's inputs: the trainable parameters
  std::int64_t largest_layer_parameters = 0;  ///< and the largest layer's (stage 3)
};

struct MemoryEstimate {
  std::int64_t parameters = 0;  ///< Ψ: trainable parameters (LoRA: the adapters, and any fully trained text encoder)
  std::int64_t adapter_parameters = 0;      ///< of those, LoRA adapters
  std::int64_t frozen_base_parameters = 0;  ///< LoRA's frozen UNet (and a preset's frozen text encoder): laid out
                                            ///< like trained units (sharded at stage 3), parameters only
  std::int64_t frozen_parameters = 0;  ///< VAE and text encoders (in gpu.parameters, or cpu.parameters when off the device)
  std::int64_t frozen_fp32_parameters = 0;  ///< of those, kept in fp32 (VAE with force_upcast)
  EstimateOptions options;
  MemoryBreakdown gpu;          ///< the compute device (the CPU itself in a CPU-only run)
  MemoryBreakdown cpu;          ///< host memory of this process (offloaded state, EMA)
  std::int64_t nvme = 0;        ///< bytes in this process's NVMe files
  /// CPU bytes per process while the model loads: the trainable model in fp32 and the frozen
  /// parts before they are cast (stage 3 with zero3_init: its shards, the whole units and the
  /// largest unit instead of the trainable model, an upper bound). Counted in cpu_fits.
  std::int64_t cpu_load_peak = 0;
  /// Device bytes of the cache-filling pass (frozen weights and one image's encoding, no
  /// gradients), when the frozen parts are off the device during training; 0 otherwise.
  std::int64_t cache_pass = 0;
  /// Host bytes of that pass: every frozen part in CPU memory (a streamed encoder whole, in the
  /// compute dtype or model.text_encoder_precision's codes), which the device visits piece by piece.
  std::int64_t cache_pass_host = 0;
  /// Bytes of the frozen parts inside gpu.parameters (0 when they are off the device).
  std::int64_t gpu_frozen = 0;
  /// Bytes the frozen base holds laid out (a quantized base: codes and scales; else the compute
  /// dtype), all ranks' shards together.
  std::int64_t frozen_base_bytes = 0;
  /// Bytes of parameters each process copies from CPU memory (or NVMe) to the device in one
  /// optimizer step: each offloaded stage-3 shard twice a micro-batch (forward, and backward's
  /// gather again), a streamed text encoder once a micro-batch where no cache holds its outputs,
  /// and with optimizer offload the updated weights once. 0 on a CPU-only run's terms as well.
  std::int64_t host_to_device_per_step = 0;
  bool fits = true;             ///< gpu.total() <= gpu_memory (when known)
  bool cpu_fits = true;         ///< cpu bytes of every rank on the machine <= cpu_memory (when known)
  Suggestion suggestion;        ///< lowest stage/offload that fits gpu_memory
  DeepSpeedFigures deepspeed;   ///< what DeepSpeed's estimator says for this setup
};

/// DeepSpeed's estimator figures for `model` under `options` (see DeepSpeedFigures).
DeepSpeedFigures deepspeed_estimator(const ModelShape& model, const EstimateOptions& options);

/// The optimizer type `options.optimizer` names (AdamW for anything else).
zero::OptimizerType optimizer_type(const EstimateOptions& options);
/// What the engine's rules (zero/zero_rules.h) read, as the estimate's options say it: the
/// estimator asks the engine's own predicates instead of restating them.
zero::RuleSettings rule_settings(const EstimateOptions& options);

/// The estimate for `model` under `options` (suggestion included when gpu_memory is set).
MemoryEstimate estimate_memory(const ModelShape& model, const EstimateOptions& options);

/// The options a trainer config implies (world size from launch.num_processes; the device
/// memory is left 0).
EstimateOptions options_from_config(const config::TrainerConfig& config);

/// The lowest of: stage 0, 1, 2, 2 + CPU optimizer offload, 3, 3 + CPU optimizer offload,
/// 3 + CPU optimizer and parameter offload, 3 + NVMe optimizer offload (parameters on CPU),
/// 3 + NVMe for both, whose device total fits options.gpu_memory. (found = false: none does.)
Suggestion lowest_fitting(const ModelShape& model, EstimateOptions options);

/// Adafactor's statistics for a unit of `parameters` elements: its 3×3 convolutions keep 2/3 of
/// their size (factored over the kernel's two dimensions), its linear layers O + I, its vectors
/// their size. Resnets and samplers are counted from their channels; other units (transformer
/// blocks) as 4/width of their size (an upper bound for linear layers of that width and their
/// vectors; 1/8 below 32 features and for units without a shape: encoders, adapters), io as 2/3.
std::int64_t adafactor_state_elements(const UnitShape* shape, std::int64_t parameters);

/// Activation bytes per process at the peak of forward + backward (see estimate_memory).
std::int64_t activation_bytes(const ModelShape& model, const EstimateOptions& options);
/// Activation bytes at the peak on the device, and in CPU memory (cpu_checkpointing's kept inputs).
struct ActivationBytes {
  std::int64_t device = 0;
  std::int64_t cpu = 0;
};
ActivationBytes activation_split(const ModelShape& model, const EstimateOptions& options);

/// ZeRO's model-state bytes per rank for Ψ parameters (mixed-precision Adam, K = 12):
/// 16Ψ, 4Ψ + 12Ψ/N, 2Ψ + 14Ψ/N, 16Ψ/N for stages 0-3 (N must divide Ψ for exact values).
std::int64_t zero_paper_bytes(std::int64_t psi, int world_size, int stage);

using zero::offload_from_name;
using zero::offload_name;
/// "24GiB", "24 GB", "24G", "80e9", "25769803776": bytes; throws zs::Error(config) otherwise.
std::int64_t parse_bytes(const std::string& text);

/// The JSON object `zerostudio estimate --json` prints (sizes in bytes per process).
nlohmann::json to_json(const MemoryEstimate& estimate);
/// The table `zerostudio estimate` prints.
std::string to_table(const MemoryEstimate& estimate, const ModelShape& model);

}  // namespace zs::estimate
