// Qwen-Image's export (QwenImageFamily::export_checkpoint). The LoRA layouts, each as its reader
// defines it:
// - lora-diffusers: "transformer.<path>.lora_A.weight" / ".lora_B.weight" (diffusers
//   loaders/lora_pipeline.py QwenImageLoraLoaderMixin; PEFT names, scale folded into lora_B);
// - lora-diffsynth: "<path>.lora_A.default.weight" / ".lora_B.default.weight", alpha = rank
//   (DiffSynth-Studio diffsynth/trainers/utils.py saves the PEFT state dict as is; its
//   lora loader also reads names without ".default" and with a "diffusion_model." prefix);
// - lora-musubi: "lora_unet_<path, '.' → '_'>.lora_down.weight" / ".lora_up.weight" / ".alpha"
//   (musubi-tuner networks/lora_qwen_image.py, sd-scripts' LoRA module naming).
#include "models/qwen_image/qwen_export.h"

#include "checkpoint/export.h"
#include "models/export_sources.h"
#include "models/qwen_image/qwen_image_model.h"

namespace zs::checkpoint {

ExportResult export_qwen_image_checkpoint(const CheckpointInfo& info, const std::string& out, const ExportOptions& o) {
  TransformerExport spec;
  spec.family = "Qwen-Image";
  spec.loras = {{"lora-diffusers", "transformer.", "", false, "", true,
                 "diffusers/PEFT LoRA layout: QwenImagePipeline.load_lora_weights reads it (the scale alpha/rank is "
                 "folded into lora_B)"},
                {"lora-diffsynth", "", ".default", false, "", false,
                 "DiffSynth-Studio's LoRA layout (its Qwen-Image trainer's files; alpha/rank folded into lora_B, as "
                 "DiffSynth trains with alpha = rank)"},
                {"lora-musubi", "lora_unet_", "", true, "networks.lora_qwen_image", false,
                 "musubi-tuner's Qwen-Image LoRA layout (networks/lora_qwen_image.py: lora_unet_*, "
                 "lora_down/lora_up/alpha); ComfyUI reads it"}};
  spec.pipeline_of = [](const std::string& dir) { return models::QwenImageModel::pipeline_of(dir).path; };
  return export_transformer_checkpoint(info, out, o, spec);
}

}  // namespace zs::checkpoint
