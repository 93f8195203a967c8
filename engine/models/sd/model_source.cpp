#include "models/sd/model_source.h"

#include <algorithm>
#include <filesystem>
#include <set>

#include "core/error.h"
#include "models/sd/diffusers_pipeline.h"
#include "models/sd/single_file_model.h"

namespace zs::models {

namespace fs = std::filesystem;

UNet2DConditionModel ModelSource::load_unet(const UnitBuilt& on_unit) const {
  const TensorLookup lookup = unet_weights();
  std::set<std::string> handed;  // full names of the parameters given to on_unit
  UnitBuilt load_then_hand;
  if (on_unit)
    load_then_hand = [&](const std::string& unit, const std::string& prefix, torch::nn::Module& module) {
      load_weights(module, [&](const std::string& n) { return lookup(prefix + "." + n); }, root() + " (UNet " + unit + ")");
      for (const auto& item : module.named_parameters(true)) handed.insert(prefix + "." + item.key());
      for (const auto& item : module.named_buffers(true)) handed.insert(prefix + "." + item.key());
      on_unit(unit, prefix, module);
    };
  UNet2DConditionModel unet(unet_config(), load_then_hand);
  load_weights(*unet, lookup, root() + " (UNet)", [&](const std::string& name) { return handed.count(name) > 0; });
  return unet;
}

bool is_single_file(const std::string& path) { return fs::is_regular_file(path); }

std::unique_ptr<ModelSource> open_model_source(const std::string& path, const std::string& config_path) {
  if (!fs::exists(path))
    throw Error(ErrorKind::config, "model.path: " + path + " does not exist (a diffusers folder or a .safetensors single file)");
  if (is_single_file(path)) return std::make_unique<SingleFileModel>(SingleFileModel::open(path, config_path));
  return std::make_unique<DiffusersPipeline>(DiffusersPipeline::open(path));
}

}  // namespace zs::models
