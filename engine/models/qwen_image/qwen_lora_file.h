#pragma once
// Qwen-Image LoRA files in the layouts the peers write, read onto a transformer's adapted layers:
// - DiffSynth-Studio (diffsynth/trainers/utils.py saves peft's state dict; its loader also takes
//   the names without ".default" and with a "diffusion_model." prefix):
//   "transformer_blocks.0.attn.to_q.lora_A.default.weight" / "lora_B", alpha = rank (scale 1);
// - diffusers (QwenImageLoraLoaderMixin): "transformer.<path>.lora_A.weight" / "lora_B", scale 1;
// - musubi-tuner (networks/lora_qwen_image.py, sd-scripts' names): "lora_unet_<path, '.' → '_'>"
//   with ".lora_down.weight", ".lora_up.weight", ".alpha" (scale alpha/rank).

#include <cstddef>
#include <map>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

namespace zs::models {

/// One layer's adapter as a file holds it.
struct FileAdapter {
  at::Tensor down;    ///< [rank, in]
  at::Tensor up;      ///< [out, rank]
  double scale = 1;   ///< what the file's readers multiply up·down by (alpha/rank, or 1)
};

/// The adapters of `file` by layer path, for a transformer whose adaptable layers are `layers`
/// (module paths below it). Throws zs::Error(config) naming the file and the first key that is no
/// LoRA tensor, names no layer of `layers` (a file for another model: say so), or lacks its pair.
std::map<std::string, FileAdapter> read_qwen_lora_file(const std::string& file, const std::vector<std::string>& layers);

}  // namespace zs::models
