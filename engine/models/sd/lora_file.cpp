#include "models/sd/lora_file.h"

#include <cmath>
#include <map>
#include <sstream>
#include <string>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/text.h"
#include "io/safetensors.h"
#include "models/peft_lora_config.h"
#include "models/sd/unet_config.h"

namespace zs::checkpoint {

namespace {

constexpr const char* kKohyaDown = ".lora_down.weight";
constexpr const char* kKohyaUp = ".lora_up.weight";
constexpr const char* kKohyaAlpha = ".alpha";
constexpr const char* kPeftDown = ".lora_A.weight";
constexpr const char* kPeftUp = ".lora_B.weight";

/// The key stem of each of `paths` (layers of one part) in one format, in their order.
std::vector<std::string> lora_stems(models::LoraPart part, std::vector<std::string> paths,
                                    const models::UNetConfig& unet, LoraFileFormat format, bool sdxl) {
  if (format == LoraFileFormat::kohya) return models::kohya_lora_stems(part, sdxl, paths, unet);
  const std::string component = models::diffusers_lora_component(part);
  for (auto& p : paths) p = component + "." + p;
  return paths;
}

std::vector<std::string> lora_stems(const LoraModelPart& part, const std::vector<models::LoraLayer>& layers,
                                    const models::UNetConfig& unet, LoraFileFormat format, bool sdxl) {
  std::vector<std::string> paths;
  paths.reserve(layers.size());
  for (const auto& l : layers) paths.push_back(l.name);
  return lora_stems(part.part, std::move(paths), unet, format, sdxl);
}

/// The format of an open LoRA file, from its first adapter key.
LoraFileFormat format_of(const io::SafetensorsReader& reader) {
  for (const auto& e : reader.entries()) {
    if (e.name.ends_with(kKohyaDown)) return LoraFileFormat::kohya;
    if (e.name.ends_with(kPeftDown)) return LoraFileFormat::diffusers;
  }
  throw Error(ErrorKind::io, reader.path() + ": not a LoRA file (no '*.lora_down.weight' or '*.lora_A.weight' tensor)");
}

}  // namespace

std::vector<LoraFileLayer> lora_file_layers(const std::vector<LoraModelPart>& parts) {
  std::vector<LoraFileLayer> out;
  for (const auto& part : parts)
    for (const auto& l : models::lora_layers(*part.root)) out.push_back({part.part, l.name, l.adapter});
  return out;
}

LoraFileContent lora_file_content(const std::vector<LoraModelPart>& parts, const models::UNetConfig& unet,
                                  LoraFileFormat format, const LoraFileOptions& options) {
  return lora_file_content(lora_file_layers(parts), unet, format, options);
}

LoraFileContent lora_file_content(const std::vector<LoraFileLayer>& layers, const models::UNetConfig& unet,
                                  LoraFileFormat format, const LoraFileOptions& options) {
  LoraFileContent file;
  std::int64_t rank = 0, conv_rank = 0;
  double alpha = 0, conv_alpha = 0;
  const auto stored = [&](const at::Tensor& t) { return t.detach().to(at::kCPU).to(options.dtype).contiguous(); };
  // Stems part by part (SDXL's LDM names need all of a part's paths at once).
  std::vector<std::string> stems(layers.size());
  for (const auto part : {models::LoraPart::unet, models::LoraPart::text_encoder, models::LoraPart::text_encoder_2}) {
    std::vector<std::size_t> index;
    std::vector<std::string> paths;
    for (std::size_t i = 0; i < layers.size(); ++i)
      if (layers[i].part == part) {
        index.push_back(i);
        paths.push_back(layers[i].path);
      }
    if (paths.empty()) continue;
    const auto part_stems = lora_stems(part, std::move(paths), unet, format, options.sdxl);
    for (std::size_t k = 0; k < index.size(); ++k) stems[index[k]] = part_stems[k];
  }
  for (std::size_t i = 0; i < layers.size(); ++i) {
    const models::LoraAdapter& a = *layers[i].adapter;
    // A 3×3 convolution's adapter is LoCon's "conv_dim"; 1×1 convolutions and Linear layers
    // are the network's dim (sd-scripts counts 1×1 convolutions with the Linear layers).
    const bool conv3 = a.down.dim() == 4 && a.down.size(2) * a.down.size(3) > 1;
    (conv3 ? conv_rank : rank) = a.rank();
    (conv3 ? conv_alpha : alpha) = a.alpha;
    if (format == LoraFileFormat::kohya) {
      file.tensors.emplace_back(stems[i] + kKohyaDown, stored(a.down));
      file.tensors.emplace_back(stems[i] + kKohyaUp, stored(a.up));
      file.tensors.emplace_back(stems[i] + kKohyaAlpha, stored(at::scalar_tensor(a.alpha, at::kDouble)));
    } else {
      file.tensors.emplace_back(stems[i] + kPeftDown, stored(a.down));
      file.tensors.emplace_back(stems[i] + kPeftUp, stored(a.up.to(at::kDouble).mul(a.scale())));
    }
  }
  if (file.tensors.empty())
    throw Error(ErrorKind::config, "LoRA export: the model has no adapters (was it trained with training.method: lora?)");
  if (format == LoraFileFormat::kohya) {
    nlohmann::json args = nlohmann::json::object();
    if (conv_rank > 0) {
      args["conv_dim"] = std::to_string(conv_rank);
      args["conv_alpha"] = python_float(conv_alpha);
    }
    if (rank == 0) {  // only 3×3 convolutions adapted
      rank = conv_rank;
      alpha = conv_alpha;
    }
    file.metadata = {{"ss_network_module", "networks.lora"},
                     {"ss_network_dim", std::to_string(rank)},
                     {"ss_network_alpha", python_float(alpha)},
                     {"ss_network_args", args.dump()},
                     {"ss_v2", "False"},
                     {"ss_base_model_version", options.sdxl ? "sdxl_base_v1-0" : "sd_v1"}};
  } else {
    file.metadata = {{"format", "pt"}};
    // diffusers' lora_adapter_metadata (the scale is inside lora_B).
    std::vector<models::PeftLoraLayer> list;
    for (const auto& l : layers) list.push_back({models::diffusers_lora_component(l.part), l.path, l.adapter->rank()});
    file.metadata.merge(models::peft_lora_metadata(list));
  }
  for (const auto& [key, value] : options.metadata) file.metadata[key] = value;
  return file;
}

void write_lora_file(const std::string& path, const std::vector<LoraFileLayer>& layers, const models::UNetConfig& unet,
                     LoraFileFormat format, const LoraFileOptions& options) {
  const LoraFileContent file = lora_file_content(layers, unet, format, options);
  io::write_safetensors(path, file.tensors, file.metadata);
}

void write_lora_file(const std::string& path, const std::vector<LoraModelPart>& parts, const models::UNetConfig& unet,
                     LoraFileFormat format, const LoraFileOptions& options) {
  write_lora_file(path, lora_file_layers(parts), unet, format, options);
}

LoraFileFormat detect_lora_format(const std::string& path) { return format_of(io::SafetensorsReader(path)); }

std::size_t read_lora_file(const std::string& path, const std::vector<LoraModelPart>& parts,
                           const models::UNetConfig& unet, bool sdxl, at::ScalarType dtype) {
  const io::SafetensorsReader reader(path);
  const LoraFileFormat format = format_of(reader);
  // Every adaptable layer of the model under its stem in this format.
  std::map<std::string, models::LoraLayer> by_stem;
  for (const auto& part : parts) {
    if (part.part == models::LoraPart::text_encoder_2 && !sdxl) continue;
    const std::vector<models::LoraLayer> layers = models::adaptable_layers(*part.root);
    const std::vector<std::string> stems = lora_stems(part, layers, unet, format, sdxl);
    for (std::size_t i = 0; i < layers.size(); ++i) by_stem.emplace(stems[i], layers[i]);
  }
  const std::string down_tail = format == LoraFileFormat::kohya ? kKohyaDown : kPeftDown;
  const std::string up_tail = format == LoraFileFormat::kohya ? kKohyaUp : kPeftUp;
  // diffusers' own files may carry each component's PEFT LoraConfig (lora_alpha apart from r).
  std::map<std::string, std::optional<models::PeftLoraConfig>> peft;
  if (format == LoraFileFormat::diffusers)
    for (const char* component : {"unet", "text_encoder", "text_encoder_2"})
      peft[component] = models::read_peft_lora_config(reader, component, path);
  // Every adapter is read and checked before any is attached: a refused file leaves the model as it was.
  std::vector<std::pair<const models::LoraLayer*, std::shared_ptr<models::LoraAdapter>>> found;
  for (const auto& e : reader.entries()) {
    if (!e.name.ends_with(down_tail)) continue;
    const std::string stem = e.name.substr(0, e.name.size() - down_tail.size());
    const auto it = by_stem.find(stem);
    if (it == by_stem.end())
      throw Error(ErrorKind::checkpoint, path + ": '" + e.name + "' names no layer of this model (a LoRA for another " +
                                             "model family or architecture?)");
    if (!reader.contains(stem + up_tail))
      throw Error(ErrorKind::checkpoint, path + ": '" + e.name + "' has no '" + stem + up_tail + "'");
    const models::LoraLayer& layer = it->second;
    const at::Tensor& w = layer.weight();
    auto a = std::make_shared<models::LoraAdapter>();
    const auto opts = at::TensorOptions().dtype(dtype).device(w.device());
    a->down = reader.tensor(e.name).to(opts);
    a->up = reader.tensor(stem + up_tail).to(opts);
    // (Dimensions first: a 0-dimension tensor has no size(0); issue 59 item 7.)
    if (a->down.dim() != w.dim() || a->up.dim() != w.dim())
      throw Error(ErrorKind::checkpoint, path + ": the shapes of '" + stem + "' do not fit the layer " + layer.name +
                                             " (" + std::to_string(a->down.dim()) + " and " + std::to_string(a->up.dim()) +
                                             " dimensions, the layer's weight has " + std::to_string(w.dim()) + ")");
    const std::int64_t r = a->down.size(0);
    const bool fits = a->up.size(1) == r && a->down.size(1) == w.size(1) && a->up.size(0) == w.size(0) &&
                      (!layer.conv || (a->down.size(2) == w.size(2) && a->down.size(3) == w.size(3) &&
                                       a->up.size(2) == 1 && a->up.size(3) == 1));
    if (!fits)
      throw Error(ErrorKind::checkpoint, path + ": the shapes of '" + stem + "' do not fit the layer " + layer.name);
    // kohya: the stored alpha (a file without it means alpha = rank, as sd-scripts reads it);
    // diffusers: its metadata's scale where it has one (as alpha/rank), else alpha = rank.
    const std::string alpha_key = stem + kKohyaAlpha;
    const auto config = peft.find(stem.substr(0, stem.find('.')));
    if (config != peft.end() && config->second && config->second->r != static_cast<double>(r))
      throw Error(ErrorKind::checkpoint, path + ": '" + stem + "' has rank " + std::to_string(r) +
                                             ", the file's lora_adapter_metadata says r " +
                                             std::to_string(static_cast<std::int64_t>(config->second->r)));
    const at::Tensor stored_alpha =
        format == LoraFileFormat::kohya && reader.contains(alpha_key) ? reader.tensor(alpha_key) : at::Tensor();
    if (stored_alpha.defined() && stored_alpha.numel() != 1)
      throw Error(ErrorKind::checkpoint, path + ": '" + alpha_key + "' holds " + std::to_string(stored_alpha.numel()) +
                                             " values; an alpha is one number");
    a->alpha = stored_alpha.defined()
                   ? stored_alpha.to(at::kDouble).item<double>()
               : config != peft.end() && config->second ? config->second->scale() * static_cast<double>(r)
                                                        : static_cast<double>(r);
    found.emplace_back(&layer, std::move(a));
  }
  for (auto& [layer, adapter] : found) models::set_adapter(*layer, std::move(adapter));
  return found.size();
}

}  // namespace zs::checkpoint
