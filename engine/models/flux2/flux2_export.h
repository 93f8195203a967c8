#pragma once
// FLUX.2's export of a sharded checkpoint (models/flux2/flux2_export.cpp says which layouts).

#include <string>

#include "checkpoint/export.h"

namespace zs::checkpoint {

struct CheckpointInfo;

/// Exports `info` (a checkpoint of a FLUX.2 run) to `out` in `o.format`: safetensors, diffusers,
/// or lora-diffusers (models/export_sources.h, export_transformer_checkpoint).
ExportResult export_flux2_checkpoint(const CheckpointInfo& info, const std::string& out, const ExportOptions& o);

}  // namespace zs::checkpoint
