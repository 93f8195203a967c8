#pragma once
// LoRA files of a flow-matching transformer (Qwen-Image, Z-Image) in the layouts the peers write,
// read onto a transformer's adapted layers (lora.init_from). Shared by the families; no family owns it.
// - PEFT, as DiffSynth-Studio (diffsynth/trainers/utils.py saves peft's state dict; its loader also
//   takes the names without ".default" and with a "diffusion_model." prefix) and ai-toolkit
//   ("diffusion_model.<path>") write it: "<path>.lora_A[.default].weight" / "lora_B", scale 1;
// - diffusers (QwenImageLoraLoaderMixin, ZImageLoraLoaderMixin): "transformer.<path>.lora_A.weight" /
//   "lora_B", scale 1, or the header's lora_adapter_metadata;
// - musubi-tuner (networks/lora_qwen_image.py, lora_zimage.py; sd-scripts' names):
//   "lora_unet_<path, '.' → '_'>" with ".lora_down.weight", ".lora_up.weight", ".alpha" (scale alpha/rank).

#include <cstddef>
#include <map>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

namespace torch::nn {
class Module;
}

namespace zs::models {

/// One layer's adapter as a file holds it.
struct FileAdapter {
  at::Tensor down;    ///< [rank, in]
  at::Tensor up;      ///< [out, rank]
  double scale = 1;   ///< what the file's readers multiply up·down by (alpha/rank, or 1)
};

/// The adapters of `file` by layer path, for a `family` ("Qwen-Image") transformer whose adaptable
/// layers are `layers` (module paths below it). Throws zs::Error(config) naming the file and the
/// first key that is no LoRA tensor, names no layer of `layers` (a file for another model: say so),
/// or lacks its pair.
std::map<std::string, FileAdapter> read_transformer_lora_file(const std::string& file, const std::vector<std::string>& layers,
                                                              const std::string& family);

/// lora.init_from onto `transformer`'s adapters (attached already): each layer's update
/// scale·up·down kept whatever the run's alpha. Returns the layers set. Throws zs::Error(config)
/// naming the file when an adapter's rank or shape is not the run's (set lora.rank to the file's).
std::size_t load_transformer_lora_file(torch::nn::Module& transformer, const std::string& path, const std::string& family);

}  // namespace zs::models
