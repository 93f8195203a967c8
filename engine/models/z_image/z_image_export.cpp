// Z-Image's export (ZImageFamily::export_checkpoint). The LoRA layouts, each as its reader defines it
// (all three are read by diffusers' ZImageLoraLoaderMixin, loaders/lora_pipeline.py, through
// lora_conversion_utils.py's Z-Image conversion):
// - lora-diffusers: "transformer.<path>.lora_A.weight" / ".lora_B.weight" (PEFT names, scale
//   folded into lora_B), as ZImagePipeline.save_lora_weights writes them;
// - lora-musubi: "lora_unet_<path, '.' → '_'>.lora_down.weight" / ".lora_up.weight" / ".alpha"
//   (musubi-tuner's networks/lora_zimage.py, sd-scripts' module naming);
// - lora-aitoolkit: "diffusion_model.<path>.lora_A.weight" / ".lora_B.weight", no alpha (ostris'
//   ai-toolkit's Z-Image LoRAs, which ComfyUI also loads).
#include "models/z_image/z_image_export.h"

#include "models/export_sources.h"
#include "models/z_image/z_image_model.h"

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
  spec.pipeline_of = [](const std::string& dir) { return models::ZImageModel::pipeline_of(dir); };
  return export_transformer_checkpoint(info, out, o, spec);
}

}  // namespace zs::checkpoint
