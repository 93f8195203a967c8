#pragma once
// Parameter names of the original Stable Diffusion "single-file" checkpoints (the LDM layout
// that A1111 and ComfyUI load) against diffusers' names, for SD 1.x-style UNets with any
// number of layers per block (REFERENCE.md, "Original single-file layout").

#include <string>
#include <utility>
#include <vector>

namespace zs::checkpoint {

/// Prefixes of the components in a single file.
inline constexpr const char* kSingleFileUNet = "model.diffusion_model.";
inline constexpr const char* kSingleFileTextEncoder = "cond_stage_model.transformer.";

/// Pairs (diffusers UNet name, LDM name without the prefix) for every name in `diffusers_names`
/// (the UNet's parameters) of a UNet with `layers_per_block` resnets per down block. Throws
/// zs::Error naming a parameter the layout has no place for.
std::vector<std::pair<std::string, std::string>> single_file_unet_names(const std::vector<std::string>& diffusers_names,
                                                                       int layers_per_block);

}  // namespace zs::checkpoint
