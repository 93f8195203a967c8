#pragma once
// A LoRA checkpoint's adapters as one LoRA file (kohya's or diffusers' layout, models/sd/lora_file.h),
// read from the shards without building the model. Used by export_checkpoint; not a public header.

#include <string>

#include "checkpoint/export.h"

namespace zs::checkpoint {

struct CheckpointInfo;
class ShardReader;

/// Writes `info`'s adapters (of `o.ema`'s kind) to the file `out` in `o.format` (lora-kohya or
/// lora-diffusers), stored as `o.dtype` (default fp16), with the family (SD 1.x / SDXL) from the
/// run's `model_dir`. A text encoder trained in full has no place in a LoRA file: the result's
/// notes say so (export --merge keeps it).
ExportResult export_lora_file(const CheckpointInfo& info, const ShardReader& shards, const std::string& model_dir,
                              const std::string& out, const ExportOptions& o);

}  // namespace zs::checkpoint
