#pragma once
// LoRA files as the tools that use them read them (key names: models/sd/lora_names.h).
//  - kohya (sd-scripts' networks/lora.py; A1111 and ComfyUI load it): per adapted layer
//    "<stem>.lora_down.weight", "<stem>.lora_up.weight" and a scalar "<stem>.alpha" (the scale is
//    alpha / rank), and sd-scripts' "ss_*" metadata: ss_network_module "networks.lora",
//    ss_network_dim (the rank, "16"), ss_network_alpha ("16.0"), ss_network_args (JSON; conv_dim
//    and conv_alpha when 3×3 convolutions are adapted), ss_v2 "False" and ss_base_model_version
//    "sd_v1" or "sdxl_base_v1-0".
//  - diffusers (load_lora_weights, peft's layout): "<component>.<path>.lora_A.weight" (down) and
//    "<component>.<path>.lora_B.weight" (up), metadata {"format": "pt"} as diffusers writes it.
//    The file carries no alpha: diffusers then takes alpha = rank (scale 1), so the scale
//    alpha / rank is multiplied into lora_B.
// Reading a file back attaches its adapters to a model's layers (both formats; a diffusers file
// comes back with alpha = rank and the scale inside up).

#include <map>
#include <string>
#include <utility>
#include <vector>

#include <c10/core/ScalarType.h>

#include "models/lora.h"
#include "models/sd/lora_names.h"

namespace torch::nn {
class Module;
}

namespace zs::models {
struct UNetConfig;
}

namespace zs::checkpoint {


enum class LoraFileFormat { kohya, diffusers };

/// The adapted model parts: each part's root module (the UNet, a text encoder) and which it is.
struct LoraModelPart {
  models::LoraPart part;
  torch::nn::Module* root = nullptr;
};

struct LoraFileOptions {
  bool sdxl = false;                 ///< the model family (key names and ss_base_model_version)
  at::ScalarType dtype = at::kHalf;  ///< what the tensors are stored as (sd-scripts' --save_precision fp16)
  /// Further metadata (kohya: the ss_* training facts such as ss_learning_rate, ss_max_train_steps).
  std::map<std::string, std::string> metadata;
};

/// One adapted layer as a LoRA file holds it (no module needed: exports read adapters from a
/// checkpoint).
struct LoraFileLayer {
  models::LoraPart part;
  std::string path;                                    ///< the layer's module path below its part's root
  std::shared_ptr<const models::LoraAdapter> adapter;  ///< a 4-d down matrix marks a convolution
};

/// Every adapted layer of `parts`, in layer order.
std::vector<LoraFileLayer> lora_file_layers(const std::vector<LoraModelPart>& parts);

/// The tensors and metadata of a LoRA file of these adapters, in layer order.
struct LoraFileContent {
  std::vector<std::pair<std::string, at::Tensor>> tensors;
  std::map<std::string, std::string> metadata;
};
LoraFileContent lora_file_content(const std::vector<LoraFileLayer>& layers, const models::UNetConfig& unet,
                                  LoraFileFormat format, const LoraFileOptions& options);
LoraFileContent lora_file_content(const std::vector<LoraModelPart>& parts, const models::UNetConfig& unet,
                                  LoraFileFormat format, const LoraFileOptions& options);

/// Writes the adapters to `path` (atomically). Throws zs::Error(config) when there is none.
void write_lora_file(const std::string& path, const std::vector<LoraFileLayer>& layers, const models::UNetConfig& unet,
                     LoraFileFormat format, const LoraFileOptions& options);
void write_lora_file(const std::string& path, const std::vector<LoraModelPart>& parts, const models::UNetConfig& unet,
                     LoraFileFormat format, const LoraFileOptions& options);

/// Which format a LoRA file's keys are in; throws zs::Error(io) naming the file when neither.
LoraFileFormat detect_lora_format(const std::string& path);

/// Attaches the adapters in the LoRA file `path` to `parts`' layers (on each layer's device, in
/// `dtype`), replacing adapters they had. Throws zs::Error naming the file and the first key that
/// names no layer of the model, or a tensor whose shape does not fit its layer.
/// Returns how many layers were adapted.
std::size_t read_lora_file(const std::string& path, const std::vector<LoraModelPart>& parts,
                           const models::UNetConfig& unet, bool sdxl, at::ScalarType dtype = at::kFloat);

}  // namespace zs::checkpoint
