#pragma once
// The base weights an SD run's export merges LoRA adapters into (models/export_sources.h).

#include <string>

#include "models/export_sources.h"

namespace zs::checkpoint {

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
