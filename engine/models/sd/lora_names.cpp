#include "models/sd/lora_names.h"

#include <set>

#include "core/error.h"
#include "models/sd/single_file_names.h"

namespace zs::models {

namespace {

std::string underscored(std::string s) {
  for (char& c : s)
    if (c == '.') c = '_';
  return s;
}

const char* kohya_prefix(LoraPart part, bool sdxl) {
  switch (part) {
    case LoraPart::unet: return "lora_unet_";
    case LoraPart::text_encoder: return sdxl ? "lora_te1_" : "lora_te_";
    case LoraPart::text_encoder_2: return "lora_te2_";
  }
  return "";
}

}  // namespace

std::vector<std::string> kohya_lora_stems(LoraPart part, bool sdxl, const std::vector<std::string>& paths,
                                          const UNetConfig& unet) {
  if (part == LoraPart::text_encoder_2 && !sdxl)
    throw Error(ErrorKind::config, "LoRA export: only SDXL has a second text encoder");
  std::set<int> up_with_attention;
  for (std::size_t i = 0; i < unet.up_block_types.size(); ++i)
    if (unet.up_block_types[i].find("CrossAttn") != std::string::npos) up_with_attention.insert(static_cast<int>(i));
  const std::string prefix = kohya_prefix(part, sdxl);
  std::vector<std::string> out;
  out.reserve(paths.size());
  for (const auto& path : paths) {
    std::string name = path;
    if (part == LoraPart::unet && sdxl) {
      // The LDM name of the layer's weight, without ".weight".
      name = single_file_unet_name(path + ".weight", static_cast<int>(unet.layers_per_block), up_with_attention);
      name.resize(name.size() - std::string(".weight").size());
    }
    out.push_back(prefix + underscored(name));
  }
  return out;
}

const char* diffusers_lora_component(LoraPart part) {
  switch (part) {
    case LoraPart::unet: return "unet";
    case LoraPart::text_encoder: return "text_encoder";
    case LoraPart::text_encoder_2: return "text_encoder_2";
  }
  return "";
}

}  // namespace zs::models
