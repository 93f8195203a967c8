#pragma once
// The adapter config diffusers stores in a LoRA file (save_lora_weights(...,
// *_lora_adapter_metadata=LoraConfig.to_dict()), loaders/lora_base.py): PEFT's LoraConfig as JSON in
// the safetensors header's "lora_adapter_metadata", each key behind its component ("transformer.r",
// "transformer.lora_alpha", "unet.use_dora" …). diffusers' loader builds the LoraConfig from it, so
// a layer's change is (lora_alpha / r) · B · A (lora_alpha / √r with use_rslora). Shared by every
// family's LoRA import and diffusers-format export.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace zs::io {
class SafetensorsReader;
}

namespace zs::models {

/// The safetensors header key diffusers keeps the adapter config under.
inline constexpr char kLoraAdapterMetadataKey[] = "lora_adapter_metadata";

/// What ZeroStudio reads of PEFT's LoraConfig.
struct PeftLoraConfig {
  double r = 0;           ///< the rank the config names
  double lora_alpha = 0;
  bool use_rslora = false;
  /// lora_alpha / r, or lora_alpha / √r with use_rslora (peft/tuners/lora/layer.py update_layer).
  double scale() const;
};

/// The config of `component` ("transformer", "unet", "text_encoder") in `reader`'s header, or
/// nullopt when the file has none (then the file's own alphas, or scale 1, hold). Throws
/// zs::Error(config) naming `file` and the key for what ZeroStudio does not apply: use_dora,
/// a non-empty rank_pattern or alpha_pattern, a missing or non-numeric r or lora_alpha, JSON that
/// does not parse.
std::optional<PeftLoraConfig> read_peft_lora_config(const io::SafetensorsReader& reader, const std::string& component,
                                                    const std::string& file);

/// One adapted layer of a LoRA file whose lora_B carries the scale alpha/rank (our PEFT exports).
struct PeftLoraLayer {
  std::string component;  ///< "transformer", "unet", "text_encoder" …
  std::string path;       ///< the module path (one of PEFT's target_modules)
  std::int64_t rank = 0;
};

/// The header entry diffusers writes for such a file: {kLoraAdapterMetadataKey: JSON with each
/// component's LoraConfig keys behind "NAME."}, r the layers' rank and lora_alpha = r (scale 1, as
/// the file is read); to merge into a file's metadata. Empty when there are no layers or a
/// component's layers differ in rank (one r cannot describe them).
std::map<std::string, std::string> peft_lora_metadata(const std::vector<PeftLoraLayer>& layers);

}  // namespace zs::models
