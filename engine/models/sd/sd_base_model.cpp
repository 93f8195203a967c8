#include "models/sd/sd_base_model.h"

#include <filesystem>
#include <memory>

#include <ATen/ATen.h>

#include "core/error.h"
#include "core/meta_tensors.h"
#include "models/sd/diffusers_pipeline.h"
#include "models/sd/diffusion_model.h"
#include "models/sd/single_file_model.h"
#include "models/sd/unet_2d_condition.h"

namespace zs::checkpoint {

namespace fs = std::filesystem;

BaseModel::BaseModel(const std::string& model_dir) : model_dir_(model_dir) {
  const models::PipelineRef ref = models::DiffusionModel::pipeline_of(model_dir);
  source_ = ref.path;
  config_path_ = ref.config_path;
  if (preset() && !fs::exists(fs::path(model_dir) / "unet" / "diffusion_pytorch_model.safetensors"))
    throw Error(ErrorKind::checkpoint, model_dir + ": holds no base weights (unet/diffusion_pytorch_model.safetensors); "
                                       "runs since LoRA training keep them there when their checkpoints need a base");
}

ExportTensors BaseModel::unet(const ComponentAdapters& adapters) const {
  ExportTensors base;
  if (preset()) {
    base = file_tensors({model_dir_ + "/unet/diffusion_pytorch_model.safetensors"});
  } else if (!models::is_single_file(source_)) {
    base = file_tensors(models::DiffusersPipeline::open(source_).weight_files("unet"));
  } else {
    // A single file names the UNet its own way: the names and shapes come from the module (built
    // as shapes only), the values through the file's name mapping.
    auto file = std::make_shared<models::SingleFileModel>(models::SingleFileModel::open(source_, config_path_));
    const models::TensorLookup lookup = file->unet_weights();
    std::vector<std::pair<std::string, std::vector<std::int64_t>>> shapes;
    {
      const MetaTensorScope meta;
      const models::UNet2DConditionModel skeleton(file->unet_config());
      for (const auto& p : skeleton->named_parameters()) shapes.emplace_back(p.key(), p.value().sizes().vec());
    }
    for (const auto& [name, shape] : shapes)
      base.push_back({name, shape, [file, lookup, name = name] {
                        at::Tensor t = lookup(name);
                        if (!t.defined()) throw Error(ErrorKind::checkpoint, file->root() + ": has no UNet tensor for " + name);
                        return t;
                      }});
  }
  return merged(std::move(base), adapters, "unet");
}

ExportTensors BaseModel::text_encoder(const std::string& component, const ComponentAdapters& adapters) const {
  ExportTensors base;
  if (preset()) {
    const std::string file = model_dir_ + "/" + component + "/model.safetensors";
    if (!fs::exists(file)) return {};
    base = file_tensors({file});
  } else if (!models::is_single_file(source_)) {
    const auto pipeline = models::DiffusersPipeline::open(source_);
    if (!pipeline.has(component)) return {};
    base = file_tensors(pipeline.weight_files(component));
  } else {
    const auto file = models::SingleFileModel::open(source_, config_path_);
    if (!file.has(component)) return {};
    const models::ClipTextModel encoder = file.load_text_encoder(component);
    for (const auto& p : encoder->named_parameters())
      base.push_back({p.key(), p.value().sizes().vec(), [t = p.value()] { return t; }});
  }
  return merged(std::move(base), adapters, component);
}

}  // namespace zs::checkpoint
