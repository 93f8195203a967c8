#pragma once
// Flux.1's export of a sharded checkpoint (models/flux/flux_export.cpp says which layouts).

#include <string>

#include "checkpoint/export.h"

namespace zs::checkpoint {

struct CheckpointInfo;

/// Exports `info` (a checkpoint of a Flux.1 run) to `out` in the layout `o.format` names:
/// safetensors (the transformer under diffusers' names), diffusers (a folder), single-file (the
/// transformer in Black Forest Labs' layout), lora-diffusers (a LoRA checkpoint's adapters, PEFT
/// names). Throws zs::Error naming the checkpoint or the output, and for lora-kohya (not written
/// for Flux.1 yet) saying what to use.
ExportResult export_flux_checkpoint(const CheckpointInfo& info, const std::string& out, const ExportOptions& o);

}  // namespace zs::checkpoint
