#pragma once
// What an export writes, component by component, as tensors read one at a time when their turn
// comes: the checkpoint's trained tensors, or a base model's with a LoRA checkpoint's adapters
// merged in (W + alpha/rank · up·down). Shared by every family's export (no family owns it; SD's
// base model reader is sd/sd_base_model.h); not a public header.

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <nlohmann/json.hpp>

#include "checkpoint/sharded_state.h"
#include "models/lora.h"
#include "models/single_file_layout.h"

namespace torch::nn {
class Module;
}

namespace zs::checkpoint {

/// One tensor of an export, read when it is written.
struct ExportTensor {
  std::string name;
  std::vector<std::int64_t> shape;
  std::function<at::Tensor()> read;
};
using ExportTensors = std::vector<ExportTensor>;

/// A LoRA checkpoint's adapters of one component, by layer path (float32, CPU).
using ComponentAdapters = std::map<std::string, std::shared_ptr<models::LoraAdapter>>;
/// ... of every component ("unet", "text_encoder", "text_encoder_2").
using CheckpointAdapters = std::map<std::string, ComponentAdapters>;

struct CheckpointInfo;
struct ExportOptions;
/// What every family's export reads first of a checkpoint: its shards, which weights (`--ema`:
/// refused, naming the checkpoint, when the run kept none), the run's model folder, whether it holds
/// LoRA adapters, and the __metadata__ its files carry (format, producer, step, config hash, weights).
struct CheckpointExport {
  CheckpointExport(const CheckpointInfo& info, const ExportOptions& o);
  const std::string& path;
  const nlohmann::json& meta;  ///< the checkpoint's meta.json
  ShardReader shards;
  std::string kind;        ///< "weights" or "ema"
  std::string model_dir;   ///< <run>/model
  bool lora;
  bool merge;              ///< --merge
  std::map<std::string, std::string> metadata;
  /// For a LoRA format: the checkpoint's adapters. Throws zs::Error(config) naming the checkpoint
  /// when its run trained the full model; `full_formats` names what to export instead
  /// ("diffusers, single-file or safetensors").
  CheckpointAdapters lora_adapters(const std::string& full_formats) const;
  /// lora_adapters()'s check alone, for a family that reads the adapters its own way.
  void require_lora(const std::string& full_formats) const;
  /// For a full-weights format: the adapters to merge (none for a run that trained the full
  /// model). Throws zs::Error(config) naming the checkpoint for adapters without --merge
  /// (`lora_formats` names the formats for them: "lora-kohya or lora-diffusers") and for --merge
  /// without adapters.
  CheckpointAdapters merged_adapters(const std::string& lora_formats) const;
};

/// Whether a checkpoint's meta.json is a LoRA run's (training.method lora or text-encoder LoRA).
bool is_lora_checkpoint(const nlohmann::json& meta);

/// The adapters a checkpoint's shards hold ("<component>.<path>.lora_down.weight" and
/// ".lora_up.weight"), of `kind` ("weights" or "ema"), with the run's alpha from meta.json.
CheckpointAdapters read_checkpoint_adapters(const ShardReader& shards, const nlohmann::json& meta,
                                            const std::string& kind);

/// `base` with each adapter's update added to the weight of its layer ("<path>.weight"), in
/// float32. Throws zs::Error(checkpoint) naming an adapter whose layer the base lacks (`component`).
ExportTensors merged(ExportTensors base, const ComponentAdapters& adapters, const std::string& component);

struct ExportOptions;
/// Streams `tensors` into the safetensors file `path` one at a time, converted to the export's
/// dtype (float32 by default), counting `done` of `total` for the progress callback; returns the
/// file's bytes. Throws zs::Error(io) "export cancelled" when the options' callback asks.
std::int64_t stream_tensors(const ExportTensors& tensors, const std::string& path, const ExportOptions& o,
                            const std::map<std::string, std::string>& metadata, std::size_t& done, std::size_t total);

struct ExportResult;
/// Writes a LoRA file's tensors (fp16 unless the options say otherwise, as sd-scripts'
/// --save_precision) to `out` and says what it is in the result's note.
ExportResult write_lora_tensors(const ExportTensors& tensors, const std::string& out, const ExportOptions& o,
                                const std::map<std::string, std::string>& metadata, std::string note);

/// Adapters under PEFT's names: "<prefix><path>.lora_A<suffix>.weight" = down and
/// "<prefix><path>.lora_B<suffix>.weight" = up with alpha/rank folded in (readers of these files
/// apply scale 1: diffusers' load_lora_weights with prefix "transformer.", DiffSynth-Studio with
/// suffix ".default").
ExportTensors peft_lora_tensors(const ComponentAdapters& layers, const std::string& prefix, const std::string& suffix);

/// diffusers' lora_adapter_metadata for adapters written by peft_lora_tensors, one LoraConfig per
/// component ("transformer", "text_encoder" …): models::peft_lora_metadata of their layers.
std::map<std::string, std::string> peft_lora_header(const CheckpointAdapters& adapters);

/// Adapters under kohya's names: "<prefix><path, '.' → '_'>.lora_down.weight", ".lora_up.weight"
/// and ".alpha" (sd-scripts, musubi-tuner).
ExportTensors kohya_lora_tensors(const ComponentAdapters& layers, const std::string& prefix);

/// A transformer's tensors as the one safetensors file `out` (--format safetensors, or a
/// single-file layout's tensors); a trained text encoder the run has (`text_left_out`) is not in
/// it, and the result's notes say where to find it.
ExportResult export_tensors_file(const ExportTensors& tensors, const std::string& out, const ExportOptions& o,
                                 const std::map<std::string, std::string>& metadata, bool text_left_out);

/// A flow-matching transformer run's export as a diffusers folder `out` (new, or empty): the
/// pipeline `source`'s untouched components (or, for a tiny preset, its configs, word tokenizer and
/// scheduler from the run's `model_dir`), transformer/ with the run's config.json and `transformer`,
/// and text_encoder/model.safetensors with `text` where the run trained it (Flux, Qwen-Image).
ExportResult export_transformer_folder(const std::string& source, const std::string& model_dir, const std::string& out,
                                       const ExportTensors& transformer, const ExportTensors& text,
                                       const ExportOptions& o, const std::map<std::string, std::string>& metadata);

/// A LoRA layout a transformer family exports (its reader's names).
struct LoraLayout {
  std::string format;        ///< "lora-diffusers", "lora-musubi", …
  std::string prefix;        ///< before each layer's path ("transformer.", "lora_unet_", "")
  std::string suffix;        ///< PEFT: between lora_A/lora_B and ".weight" (DiffSynth's ".default")
  bool kohya = false;        ///< lora_down / lora_up / alpha under kohya's names (else PEFT's, scale folded in)
  std::string kohya_module;  ///< kohya: ss_network_module
  bool peft_header = false;  ///< diffusers' lora_adapter_metadata in the header
  std::string note;          ///< what the result says the file is
  /// A layout on other module names than the model's (fused projections, say): the file's tensors
  /// from the run's adapters; unset: `prefix` + each layer's path in PEFT's or kohya's names.
  std::function<ExportTensors(const ComponentAdapters&)> tensors;
};

/// --format single-file's tensors: each of `layout` (models/single_file_layout.h) assembled from
/// the export's `transformer` tensors (diffusers' names) as it is written. Throws
/// zs::Error(checkpoint) naming `model_dir` when a part is not among them.
ExportTensors single_file_tensors(std::vector<models::SingleFileTensor> layout, const ExportTensors& transformer,
                                  const std::string& model_dir);

/// A flow-matching transformer family's export (Qwen-Image, Z-Image): its name for messages, its
/// LoRA layouts, and the pipeline a run's model folder names ("" for a tiny preset).
struct TransformerExport {
  std::string family;
  std::vector<LoraLayout> loras;
  std::function<std::string(const std::string& model_dir)> pipeline_of;
  /// The base transformer under diffusers' names when the run's came from a single file (for
  /// --merge); unset or empty: the pipeline's transformer files.
  std::function<ExportTensors(const std::string& model_dir)> base_transformer;
  /// --format single-file: the transformer's tensors (diffusers' names) in the family's single-file
  /// layout, each assembled when written; unset: the family has none.
  std::function<ExportTensors(const std::string& model_dir, const ExportTensors& transformer)> single_file;
};

/// Exports `info` to `out` in `o.format`: safetensors (the transformer under diffusers' names),
/// diffusers (a folder: export_transformer_folder), single-file (where `spec` has one), or one of `spec.loras`; --merge merges a LoRA
/// checkpoint into the full-weight formats, over the base from the pipeline's files (or the run's
/// model folder for a preset). Streamed one tensor at a time. Throws zs::Error naming the checkpoint,
/// the output or the formats there are.
ExportResult export_transformer_checkpoint(const CheckpointInfo& info, const std::string& out, const ExportOptions& o,
                                           const TransformerExport& spec);

/// A diffusers pipeline folder's files into `root` for an export that writes some components
/// itself: every component but `skip` (the trained denoiser) copied, and of the components in
/// `own` (trained text encoders) only the configs, their weights being written by the export.
void copy_pipeline_components(const std::string& source, const std::string& root, const std::string& skip,
                              const std::vector<std::string>& own);

/// Every tensor of safetensors files under its own name, each read from its (shared, kept open) reader.
ExportTensors file_tensors(const std::vector<std::string>& files);

/// The parameters of `skeleton` (built on the meta device: only names and shapes are used) as export
/// tensors, each read through `read` when written, as a single-file layout maps them; a name `read`
/// leaves undefined throws zs::Error(checkpoint) naming `source`.
ExportTensors mapped_tensors(const torch::nn::Module& skeleton, std::function<at::Tensor(const std::string&)> read,
                             const std::string& source);

/// The checkpoint's parameters whose names start with `prefix`, named without it (adapters left out).
ExportTensors shard_tensors(const ShardReader& shards, const std::string& prefix, const std::string& kind);

}  // namespace zs::checkpoint
