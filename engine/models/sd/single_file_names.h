#pragma once
// Parameter names of the original Stable Diffusion "single-file" checkpoints (the LDM layout
// that A1111 and ComfyUI load) against diffusers' names, for SD 1.x- and SDXL-style UNets with
// any number of layers per block, the VAE, and both SDXL text encoders (REFERENCE.md, "Original
// single-file layout"). Used in both directions: export writes these names, loading reads them.

#include <set>
#include <string>
#include <utility>
#include <vector>

#include "models/vae_single_file_names.h"

namespace zs::models {

/// Prefixes of the components in a single file.
inline constexpr const char* kSingleFileUNet = "model.diffusion_model.";
inline constexpr const char* kSingleFileTextEncoder = "cond_stage_model.transformer.";
/// SDXL: CLIP ViT-L (transformers' names after the prefix) and OpenCLIP ViT-bigG (OpenCLIP's names).
inline constexpr const char* kSingleFileXLTextEncoder = "conditioner.embedders.0.transformer.";
inline constexpr const char* kSingleFileXLTextEncoder2 = "conditioner.embedders.1.model.";

/// Pairs (diffusers UNet name, LDM name without the prefix) for every name in `diffusers_names`
/// (the UNet's parameters) of a UNet with `layers_per_block` resnets per down block; SDXL's
/// add_embedding.linear_{1,2} is label_emb.0.{0,2}. Throws
/// zs::Error naming a parameter the layout has no place for.
std::vector<std::pair<std::string, std::string>> single_file_unet_names(const std::vector<std::string>& diffusers_names,
                                                                       int layers_per_block);

/// One UNet parameter's LDM name (without the prefix); `up_with_attention`: the indices of the up
/// blocks that have attention (their upsampler comes third).
std::string single_file_unet_name(const std::string& diffusers_name, int layers_per_block,
                                  const std::set<int>& up_with_attention);

/// One tensor of OpenCLIP's text tower (SDXL's second text encoder in single files) and the
/// transformers (CLIPTextModelWithProjection) tensors it is made of.
struct OpenClipTensor {
  std::string name;                ///< OpenCLIP name without the prefix ("transformer.resblocks.0.attn.in_proj_weight")
  std::vector<std::string> parts;  ///< transformers names: one, or q, k, v stacked along dim 0 (in_proj)
  bool transposed = false;         ///< text_projection: OpenCLIP's [width, projection] is the linear weight transposed
};
/// The OpenCLIP tensors for a CLIPTextModelWithProjection with parameters `hf_names` (positional
/// embedding, fused in_proj of q/k/v, ln_1/ln_2, mlp.c_fc/c_proj, ln_final, text_projection).
/// Throws zs::Error(checkpoint) naming a parameter OpenCLIP has no place for.
std::vector<OpenClipTensor> open_clip_text_names(const std::vector<std::string>& hf_names);

}  // namespace zs::models
