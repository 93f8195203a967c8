#include "models/z_image/z_image_single_file.h"

#include <algorithm>

#include "core/error.h"
#include "core/meta_tensors.h"
#include "models/weights.h"

namespace zs::models {

namespace {

/// Where diffusers' tensor `name` lives in the single-file layout: its key there, and which third
/// of a fused qkv's rows it is (−1: the whole tensor).
SingleFilePlace file_place(const std::string& name) {
  std::string key = name;
  for (const auto& [from, to] : {std::pair<std::string, std::string>{"all_x_embedder.2-1.", "x_embedder."},
                                 {"all_final_layer.2-1.", "final_layer."}})
    if (key.starts_with(from)) key = to + key.substr(from.size());
  static const std::vector<std::pair<std::string, std::string>> kInside = {
      {".attention.to_out.0.", ".attention.out."},
      {".attention.norm_q.", ".attention.q_norm."},
      {".attention.norm_k.", ".attention.k_norm."}};
  for (const auto& [from, to] : kInside)
    if (const auto at = key.find(from); at != std::string::npos) key.replace(at, from.size(), to);
  static const std::vector<std::string> kQkv = {".attention.to_q.", ".attention.to_k.", ".attention.to_v."};
  for (int i = 0; i < 3; ++i)
    if (const auto at = key.find(kQkv[i]); at != std::string::npos)
      return {key.substr(0, at) + ".attention.qkv." + key.substr(at + kQkv[i].size()), i};
  return {key};
}

}  // namespace

std::optional<std::string> find_z_image_file_prefix(const std::vector<std::string>& names) {
  for (const std::string prefix : {"", "model.diffusion_model."})
    if (std::find(names.begin(), names.end(), prefix + "layers.0.attention.qkv.weight") != names.end() &&
        std::find(names.begin(), names.end(), prefix + "cap_embedder.1.weight") != names.end())
      return prefix;
  return std::nullopt;
}

std::vector<SingleFileTensor> z_image_file_layout(const ZImageConfig& c) {
  std::vector<SingleFileTensor> out;
  {
    const MetaTensorScope meta;
    out = single_file_layout(*ZImageTransformer2DModel(c), file_place, "Z-Image");
  }
  // The original layout's top-level norm_final.weight (an RMS norm the model never applies;
  // diffusers drops it): written as ones so loaders that expect it find it.
  out.push_back({"norm_final.weight", {c.dim}, {}});
  std::sort(out.begin(), out.end(), [](const SingleFileTensor& a, const SingleFileTensor& b) { return a.key < b.key; });
  return out;
}

ZImageFile::ZImageFile(const std::string& path)
    : file_(path, find_z_image_file_prefix,
            "not a Z-Image transformer in the single-file layout (no layers.0.attention.qkv.weight and "
            "cap_embedder.1.weight); give ComfyUI's z_image*.safetensors transformer file, or a diffusers folder") {}

ZImageConfig ZImageFile::config() const {
  auto dims = [&](const std::string& key, std::size_t rank) { return file_.dims(key, rank, "a Z-Image transformer"); };
  ZImageConfig c;
  c.axes_lens = {1536, 512, 512};
  const auto x = dims("x_embedder.weight", 2), cap = dims("cap_embedder.1.weight", 2);
  const auto q_norm = dims("layers.0.attention.q_norm.weight", 1);
  c.dim = x[0];
  c.in_channels = x[1] / 4;  // 2×2 patches of one frame
  c.cap_feat_dim = cap[1];
  c.n_layers = numbered_blocks(file_.names(), "layers.");
  c.n_refiner_layers = numbered_blocks(file_.names(), "noise_refiner.");
  if (numbered_blocks(file_.names(), "context_refiner.") != c.n_refiner_layers)
    throw Error(ErrorKind::config, path() + ": " + std::to_string(c.n_refiner_layers) + " noise_refiner blocks but " +
                                       std::to_string(numbered_blocks(file_.names(), "context_refiner.")) +
                                       " context_refiner blocks (a Z-Image transformer has as many of each)");
  if (q_norm[0] <= 0 || c.dim % q_norm[0] != 0)
    throw Error(ErrorKind::config, path() + ": the width " + std::to_string(c.dim) + " is not a multiple of " + prefix() +
                                       "layers.0.attention.q_norm.weight's " + std::to_string(q_norm[0]));
  c.n_heads = c.dim / q_norm[0];
  if (q_norm[0] != 128)
    throw Error(ErrorKind::config, path() + ": heads of " + std::to_string(q_norm[0]) +
                                       " dimensions (Z-Image's are 128); set model.config_path to a diffusers folder "
                                       "whose transformer/config.json describes this model");
  return c;
}

ZImageConfig ZImageFile::config(const std::string& config_dir) const {
  if (const auto file = folder_transformer_config(config_dir)) return ZImageConfig::from_file(*file);
  return config();
}

void ZImageFile::check(const ZImageConfig& c) const {
  file_.check(z_image_file_layout(c), "a Z-Image transformer with " + std::to_string(c.n_refiner_layers) +
                                          " noise and context refiner blocks and " + std::to_string(c.n_layers) +
                                          " main blocks, " + std::to_string(c.dim) + " wide,");
}

at::Tensor ZImageFile::tensor(const std::string& name, const ZImageConfig& c) const {
  return file_.tensor(file_place(name), c.dim);
}

}  // namespace zs::models
