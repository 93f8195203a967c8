#pragma once
// AutoencoderKL's tensors under the original (LDM) single-file names, as SD's single files and
// Black Forest Labs' ae.safetensors store them: shared by the SD and Flux families.

#include <string>
#include <utility>
#include <vector>

namespace zs::models {

/// The VAE's prefix in an SD single file (model.diffusion_model.* and the others: sd/single_file_names.h).
inline constexpr const char* kSingleFileVae = "first_stage_model.";

/// Pairs (diffusers VAE name, LDM name without the prefix) for an AutoencoderKL with
/// `num_blocks` blocks: down.{i}.block.{j}, up.{n−1−i} (reversed), mid.block_{1,2},
/// mid.attn_1.{norm,q,k,v,proj_out}, nin_shortcut, norm_out, (down|up)sample.conv. The attention
/// matrices are [C, C] in diffusers and [C, C, 1, 1] there (see `single_file_vae_is_conv`).
std::vector<std::pair<std::string, std::string>> single_file_vae_names(const std::vector<std::string>& diffusers_names,
                                                                      int num_blocks);
/// True for LDM VAE names whose weight is a 1x1 convolution where diffusers has a linear layer.
bool single_file_vae_is_conv(const std::string& ldm_name);

}  // namespace zs::models
