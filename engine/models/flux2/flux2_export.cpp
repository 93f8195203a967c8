// FLUX.2's export (Flux2Family::export_checkpoint). The LoRA layouts, each as its reader defines it:
// - lora-diffusers: "transformer.<path>.lora_A.weight" / ".lora_B.weight" (PEFT names, scale folded
//   into lora_B), as Flux2Pipeline / Flux2KleinPipeline.save_lora_weights write them and their
//   load_lora_weights (Flux2LoraLoaderMixin, loaders/lora_pipeline.py) read them;
// The layouts ComfyUI loads (ai-toolkit's "diffusion_model." and kohya's "lora_unet_" on BFL's module
// names: double_blocks.N.img_attn.qkv fused, single_blocks.N.linear1 …) need BFL's single-file
// names, as --format single-file does; neither is written yet.
#include "models/flux2/flux2_export.h"

#include "models/export_sources.h"
#include "models/flux2/flux2_model.h"

namespace zs::checkpoint {

ExportResult export_flux2_checkpoint(const CheckpointInfo& info, const std::string& out, const ExportOptions& o) {
  TransformerExport spec;
  spec.family = "FLUX.2";
  spec.loras = {{"lora-diffusers", "transformer.", "", false, "", true,
                 "diffusers/PEFT LoRA layout: Flux2Pipeline.load_lora_weights and Flux2KleinPipeline's read it (the "
                 "scale alpha/rank is folded into lora_B)"}};
  spec.pipeline_of = [](const std::string& dir) { return models::Flux2Model::pipeline_of(dir).path; };
  return export_transformer_checkpoint(info, out, o, spec);
}

}  // namespace zs::checkpoint
