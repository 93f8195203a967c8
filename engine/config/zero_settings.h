#pragma once
// The ZeRO optimizer's options as a config asks for them: one reading of the config, shared by
// the trainer (train/optimizer_setup.h) and the memory estimator.

#include "settings/trainer_config.h"
#include "zero/zero_optimizer.h"

namespace zs::config {

/// The ZeRO options the config asks for (stage, buckets, offload, the optimizer's hyper-parameters,
/// I/O); the device, compute precision, NVMe run tag and log are the caller's to add.
zero::ZeroOptions zero_options(const TrainerConfig& cfg);

/// Whether the trainer builds the model straight into shards (zero3_init_flag at stage 3), as the
/// trainer decides it and the estimator counts it: not for LoRA on a preset, whose base is written
/// whole to the run's model folder once.
bool builds_into_shards(const TrainerConfig& cfg);

}  // namespace zs::config
