#pragma once
// Z-Image's export of a sharded checkpoint (models/z_image/z_image_export.cpp says which layouts).

#include <string>

#include "checkpoint/export.h"

namespace zs::checkpoint {

struct CheckpointInfo;

/// Exports `info` (a checkpoint of a Z-Image run) to `out` in `o.format`: safetensors, diffusers,
/// lora-diffusers, lora-musubi or lora-aitoolkit (models/export_sources.h,
/// export_transformer_checkpoint).
ExportResult export_z_image_checkpoint(const CheckpointInfo& info, const std::string& out, const ExportOptions& o);

}  // namespace zs::checkpoint
