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
inline constexpr const char* kSingleFileVae = "first_stage_model.";

/// Pairs (diffusers UNet name, LDM name without the prefix) for every name in `diffusers_names`
/// (the UNet's parameters) of a UNet with `layers_per_block` resnets per down block. Throws
/// zs::Error naming a parameter the layout has no place for.
std::vector<std::pair<std::string, std::string>> single_file_unet_names(const std::vector<std::string>& diffusers_names,
                                                                       int layers_per_block);

/// Pairs (diffusers VAE name, LDM name without the prefix) for an AutoencoderKL with
/// `num_blocks` blocks: down.{i}.block.{j}, up.{n−1−i} (reversed), mid.block_{1,2},
/// mid.attn_1.{norm,q,k,v,proj_out}, nin_shortcut, norm_out, (down|up)sample.conv. The attention
/// matrices are [C, C] in diffusers and [C, C, 1, 1] there (see `single_file_vae_is_conv`).
std::vector<std::pair<std::string, std::string>> single_file_vae_names(const std::vector<std::string>& diffusers_names,
                                                                      int num_blocks);
/// True for LDM VAE names whose weight is a 1x1 convolution where diffusers has a linear layer.
bool single_file_vae_is_conv(const std::string& ldm_name);

}  // namespace zs::checkpoint
