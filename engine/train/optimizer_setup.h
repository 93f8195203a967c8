#pragma once
// Builds the optimizer a config asks for, and the precision it computes in.

#include <functional>
#include <memory>
#include <string>

#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include "settings/trainer_config.h"
#include "config/zero_settings.h"
#include "train/loss_scaler.h"
#include "zero/zero_optimizer.h"

namespace zs::comm {
class Communicator;
}
namespace zs::models {
class TrainableModel;
struct TrainedParts;
}

namespace zs::zero {
class ShardedInit;
}

namespace zs::train {

/// The dtype the model computes in for `precision` (fp32 | bf16 | fp16) on `device`. fp16 needs
/// CUDA (LibTorch has no fp16 convolution or group norm on the CPU): throws zs::Error(config)
/// saying so and suggesting bf16.
at::ScalarType compute_dtype(const std::string& precision, const c10::Device& device);

/// zero3_init_flag's ShardedInit for this rank: units cut to their shards as they are built, kept
/// in bf16 from the start when there are no fp32 master weights (nothing needs fp32 then).
std::unique_ptr<zero::ShardedInit> make_sharded_init(const config::TrainerConfig& cfg, int world, int rank);

/// A ZeroOptimizer over the units of the family's roster (models::unit_roster, the one the
/// estimator counts) for what the run trains (`trained`: models::resolve_trained_parts): the
/// denoiser's units — frozen under training.method lora (the base: moved, and at stage 3
/// partitioned, but not optimized), followed by one unit of its adapters — and each trained text
/// encoder as one more unit (or its adapters' unit, models::text_adapter_unit) at
/// optimizer.text_encoder_lr (also in one process at stage 0, where it does AdamW's arithmetic:
/// one optimizer, one checkpoint format), with the config's stage, buckets, offload (NVMe folders
/// named after `run_tag`) and compute precision and device (the denoiser may still be on the CPU:
/// it moves there unit by unit), its hooks installed on the denoiser. `log` receives one-line
/// notes (which I/O backend NVMe uses). `sharded_init`: the units built straight into shards
/// (zero3_init_flag).
std::unique_ptr<zero::ZeroOptimizer> make_optimizer(const config::TrainerConfig& cfg, const models::TrainedParts& trained,
                                                     models::TrainableModel& model,
                                          comm::Communicator& comm, at::ScalarType compute, const at::Device& device,
                                          const std::string& run_tag,
                                          std::function<void(const std::string&)> log,
                                          const zero::ShardedInit* sharded_init = nullptr);

/// DeepSpeed's fp16 loss-scaling options from the config's `loss_scaling` section.
LossScalerOptions loss_scaler_options(const config::LossScalingConfig& c);

}  // namespace zs::train
