#pragma once
// Qwen-Image's export of a sharded checkpoint (models/qwen_image/qwen_export.cpp says which layouts).

#include <string>

#include "checkpoint/export.h"

namespace zs::checkpoint {

struct CheckpointInfo;

/// Exports `info` (a checkpoint of a Qwen-Image run) to `out` in the layout `o.format` names:
/// safetensors (the transformer under diffusers' names), diffusers (a folder), lora-diffusers
/// (PEFT names with the "transformer." prefix, as diffusers' QwenImagePipeline.load_lora_weights
/// reads them), lora-diffsynth (DiffSynth-Studio's: PEFT names without a prefix, ".default"
/// adapters), lora-musubi (musubi-tuner's kohya-style "lora_unet_*"); --merge merges a LoRA
/// checkpoint into the full-weight formats. Streamed one tensor at a time. Throws zs::Error naming
/// the checkpoint or the output.
ExportResult export_qwen_image_checkpoint(const CheckpointInfo& info, const std::string& out, const ExportOptions& o);

}  // namespace zs::checkpoint
