#pragma once
// What an export writes, component by component, as tensors read one at a time when their turn
// comes: the checkpoint's trained tensors, or a base model's with a LoRA checkpoint's adapters
// merged in (W + alpha/rank · up·down). Used by export.cpp; not a public header.

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <nlohmann/json.hpp>

#include "models/lora.h"

namespace zs::checkpoint {

class ShardReader;

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

/// Whether a checkpoint's meta.json is a LoRA run's (training.method lora or text-encoder LoRA).
bool is_lora_checkpoint(const nlohmann::json& meta);

/// The adapters a checkpoint's shards hold ("<component>.<path>.lora_down.weight" and
/// ".lora_up.weight"), of `kind` ("weights" or "ema"), with the run's alpha from meta.json.
CheckpointAdapters read_checkpoint_adapters(const ShardReader& shards, const nlohmann::json& meta,
                                            const std::string& kind);

/// Every tensor of safetensors files under its own name, each read from its (shared, kept open) reader.
ExportTensors file_tensors(const std::vector<std::string>& files);

/// The checkpoint's parameters whose names start with `prefix`, named without it (adapters left out).
ExportTensors shard_tensors(const ShardReader& shards, const std::string& prefix, const std::string& kind);

/// The base weights of a run's model (its `model/` folder): a preset's own files there, or the
/// diffusers folder or single file it was trained from.
class BaseModel {
 public:
  /// Throws zs::Error(checkpoint) naming the folder when the base's weights are not there.
  explicit BaseModel(const std::string& model_dir);
  /// The UNet under diffusers names with `adapters` merged in.
  ExportTensors unet(const ComponentAdapters& adapters) const;
  /// A text encoder under transformers names with `adapters` merged in; empty when the base has
  /// no such component. Single files: the encoder is loaded whole (its names come from the module).
  ExportTensors text_encoder(const std::string& component, const ComponentAdapters& adapters) const;
  /// Whether the base is a preset model (its weights in the run's model folder).
  bool preset() const { return source_.empty(); }

 private:
  std::string model_dir_, source_, config_path_;
};

}  // namespace zs::checkpoint
