#include "models/sd/model_source.h"

#include <algorithm>
#include <filesystem>

#include "core/error.h"
#include "models/sd/diffusers_pipeline.h"
#include "models/sd/single_file_model.h"

namespace zs::models {

namespace fs = std::filesystem;

UNet2DConditionModel ModelSource::load_unet(const UnitBuilt& on_unit) const {
  return load_units<UNet2DConditionModel>(unet_config(), unet_weights(), root() + " (UNet)", on_unit);
}

bool is_single_file(const std::string& path) { return fs::is_regular_file(path); }

std::unique_ptr<ModelSource> open_model_source(const std::string& path, const std::string& config_path) {
  if (!fs::exists(path))
    throw Error(ErrorKind::config, "model.path: " + path + " does not exist (a diffusers folder or a .safetensors single file)");
  if (is_single_file(path)) return std::make_unique<SingleFileModel>(SingleFileModel::open(path, config_path));
  return std::make_unique<DiffusersPipeline>(DiffusersPipeline::open(path));
}

}  // namespace zs::models
