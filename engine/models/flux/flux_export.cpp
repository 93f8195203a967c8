// Flux.1's export (FluxFamily::export_checkpoint): a checkpoint's transformer as one safetensors
// file under diffusers' names, a diffusers folder (the run's pipeline with the trained weights in
// place of its own), or a LoRA checkpoint's adapters as a diffusers/PEFT file; with --merge, a LoRA
// checkpoint's adapters merged into the base in the full-weight formats. Streamed one tensor at a
// time (checkpoint/export.h). Black Forest Labs' single-file layout and kohya's Flux LoRA layout
// are not written yet and say so.
#include "models/flux/flux_export.h"

#include <filesystem>
#include <map>
#include <set>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include "checkpoint/checkpoint.h"
#include "checkpoint/export.h"
#include "checkpoint/sharded_state.h"
#include "core/error.h"
#include "core/text.h"
#include "io/json_file.h"
#include "io/safetensors.h"
#include "models/lora.h"
#include "models/sd/diffusers_pipeline.h"
#include "models/sd/sd_export_sources.h"

namespace zs::checkpoint {

namespace fs = std::filesystem;

namespace {

void copy_tree(const fs::path& from, const fs::path& to) {
  fs::create_directories(to);
  fs::copy(from, to, fs::copy_options::recursive | fs::copy_options::overwrite_existing);
}

/// The pipeline folder a run's model folder names (pipeline.json), or "" for the flux-tiny preset.
std::string pipeline_of(const fs::path& model_dir) {
  const fs::path ref = model_dir / "pipeline.json";
  if (!fs::exists(ref)) return "";
  const std::string path = io::read_json_file(ref.string(), "pipeline reference").value("path", std::string());
  if (!fs::exists(fs::path(path) / "model_index.json"))
    throw Error(ErrorKind::checkpoint, ref.string() + ": the run was trained from " + path +
                                           ", which is gone; put the pipeline folder back there to export");
  return path;
}

/// A component's base weights: the preset's in the run's model folder, or the pipeline's files.
ExportTensors base_tensors(const fs::path& model_dir, const std::string& source, const std::string& component) {
  if (source.empty()) {
    const fs::path file = model_dir / component /
                          (component == "transformer" ? "diffusion_pytorch_model.safetensors" : "model.safetensors");
    if (!fs::exists(file))
      throw Error(ErrorKind::checkpoint, model_dir.string() + ": holds no base weights (" + file.filename().string() +
                                             " of " + component + "); runs keep them there when their checkpoints need a base");
    return file_tensors({file.string()});
  }
  return file_tensors(models::DiffusersPipeline::open(source).weight_files(component));
}

/// The adapters as diffusers' PEFT names ("<component>.<path>.lora_A.weight" = down,
/// "lora_B.weight" = up with the scale alpha/rank folded in: diffusers reads such files at scale 1).
ExportResult write_peft_file(const CheckpointAdapters& adapters, const std::string& out, const ExportOptions& o,
                             const std::map<std::string, std::string>& metadata) {
  ExportTensors tensors;
  for (const auto& [component, layers] : adapters)
    for (const auto& [path, a] : layers) {
      const std::string stem = component + "." + path;
      tensors.push_back({stem + ".lora_A.weight", a->down.sizes().vec(), [a] { return a->down; }});
      tensors.push_back({stem + ".lora_B.weight", a->up.sizes().vec(), [a] { return a->up * a->scale(); }});
    }
  ExportOptions half = o;
  if (!half.dtype) half.dtype = at::kHalf;  // LoRA files in fp16, as for SD (sd-scripts' --save_precision)
  if (fs::path(out).has_parent_path()) fs::create_directories(fs::path(out).parent_path());
  ExportResult r;
  std::size_t done = 0;
  r.bytes = stream_tensors(tensors, out, half, metadata, done, tensors.size());
  r.tensors = done;
  r.files.push_back(out);
  r.notes.push_back("diffusers/PEFT LoRA layout: FluxPipeline.load_lora_weights reads it (the scale alpha/rank is "
                    "folded into lora_B)");
  return r;
}

}  // namespace

ExportResult export_flux_checkpoint(const CheckpointInfo& info, const std::string& out, const ExportOptions& o) {
  const std::string& checkpoint = info.path;
  const ShardReader shards(checkpoint, info.meta["sharding"]);
  const std::string kind = o.ema ? "ema" : "weights";
  if (o.ema && !shards.has("ema"))
    throw Error(ErrorKind::checkpoint, checkpoint + ": has no EMA weights (the run had ema.enabled: false); drop --ema");
  const fs::path model_dir = fs::path(without_trailing_slash(checkpoint)).parent_path().parent_path() / "model";
  const bool lora = is_lora_checkpoint(info.meta);
  const std::map<std::string, std::string> metadata = {{"format", "pt"},
                                                      {"producer", "zerostudio"},
                                                      {"step", std::to_string(info.step)},
                                                      {"config_hash", info.meta.value("config_hash", "")},
                                                      {"weights", kind + (lora && o.merge ? "+merged lora" : "")}};
  if (o.format == "single-file" || o.format == "lora-kohya")
    throw Error(ErrorKind::config, "export format '" + o.format + "' is not written for Flux.1 yet (Black Forest Labs' "
                                   "layout: issue 35 continues); export --format diffusers or safetensors, and "
                                   "lora-diffusers for LoRA checkpoints (diffusers and ComfyUI read it)");
  if (o.format == "lora-diffusers") {
    if (!lora)
      throw Error(ErrorKind::config, checkpoint + ": holds no LoRA adapters (the run trained the full model); export "
                                                  "--format diffusers or safetensors");
    return write_peft_file(read_checkpoint_adapters(shards, info.meta, kind), out, o, metadata);
  }
  if (o.format != "safetensors" && o.format != "diffusers")
    throw Error(ErrorKind::config, "export format '" + o.format + "' does not exist for Flux.1 (diffusers, safetensors, "
                                                                  "lora-diffusers)");
  if (lora && !o.merge)
    throw Error(ErrorKind::config, checkpoint + ": holds LoRA adapters, not full weights; export --format lora-diffusers "
                                                "for the adapters, or add --merge for full weights with them merged");
  if (!lora && o.merge) throw Error(ErrorKind::config, checkpoint + ": holds no LoRA adapters to merge; drop --merge");

  const std::string source = pipeline_of(model_dir);
  const CheckpointAdapters adapters = lora ? read_checkpoint_adapters(shards, info.meta, kind) : CheckpointAdapters{};
  // The transformer: trained in full (the shards), or the base with its adapters merged.
  const ExportTensors transformer =
      adapters.contains("transformer")
          ? merged(base_tensors(model_dir, source, "transformer"), adapters.at("transformer"), "transformer")
          : shard_tensors(shards, "transformer.", kind);
  // CLIP's text encoder where the run trained it (the tiny preset's in full; LoRA merged into CLIP-L).
  ExportTensors text = shard_tensors(shards, "text_encoder.", kind);
  if (text.empty() && adapters.contains("text_encoder"))
    text = merged(base_tensors(model_dir, source, "text_encoder"), adapters.at("text_encoder"), "text_encoder");

  ExportResult r;
  std::size_t done = 0;
  const std::size_t total = transformer.size() + (o.format == "diffusers" ? text.size() : 0);
  if (o.format == "safetensors") {
    if (fs::path(out).has_parent_path()) fs::create_directories(fs::path(out).parent_path());
    r.bytes += stream_tensors(transformer, out, o, metadata, done, total);
    r.files.push_back(out);
    if (!text.empty()) r.notes.push_back("the trained text encoder is not in this file: export --format diffusers for it");
    r.tensors = done;
    return r;
  }
  std::error_code ec;
  if (fs::exists(out) && !fs::is_empty(out, ec))
    throw Error(ErrorKind::io, out + ": exists and is not empty; choose a new folder for the export");
  const fs::path root(out);
  if (!source.empty()) {
    // Every untouched component (VAE, T5, tokenizers, scheduler, model_index.json) from the pipeline.
    copy_pipeline_components(source, out, "transformer",
                             text.empty() ? std::vector<std::string>{} : std::vector<std::string>{"text_encoder"});
  } else {
    // The flux-tiny preset: its configs, word tokenizer and scheduler from the run's model folder.
    for (const char* sub : {"text_encoder", "tokenizer", "scheduler"})
      if (fs::exists(model_dir / sub)) copy_tree(model_dir / sub, root / sub);
    if (fs::exists(root / "text_encoder" / "model.safetensors")) fs::remove(root / "text_encoder" / "model.safetensors");
  }
  fs::create_directories(root / "transformer");
  fs::copy_file(model_dir / "transformer" / "config.json", root / "transformer" / "config.json",
                fs::copy_options::overwrite_existing, ec);
  if (ec) throw Error(ErrorKind::io, (model_dir / "transformer" / "config.json").string() + ": cannot copy: " + ec.message());
  const std::string transformer_file = (root / "transformer" / "diffusion_pytorch_model.safetensors").string();
  r.bytes += stream_tensors(transformer, transformer_file, o, metadata, done, total);
  r.files.push_back(transformer_file);
  if (!text.empty()) {
    fs::create_directories(root / "text_encoder");
    const std::string file = (root / "text_encoder" / "model.safetensors").string();
    r.bytes += stream_tensors(text, file, o, metadata, done, total);
    r.files.push_back(file);
  }
  r.tensors = done;
  return r;
}

}  // namespace zs::checkpoint
