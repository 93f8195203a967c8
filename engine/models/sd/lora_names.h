#pragma once
// The key names LoRA files use for an adapted layer, by the tool that reads them:
//  - kohya's sd-scripts (networks/lora.py; A1111 and ComfyUI read the same): one stem per layer,
//    "lora_unet_" / "lora_te_" (SDXL: "lora_te1_", "lora_te2_") + the layer's module path with
//    "." as "_", holding "<stem>.lora_down.weight", "<stem>.lora_up.weight" and "<stem>.alpha".
//    SD 1.x's UNet paths are diffusers' ("down_blocks_0_attentions_0_…"); SDXL's are the original
//    (LDM) block names ("input_blocks_4_1_transformer_blocks_0_…"), as sd-scripts' SDXL UNet
//    names its modules. Text encoders use transformers' paths ("text_model_encoder_layers_0_…").
//  - diffusers (load_lora_weights, peft's layout): "<component>.<path>.lora_A.weight" and
//    "<component>.<path>.lora_B.weight" with component unet, text_encoder or text_encoder_2.

#include <string>
#include <vector>

#include "models/sd/unet_config.h"

namespace zs::models {

/// Which trained part an adapted layer belongs to.
enum class LoraPart { unet, text_encoder, text_encoder_2 };

/// kohya stems for the adapted layers `paths` (module paths below the part's root) of one part.
/// `sdxl` picks the family (it changes the text encoders' prefixes and the UNet's path names);
/// `unet` is the UNet's config (its block layout places the LDM names).
std::vector<std::string> kohya_lora_stems(LoraPart part, bool sdxl, const std::vector<std::string>& paths,
                                          const UNetConfig& unet);

/// diffusers' component prefix of a part: "unet", "text_encoder", "text_encoder_2".
const char* diffusers_lora_component(LoraPart part);

}  // namespace zs::models
