#pragma once
// A Stable Diffusion pipeline folder (models/diffusers_folder.h says which components it has and
// where their weights are) loading each component as ZeroStudio's module.

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "diffusion/noise_schedule.h"
#include "models/diffusers_folder.h"
#include "models/sd/model_source.h"
#include "models/sd/unet_2d_condition.h"

namespace zs::models {

class DiffusersPipeline : public DiffusersFolder, public ModelSource {
 public:
  /// Reads `root`/model_index.json (DiffusersFolder::open).
  static DiffusersPipeline open(const std::string& root) { return DiffusersPipeline(DiffusersFolder::open(root)); }
  explicit DiffusersPipeline(DiffusersFolder folder) : DiffusersFolder(std::move(folder)) {}

  const std::string& root() const override { return DiffusersFolder::root(); }
  bool has(const std::string& component) const override { return DiffusersFolder::has(component); }

  UNetConfig unet_config() const override;
  TensorLookup unet_weights() const override;
  AutoencoderKL load_vae() const override { return DiffusersFolder::load_vae(); }
  ClipTextModel load_text_encoder(const std::string& component = "text_encoder") const override {
    return DiffusersFolder::load_text_encoder(component);
  }
  ClipTokenizer load_tokenizer(const std::string& component = "tokenizer") const override {
    return DiffusersFolder::load_tokenizer(component);
  }
  diffusion::ScheduleConfig load_scheduler() const override;
};

}  // namespace zs::models
