// Flux.1's export (FluxFamily::export_checkpoint): a checkpoint's transformer as one safetensors
// file under diffusers' names, a diffusers folder (the run's pipeline with the trained weights in
// place of its own), or a LoRA checkpoint's adapters as a diffusers/PEFT file; with --merge, a LoRA
// checkpoint's adapters merged into the base in the full-weight formats. Streamed one tensor at a
// time (checkpoint/export.h); or the transformer in Black Forest Labs' single-file layout
// (flux1-dev.safetensors' names, fused q/k/v), as ComfyUI loads it; or the adapters in kohya's
// sd-scripts Flux layout (lora_unet_* on BFL's names).
#include "models/flux/flux_export.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <memory>
#include <set>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include "checkpoint/checkpoint.h"
#include "checkpoint/export.h"
#include "checkpoint/sharded_state.h"
#include "core/error.h"
#include "core/text.h"
#include "core/meta_tensors.h"
#include "io/json_file.h"
#include "io/safetensors.h"
#include "models/diffusers_folder.h"
#include "models/export_sources.h"
#include "models/flux/flux_model.h"
#include "models/flux/flux_single_file.h"
#include "models/flux/flux_transformer.h"
#include "models/lora.h"

namespace zs::checkpoint {

namespace fs = std::filesystem;

namespace {

/// A component's base weights: the preset's in the run's model folder, the BFL single file the
/// transformer came from (mapped onto diffusers' names as read), or the pipeline's files.
ExportTensors base_tensors(const fs::path& model_dir, const models::FluxModel::PipelineRef& ref,
                           const std::string& component) {
  const std::string& source = ref.path;
  if (component == "transformer" && !ref.transformer_file.empty()) {
    const models::BflFile file(ref.transformer_file);
    const auto c = std::make_shared<models::FluxConfig>(
        models::FluxConfig::from_file((model_dir / "transformer" / "config.json").string()));
    const MetaTensorScope meta;
    return mapped_tensors(*models::FluxTransformer2DModel(*c),
                          [file, c](const std::string& name) { return file.tensor(name, *c); }, file.path());
  }
  if (component == "text_encoder" && !ref.companions.text_encoder.empty())
    return file_tensors({ref.companions.text_encoder});
  if (source.empty()) {
    const fs::path file = model_dir / component /
                          (component == "transformer" ? "diffusion_pytorch_model.safetensors" : "model.safetensors");
    if (!fs::exists(file))
      throw Error(ErrorKind::checkpoint, model_dir.string() + ": holds no base weights (" + file.filename().string() +
                                             " of " + component + "); runs keep them there when their checkpoints need a base");
    return file_tensors({file.string()});
  }
  return file_tensors(models::DiffusersFolder::open(source).weight_files(component));
}

/// The adapters as diffusers' PEFT names ("<component>.<path>.lora_A.weight" = down,
/// "lora_B.weight" = up with the scale alpha/rank folded in: diffusers reads such files at scale 1).
ExportResult write_peft_file(const CheckpointAdapters& adapters, const std::string& out, const ExportOptions& o,
                             const std::map<std::string, std::string>& metadata) {
  ExportTensors tensors;
  for (const auto& [component, layers] : adapters) {
    ExportTensors part = peft_lora_tensors(layers, component + ".", "");
    tensors.insert(tensors.end(), part.begin(), part.end());
  }
  std::map<std::string, std::string> header = metadata;
  header.merge(peft_lora_header(adapters));  // as save_lora_weights writes it
  return write_lora_tensors(tensors, out, o, header,
                            "diffusers/PEFT LoRA layout: FluxPipeline.load_lora_weights reads it (the scale "
                            "alpha/rank is folded into lora_B)");
}


/// The adapters in kohya's sd-scripts layout for Flux (networks/lora_flux.py): "lora_unet_" + the
/// BFL module path with '_' for '.', "lora_te1_" + CLIP-L's path; lora_down / lora_up / alpha.
/// Where BFL fuses layers (a double block's qkv, a single block's linear1), the adapters of the
/// fused parts become one of rank Σr: lora_down their downs stacked, lora_up block-diagonal at each
/// part's rows, alpha scaled so alpha/rank is each part's (exact; diffusers' kohya converter
/// splits it back into the same products).
ExportResult write_kohya_file(const CheckpointAdapters& adapters, const fs::path& model_dir, const std::string& out,
                              const ExportOptions& o, std::map<std::string, std::string> metadata) {
  ExportTensors tensors;
  std::int64_t rank = 0;
  double alpha = 0;
  auto add = [&](const std::string& stem, at::Tensor down, at::Tensor up, double a) {
    tensors.push_back({stem + ".lora_down.weight", down.sizes().vec(), [down] { return down; }});
    tensors.push_back({stem + ".lora_up.weight", up.sizes().vec(), [up] { return up; }});
    const at::Tensor alpha_t = at::scalar_tensor(a, at::kFloat);
    tensors.push_back({stem + ".alpha", {}, [alpha_t] { return alpha_t; }});
  };
  auto underscored = [](std::string path) {
    std::replace(path.begin(), path.end(), '.', '_');
    return path;
  };
  if (adapters.contains("transformer")) {
    const ComponentAdapters& layers = adapters.at("transformer");
    const models::FluxConfig c = models::FluxConfig::from_file((model_dir / "transformer" / "config.json").string());
    std::size_t placed = 0;
    for (const auto& t : models::bfl_flux_layout(c)) {
      if (!t.key.ends_with(".weight")) continue;
      std::vector<std::pair<const models::BflTensor::Part*, std::shared_ptr<models::LoraAdapter>>> adapted;
      for (const auto& part : t.parts) {
        const std::string path = part.name.substr(0, part.name.size() - 7);  // without ".weight"
        if (const auto it = layers.find(path); it != layers.end()) adapted.emplace_back(&part, it->second);
      }
      if (adapted.empty()) continue;
      placed += adapted.size();
      const std::string stem = "lora_unet_" + underscored(t.key.substr(0, t.key.size() - 7));
      const double scale = adapted.front().second->scale();
      std::int64_t r = 0;
      for (const auto& [part, a] : adapted) {
        if (std::abs(a->scale() - scale) > 1e-12 * scale)
          throw Error(ErrorKind::checkpoint, out + ": the adapters fused into " + t.key + " differ in alpha/rank");
        r += a->rank();
      }
      if (adapted.size() == 1 && t.parts.size() == 1) {
        add(stem, adapted[0].second->down, adapted[0].second->up, adapted[0].second->alpha);
      } else {
        std::vector<at::Tensor> downs;
        at::Tensor up = at::zeros({t.shape[0], r}, at::kFloat);
        std::int64_t col = 0;
        for (const auto& [part, a] : adapted) {
          downs.push_back(a->down.to(at::kFloat));
          up.narrow(1, col, a->rank()).index_copy_(0, part->rows, a->up.to(at::kFloat));
          col += a->rank();
        }
        add(stem, at::cat(downs, 0), up, scale * static_cast<double>(r));
      }
      rank = std::max(rank, adapted.front().second->rank());
      alpha = adapted.front().second->alpha;
    }
    if (placed != layers.size())
      throw Error(ErrorKind::checkpoint, out + ": " + std::to_string(layers.size() - placed) +
                                             " transformer adapters have no place in Black Forest Labs' layout");
  }
  if (adapters.contains("text_encoder")) {
    const ExportTensors text = kohya_lora_tensors(adapters.at("text_encoder"), "lora_te1_");
    tensors.insert(tensors.end(), text.begin(), text.end());
    for (const auto& [path, a] : adapters.at("text_encoder")) {
      rank = std::max(rank, a->rank());
      alpha = a->alpha;
    }
  }
  metadata["ss_network_module"] = "networks.lora_flux";
  metadata["ss_network_dim"] = std::to_string(rank);
  metadata["ss_network_alpha"] = python_float(alpha);
  metadata["ss_base_model_version"] = "flux1";
  return write_lora_tensors(tensors, out, o, metadata,
                            "kohya's Flux LoRA layout (sd-scripts networks/lora_flux.py): ComfyUI and diffusers' "
                            "load_lora_weights read it; fused qkv/linear1 adapters carry the parts' ranks together");
}

}  // namespace

ExportResult export_flux_checkpoint(const CheckpointInfo& info, const std::string& out, const ExportOptions& o) {
  const CheckpointExport e(info, o);
  const std::string& checkpoint = e.path;
  const fs::path model_dir(e.model_dir);
  const std::map<std::string, std::string>& metadata = e.metadata;
  if (o.format == "lora-diffusers" || o.format == "lora-kohya") {
    const CheckpointAdapters adapters = e.lora_adapters("diffusers, single-file or safetensors");
    return o.format == "lora-kohya" ? write_kohya_file(adapters, model_dir, out, o, metadata)
                                    : write_peft_file(adapters, out, o, metadata);
  }
  if (o.format != "safetensors" && o.format != "diffusers" && o.format != "single-file")
    throw Error(ErrorKind::config, "export format '" + o.format + "' does not exist for Flux.1 (diffusers, single-file, "
                                                                  "safetensors, lora-kohya, lora-diffusers)");
  const CheckpointAdapters adapters = e.merged_adapters("lora-diffusers");
  const models::FluxModel::PipelineRef ref = models::FluxModel::pipeline_of(model_dir.string());
  const std::string& source = ref.path;
  // The transformer: trained in full (the shards), or the base with its adapters merged.
  const ExportTensors transformer =
      adapters.contains("transformer")
          ? merged(base_tensors(model_dir, ref, "transformer"), adapters.at("transformer"), "transformer")
          : shard_tensors(e.shards, "transformer.", e.kind);
  // CLIP's text encoder where the run trained it (the tiny preset's in full; LoRA merged into CLIP-L).
  ExportTensors text = shard_tensors(e.shards, "text_encoder.", e.kind);
  if (text.empty() && adapters.contains("text_encoder")) {
    // CLIP-L's file may lack the "text_model." level (transformers 5 writes it so): the adapters
    // follow the file's names.
    ExportTensors base = base_tensors(model_dir, ref, "text_encoder");
    const bool flat = std::none_of(base.begin(), base.end(), [](const ExportTensor& t) { return t.name.starts_with("text_model."); });
    ComponentAdapters layers;
    for (const auto& [path, a] : adapters.at("text_encoder"))
      layers[flat && path.starts_with("text_model.") ? path.substr(11) : path] = a;
    text = merged(std::move(base), layers, "text_encoder");
  }

  if (o.format == "single-file") {
    // Black Forest Labs' flux1-*.safetensors layout (the transformer alone, fused qkv and linear1),
    // each BFL tensor assembled from its diffusers tensors as it is written.
    std::map<std::string, const ExportTensor*> by_name;
    for (const auto& t : transformer) by_name[t.name] = &t;
    const models::FluxConfig c = models::FluxConfig::from_file((model_dir / "transformer" / "config.json").string());
    ExportTensors bfl;
    for (auto& t : models::bfl_flux_layout(c)) {
      for (const auto& part : t.parts)
        if (!by_name.count(part.name))
          throw Error(ErrorKind::checkpoint, checkpoint + ": has no transformer tensor " + part.name);
      auto layout = std::make_shared<models::BflTensor>(std::move(t));
      bfl.push_back({layout->key, layout->shape, [layout, &by_name] {
                       return models::assemble_bfl_tensor(*layout, [&](const std::string& n) { return by_name.at(n)->read(); });
                     }});
    }
    return export_tensors_file(bfl, out, o, metadata, !text.empty());
  }
  if (o.format == "safetensors") return export_tensors_file(transformer, out, o, metadata, !text.empty());
  return export_transformer_folder(source, model_dir.string(), out, transformer, text, o, metadata);
}

}  // namespace zs::checkpoint
