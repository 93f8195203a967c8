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
/// The same before the base's precision has its say: zero3_init_flag at stage 3, not LoRA on a
/// preset (what the estimator weighs when its search may change model.base_precision).
bool zero3_init_applies(const TrainerConfig& cfg);
/// Whether the run quantizes its frozen base unit by unit as the model files are read
/// (model.base_precision on a LoRA run from files): no unit of the base is ever whole in its file
/// precision besides the one being read. It takes zero3_init_flag's place (each rank holds the
/// whole quantized base until the optimizer keeps its shards). A preset's base is quantized when
/// the optimizer takes it (its fresh weights are first written whole to the run's model folder).
bool quantizes_while_loading(const TrainerConfig& cfg);

}  // namespace zs::config
