// FLUX.2's export (Flux2Family::export_checkpoint). The LoRA layouts, each as its reader defines it:
// - lora-diffusers: "transformer.<path>.lora_A.weight" / ".lora_B.weight" (PEFT names, scale folded
//   into lora_B), as Flux2Pipeline / Flux2KleinPipeline.save_lora_weights write them and their
//   load_lora_weights (Flux2LoraLoaderMixin, loaders/lora_pipeline.py) read them;
// And --format single-file: the transformer in BFL's layout, which ComfyUI loads (models/flux2/
// flux2_single_file.h); a run from such a file merges its adapters into the file's tensors. The LoRA
// layouts ComfyUI loads (ai-toolkit's "diffusion_model." and kohya's "lora_unet_" on BFL's module
// names, q/k/v fused) are not written yet.
#include "models/flux2/flux2_export.h"

#include <map>
#include <memory>

#include "core/error.h"
#include "core/meta_tensors.h"
#include "models/export_sources.h"
#include "models/flux2/flux2_model.h"
#include "models/flux2/flux2_single_file.h"
#include "models/flux2/flux2_transformer.h"

namespace zs::checkpoint {

ExportResult export_flux2_checkpoint(const CheckpointInfo& info, const std::string& out, const ExportOptions& o) {
  TransformerExport spec;
  spec.family = "FLUX.2";
  spec.loras = {{"lora-diffusers", "transformer.", "", false, "", true,
                 "diffusers/PEFT LoRA layout: Flux2Pipeline.load_lora_weights and Flux2KleinPipeline's read it (the "
                 "scale alpha/rank is folded into lora_B)"}};
  spec.pipeline_of = [](const std::string& dir) { return models::Flux2Model::pipeline_of(dir).path; };
  spec.base_transformer = [](const std::string& dir) -> ExportTensors {
    const std::string file = models::Flux2Model::pipeline_of(dir).files.transformer;
    if (file.empty()) return {};
    const models::Flux2File source(file);
    const auto c = std::make_shared<models::Flux2Config>(models::Flux2Config::from_file(dir + "/transformer/config.json"));
    const MetaTensorScope meta;
    return mapped_tensors(*models::Flux2Transformer2DModel(*c),
                          [source, c](const std::string& name) { return source.tensor(name, *c); }, source.path());
  };
  spec.single_file = [](const std::string& dir, const ExportTensors& transformer) {
    auto by_name = std::make_shared<std::map<std::string, ExportTensor>>();
    for (const auto& t : transformer) (*by_name)[t.name] = t;
    ExportTensors out;
    for (auto& t : models::flux2_file_layout(models::Flux2Config::from_file(dir + "/transformer/config.json"))) {
      for (const auto& part : t.parts)
        if (!by_name->contains(part)) throw Error(ErrorKind::checkpoint, dir + ": the export has no transformer tensor " + part);
      auto layout = std::make_shared<models::Flux2FileTensor>(std::move(t));
      out.push_back({layout->key, layout->shape, [layout, by_name] {
                       return models::assemble_flux2_file_tensor(*layout,
                                                                 [&](const std::string& n) { return by_name->at(n).read(); });
                     }});
    }
    return out;
  };
  return export_transformer_checkpoint(info, out, o, spec);
}

}  // namespace zs::checkpoint
