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

#include <filesystem>
#include <map>

#include <ATen/ATen.h>

#include "checkpoint/checkpoint.h"
#include "checkpoint/export.h"
#include "checkpoint/sharded_state.h"
#include "core/error.h"
#include "core/text.h"
#include "models/diffusers_folder.h"
#include "models/export_sources.h"
#include "models/qwen_image/qwen_image_model.h"

namespace zs::checkpoint {

namespace fs = std::filesystem;

namespace {

/// The transformer's base weights: the preset's in the run's model folder, or the pipeline's files.
ExportTensors base_transformer(const fs::path& model_dir, const std::string& source) {
  if (!source.empty()) return file_tensors(models::DiffusersFolder::open(source).weight_files("transformer"));
  const fs::path file = model_dir / "transformer" / "diffusion_pytorch_model.safetensors";
  if (!fs::exists(file))
    throw Error(ErrorKind::checkpoint, model_dir.string() + ": holds no base weights (transformer/" +
                                           file.filename().string() + "); runs keep them there when their checkpoints need a base");
  return file_tensors({file.string()});
}

ExportResult write_lora(const ComponentAdapters& layers, const std::string& format, const std::string& out,
                        const ExportOptions& o, std::map<std::string, std::string> metadata) {
  if (format == "lora-diffusers") {
    metadata.merge(peft_lora_header({{"transformer", layers}}));  // as save_lora_weights writes it
    return write_lora_tensors(peft_lora_tensors(layers, "transformer.", ""), out, o, metadata,
                              "diffusers/PEFT LoRA layout: QwenImagePipeline.load_lora_weights reads it (the scale "
                              "alpha/rank is folded into lora_B)");
  }
  if (format == "lora-diffsynth")
    return write_lora_tensors(peft_lora_tensors(layers, "", ".default"), out, o, metadata,
                              "DiffSynth-Studio's LoRA layout (its Qwen-Image trainer's files; alpha/rank folded into "
                              "lora_B, as DiffSynth trains with alpha = rank)");
  std::int64_t rank = 0;
  double alpha = 0;
  for (const auto& [path, a] : layers) {
    rank = std::max(rank, a->rank());
    alpha = a->alpha;
  }
  metadata["ss_network_module"] = "networks.lora_qwen_image";
  metadata["ss_network_dim"] = std::to_string(rank);
  metadata["ss_network_alpha"] = python_float(alpha);
  return write_lora_tensors(kohya_lora_tensors(layers, "lora_unet_"), out, o, metadata,
                            "musubi-tuner's Qwen-Image LoRA layout (networks/lora_qwen_image.py: lora_unet_*, "
                            "lora_down/lora_up/alpha); ComfyUI reads it");
}

}  // namespace

ExportResult export_qwen_image_checkpoint(const CheckpointInfo& info, const std::string& out, const ExportOptions& o) {
  const CheckpointExport e(info, o);
  const fs::path model_dir(e.model_dir);
  const std::map<std::string, std::string>& metadata = e.metadata;
  const bool lora_format = o.format == "lora-diffusers" || o.format == "lora-diffsynth" || o.format == "lora-musubi";
  if (lora_format) {
    const CheckpointAdapters adapters = e.lora_adapters("diffusers or safetensors");
    if (!adapters.contains("transformer"))
      throw Error(ErrorKind::checkpoint, e.path + ": holds no transformer adapters");
    return write_lora(adapters.at("transformer"), o.format, out, o, metadata);
  }
  if (o.format != "safetensors" && o.format != "diffusers")
    throw Error(ErrorKind::config, "export format '" + o.format + "' does not exist for Qwen-Image (diffusers, "
                                                                  "safetensors, lora-diffusers, lora-diffsynth, lora-musubi)");
  const CheckpointAdapters adapters = e.merged_adapters("lora-diffsynth, lora-diffusers or lora-musubi");
  const std::string source = models::QwenImageModel::pipeline_of(model_dir.string());
  const ExportTensors transformer = adapters.contains("transformer")
                                        ? merged(base_transformer(model_dir, source), adapters.at("transformer"), "transformer")
                                        : shard_tensors(e.shards, "transformer.", e.kind);
  const ExportTensors text = shard_tensors(e.shards, "text_encoder.", e.kind);  // the tiny preset's, trained in full
  if (o.format == "safetensors") return export_tensors_file(transformer, out, o, metadata, !text.empty());
  return export_transformer_folder(source, model_dir.string(), out, transformer, text, o, metadata);
}

}  // namespace zs::checkpoint
