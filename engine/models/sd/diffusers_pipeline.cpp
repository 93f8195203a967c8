#include "models/sd/diffusers_pipeline.h"

#include <filesystem>
#include <memory>

#include "models/weights.h"

namespace zs::models {

namespace fs = std::filesystem;

UNetConfig DiffusersPipeline::unet_config() const {
  return UNetConfig::from_file((fs::path(dir("unet")) / "config.json").string());
}

TensorLookup DiffusersPipeline::unet_weights() const {
  const auto readers = std::make_shared<const WeightFiles>(weight_files("unet"));
  return [readers](const std::string& name) { return readers->find(name); };
}

diffusion::ScheduleConfig DiffusersPipeline::load_scheduler() const {
  return diffusion::ScheduleConfig::from_file((fs::path(dir("scheduler")) / "scheduler_config.json").string());
}

}  // namespace zs::models
