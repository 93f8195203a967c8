// FLUX.2's export (Flux2Family::export_checkpoint). The LoRA layouts, each as its reader defines it:
// - lora-diffusers: "transformer.<path>.lora_A.weight" / ".lora_B.weight" (PEFT names, scale folded
//   into lora_B), as Flux2Pipeline / Flux2KleinPipeline.save_lora_weights write them and their
//   load_lora_weights (Flux2LoraLoaderMixin, loaders/lora_pipeline.py) read them;
// - lora-aitoolkit: "diffusion_model.<BFL's module name>.lora_A.weight" / ".lora_B.weight", no alpha
//   (ai-toolkit's FLUX.2 LoRAs, which ComfyUI loads and diffusers' lora_conversion_utils.py
//   _convert_non_diffusers_flux2_lora_to_diffusers reads): the modules of BFL's single file, so q, k
//   and v share one fused qkv module — its down is the three downs stacked, its up the three ups
//   block-diagonal (each third of the output sees only its own down), and every module is padded
//   with zeros to the same rank (the readers give each module alpha = rank, scale 1, with the
//   scale folded into up as PEFT's).
// And --format single-file: the transformer in BFL's layout, which ComfyUI loads (models/flux2/
// flux2_single_file.h); a run from such a file merges its adapters into the file's tensors.
#include "models/flux2/flux2_export.h"

#include <algorithm>
#include <map>
#include <memory>

#include "core/error.h"
#include "core/meta_tensors.h"
#include "models/export_sources.h"
#include "models/flux2/flux2_model.h"
#include "models/flux2/flux2_single_file.h"
#include "models/flux2/flux2_transformer.h"
#include "models/lora.h"

namespace zs::checkpoint {

namespace {

/// The adapters on BFL's module names (lora-aitoolkit): fused q/k/v block-diagonal, ranks padded alike.
ExportTensors bfl_lora_tensors(const ComponentAdapters& layers) {
  struct Module {
    std::vector<std::shared_ptr<models::LoraAdapter>> parts;  ///< [3] for a fused qkv, else [1]
    bool swapped = false;
  };
  std::map<std::string, Module> modules;
  for (const auto& [path, a] : layers) {
    const models::SingleFilePlace place = models::flux2_file_place(path + ".weight");
    const std::string key = place.key.substr(0, place.key.size() - std::string(".weight").size());
    Module& m = modules[key];
    m.swapped = place.swapped;
    if (place.third < 0) {
      m.parts = {a};
      continue;
    }
    m.parts.resize(3);
    m.parts[static_cast<std::size_t>(place.third)] = a;
  }
  // Every adapter of a run has lora.rank: a fused module holds three times it, the others once.
  const auto first_of = [](const Module& m) {
    return *std::find_if(m.parts.begin(), m.parts.end(), [](const auto& a) { return a != nullptr; });
  };
  std::int64_t rank = 0;
  for (const auto& [key, m] : modules)
    rank = std::max(rank, static_cast<std::int64_t>(m.parts.size()) * first_of(m)->rank());
  ExportTensors out;
  for (const auto& [key, m] : modules) {
    auto module = std::make_shared<Module>(m);
    const auto first = first_of(m);
    const std::int64_t in = first->down.size(1), each = first->up.size(0), r = first->rank();
    const std::int64_t parts = static_cast<std::int64_t>(m.parts.size());
    // down [rank, in]: part i's down in rows [i·r, (i+1)·r); zeros for a part without adapters and the padding.
    out.push_back({"diffusion_model." + key + ".lora_A.weight", {rank, in}, [module, rank, in, r] {
                     at::Tensor down = at::zeros({rank, in}, at::kFloat);
                     for (std::size_t i = 0; i < module->parts.size(); ++i)
                       if (const auto& a = module->parts[i]) down.narrow(0, static_cast<std::int64_t>(i) * r, r).copy_(a->down.to(at::kFloat));
                     return down;
                   }});
    // up [parts·out, rank]: part i's scale·up in its rows and in columns [i·r, (i+1)·r).
    out.push_back({"diffusion_model." + key + ".lora_B.weight", {parts * each, rank}, [module, rank, each, r] {
                     const auto n = static_cast<std::int64_t>(module->parts.size());
                     at::Tensor up = at::zeros({n * each, rank}, at::kFloat);
                     for (std::int64_t i = 0; i < n; ++i)
                       if (const auto& a = module->parts[static_cast<std::size_t>(i)])
                         up.narrow(0, i * each, each).narrow(1, i * r, r).copy_(a->up.to(at::kFloat) * a->scale());
                     if (module->swapped) up = at::cat({up.narrow(0, each / 2, each / 2), up.narrow(0, 0, each / 2)}, 0);
                     return up;
                   }});
  }
  return out;
}

}  // namespace

ExportResult export_flux2_checkpoint(const CheckpointInfo& info, const std::string& out, const ExportOptions& o) {
  TransformerExport spec;
  spec.family = "FLUX.2";
  spec.loras = {{"lora-diffusers", "transformer.", "", false, "", true,
                 "diffusers/PEFT LoRA layout: Flux2Pipeline.load_lora_weights and Flux2KleinPipeline's read it (the "
                 "scale alpha/rank is folded into lora_B)"},
                {"lora-aitoolkit", "diffusion_model.", "", false, "", false,
                 "ai-toolkit's FLUX.2 LoRA layout on BFL's module names (diffusion_model.*.lora_A/lora_B, q/k/v fused, "
                 "alpha/rank folded into lora_B); ComfyUI and diffusers read it",
                 bfl_lora_tensors}};
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
    const auto config = models::Flux2Config::from_file(dir + "/transformer/config.json");
    return single_file_tensors(models::flux2_file_layout(config), transformer, dir);
  };
  return export_transformer_checkpoint(info, out, o, spec);
}

}  // namespace zs::checkpoint
