#pragma once
// What an export of a sharded checkpoint asks for and returns (train/checkpoint_export.h runs it
// through the run's model family). Exports are consolidated one tensor at a time: memory holds
// the largest tensor (and its converted copy), never the whole model.
// The layouts are the model family's (SD's: models/sd/sd_export.cpp):
//   safetensors: one file with the UNet under diffusers' names and __metadata__ (format, step,
//                config hash, which weights).
//   single-file: the original Stable Diffusion layout in one file (model.diffusion_model.* with
//                the LDM block numbering, first_stage_model.* for the VAE,
//                cond_stage_model.transformer.* for the text encoder; SDXL:
//                conditioner.embedders.0/1.*), as A1111 and ComfyUI load it.
//   lora-kohya, lora-diffusers: a LoRA checkpoint's adapters as one file (models/sd/lora_file.h);
//                full-weight formats of a LoRA checkpoint need `merge`.
//   diffusers:   a folder diffusers reads: unet/config.json + unet/diffusion_pytorch_model.safetensors,
//                text_encoder/config.json + text_encoder/model.safetensors, and the run's
//                scheduler/ and tokenizer/ folders copied.

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <c10/core/ScalarType.h>

namespace zs::checkpoint {

struct ExportOptions {
  /// safetensors | single-file | diffusers (full weights), lora-kohya | lora-diffusers (a LoRA
  /// checkpoint's adapters as one file: models/sd/lora_file.h)
  std::string format = "safetensors";
  /// fp16 / bf16 / fp32; unset: as stored (fp32), and for LoRA files fp16 (sd-scripts'
  /// --save_precision fp16)
  std::optional<at::ScalarType> dtype;
  /// A LoRA checkpoint in a full-weight format: the base model's weights with the adapters merged
  /// in (W + alpha/rank · up·down), streamed like the others.
  bool merge = false;
  bool ema = false;                        ///< the EMA weights instead of the trained ones
  /// Called after each tensor: (tensors written, tensors in all).
  std::function<void(std::size_t, std::size_t)> progress;
  /// Asked after each tensor; true stops the export with zs::Error(io) "export cancelled" (the
  /// file being written is removed, never left half-written).
  std::function<bool()> cancelled;
};

struct ExportResult {
  std::vector<std::string> files;  ///< what was written
  std::vector<std::string> notes;  ///< what the user should know about it (e.g. what a LoRA file cannot hold)
  std::size_t tensors = 0;
  std::int64_t bytes = 0;
};

}  // namespace zs::checkpoint
