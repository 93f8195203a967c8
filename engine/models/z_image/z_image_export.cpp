// Z-Image's export (ZImageFamily::export_checkpoint). The LoRA layouts, each as its reader defines it
// (all three are read by diffusers' ZImageLoraLoaderMixin, loaders/lora_pipeline.py, through
// lora_conversion_utils.py's Z-Image conversion):
// - lora-diffusers: "transformer.<path>.lora_A.weight" / ".lora_B.weight" (PEFT names, scale
//   folded into lora_B), as ZImagePipeline.save_lora_weights writes them;
// - lora-musubi: "lora_unet_<path, '.' → '_'>.lora_down.weight" / ".lora_up.weight" / ".alpha"
//   (musubi-tuner's networks/lora_zimage.py, sd-scripts' module naming);
// - lora-aitoolkit: "diffusion_model.<path>.lora_A.weight" / ".lora_B.weight", no alpha (ostris'
//   ai-toolkit's Z-Image LoRAs, which ComfyUI also loads).
// And --format single-file: the transformer in the original layout ComfyUI loads
// (z_image_turbo_bf16.safetensors: fused qkv; models/z_image/z_image_single_file.h).
#include "models/z_image/z_image_export.h"

#include <map>
#include <memory>

#include "core/error.h"
#include "core/meta_tensors.h"
#include "models/export_sources.h"
#include "models/z_image/z_image_model.h"
#include "models/z_image/z_image_single_file.h"
#include "models/z_image/z_image_transformer.h"

namespace zs::checkpoint {

ExportResult export_z_image_checkpoint(const CheckpointInfo& info, const std::string& out, const ExportOptions& o) {
  TransformerExport spec;
  spec.family = "Z-Image";
  spec.loras = {{"lora-diffusers", "transformer.", "", false, "", true,
                 "diffusers/PEFT LoRA layout: ZImagePipeline.load_lora_weights reads it (the scale alpha/rank is "
                 "folded into lora_B)"},
                {"lora-musubi", "lora_unet_", "", true, "networks.lora_zimage", false,
                 "musubi-tuner's Z-Image LoRA layout (lora_unet_*, lora_down/lora_up/alpha); ComfyUI and diffusers "
                 "read it"},
                {"lora-aitoolkit", "diffusion_model.", "", false, "", false,
                 "ai-toolkit's Z-Image LoRA layout (diffusion_model.*.lora_A/lora_B, alpha/rank folded into lora_B); "
                 "ComfyUI and diffusers read it"}};
  spec.pipeline_of = [](const std::string& dir) { return models::ZImageModel::pipeline_of(dir).path; };
  // A run from ComfyUI's single file merges its adapters into that file's tensors.
  spec.base_transformer = [](const std::string& dir) -> ExportTensors {
    const std::string file = models::ZImageModel::pipeline_of(dir).files.transformer;
    if (file.empty()) return {};
    const models::ZImageFile source(file);
    const auto c = std::make_shared<models::ZImageConfig>(models::ZImageConfig::from_file(dir + "/transformer/config.json"));
    const MetaTensorScope meta;
    return mapped_tensors(*models::ZImageTransformer2DModel(*c),
                          [source, c](const std::string& name) { return source.tensor(name, *c); }, source.path());
  };
  // --format single-file: the original layout ComfyUI loads (z_image_turbo_bf16.safetensors' names,
  // fused qkv), each tensor assembled from the diffusers ones as it is written.
  spec.single_file = [](const std::string& dir, const ExportTensors& transformer) {
    const auto config = models::ZImageConfig::from_file(dir + "/transformer/config.json");
    return single_file_tensors(models::z_image_file_layout(config), transformer, dir);
  };
  return export_transformer_checkpoint(info, out, o, spec);
}

}  // namespace zs::checkpoint
