#include "models/sd/sd_lora_export.h"

#include <filesystem>

#include "checkpoint/checkpoint.h"
#include "checkpoint/sharded_state.h"
#include "core/error.h"
#include "models/export_sources.h"
#include "models/sd/lora_file.h"
#include "models/sd/unet_config.h"

namespace zs::checkpoint {

namespace fs = std::filesystem;

namespace {

models::LoraPart part_of(const std::string& component) {
  if (component == "unet") return models::LoraPart::unet;
  if (component == "text_encoder") return models::LoraPart::text_encoder;
  if (component == "text_encoder_2") return models::LoraPart::text_encoder_2;
  throw Error(ErrorKind::checkpoint, "adapters of an unknown part '" + component + "'");
}

}  // namespace

ExportResult export_lora_file(const CheckpointInfo& info, const ShardReader& shards, const std::string& model_dir,
                              const std::string& out, const ExportOptions& o) {
  const std::string kind = o.ema ? "ema" : "weights";
  const CheckpointAdapters adapters = read_checkpoint_adapters(shards, info.meta, kind);
  std::vector<LoraFileLayer> layers;
  for (const std::string component : {"unet", "text_encoder", "text_encoder_2"}) {
    if (!adapters.contains(component)) continue;
    // The shards list parameters in module order; the map sorted them by path: restore the order.
    std::vector<std::string> order;
    for (const auto& name : shards.parameter_names())
      if (name.starts_with(component + ".") && name.ends_with(".lora_down.weight"))
        order.push_back(name.substr(component.size() + 1, name.size() - component.size() - 1 - std::string(".lora_down.weight").size()));
    for (const auto& path : order) layers.push_back({part_of(component), path, adapters.at(component).at(path)});
  }
  const auto unet = models::UNetConfig::from_file(model_dir + "/unet/config.json");
  LoraFileOptions lo;
  lo.sdxl = !unet.addition_embed_type.empty();
  lo.dtype = o.dtype.value_or(at::kHalf);
  const nlohmann::json& lora = info.meta["lora"];
  lo.metadata = {{"ss_steps", std::to_string(info.step)},
                 {"ss_training_comment", "trained with ZeroStudio"},
                 {"ss_network_dropout", std::to_string(lora.value("dropout", 0.0))}};
  if (info.meta.contains("base_model"))
    lo.metadata["ss_sd_model_name"] = fs::path(info.meta["base_model"].value("path", "")).filename().string();
  if (fs::path(out).has_parent_path()) fs::create_directories(fs::path(out).parent_path());
  write_lora_file(out, layers, unet, o.format == "lora-kohya" ? LoraFileFormat::kohya : LoraFileFormat::diffusers, lo);
  ExportResult r;
  r.files = {out};
  r.tensors = layers.size() * (o.format == "lora-kohya" ? 3 : 2);
  r.bytes = static_cast<std::int64_t>(fs::file_size(out));
  for (const std::string component : {"text_encoder", "text_encoder_2"})
    if (!shard_tensors(shards, component + ".", kind).empty())
      r.notes.push_back(component + " was trained in full, which a LoRA file cannot hold: it is not in " + out +
                        " (export --format diffusers --merge writes it with the merged weights)");
  if (o.progress) o.progress(r.tensors, r.tensors);
  return r;
}

}  // namespace zs::checkpoint
