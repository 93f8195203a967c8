#include "models/z_image/z_image_single_file.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>

#include <ATen/ATen.h>

#include "core/error.h"
#include "core/meta_tensors.h"
#include "io/safetensors.h"
#include "models/weights.h"

namespace zs::models {

namespace {

/// Where diffusers' tensor `name` lives in the single-file layout: its key there, and which third
/// of a fused qkv's rows it is (−1: the whole tensor).
std::pair<std::string, int> file_place(const std::string& name) {
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
  return {key, -1};
}

}  // namespace

std::optional<std::string> find_z_image_file_prefix(const std::vector<std::string>& names) {
  for (const std::string prefix : {"", "model.diffusion_model."})
    if (std::find(names.begin(), names.end(), prefix + "layers.0.attention.qkv.weight") != names.end() &&
        std::find(names.begin(), names.end(), prefix + "cap_embedder.1.weight") != names.end())
      return prefix;
  return std::nullopt;
}

std::vector<ZImageFileTensor> z_image_file_layout(const ZImageConfig& c) {
  std::map<std::string, ZImageFileTensor> by_key;
  const MetaTensorScope meta;
  const ZImageTransformer2DModel skeleton(c);
  for (const auto& p : skeleton->named_parameters()) {
    const auto [key, third] = file_place(p.key());
    ZImageFileTensor& t = by_key[key];
    t.key = key;
    const auto shape = p.value().sizes().vec();
    if (third < 0) {
      t.shape = shape;
      t.parts = {p.key()};
      continue;
    }
    if (t.parts.size() < 3) t.parts.resize(3);
    t.parts[static_cast<std::size_t>(third)] = p.key();
    t.shape = shape;
    t.shape[0] = 3 * shape[0];
  }
  for (const auto& [key, t] : by_key)
    if (std::any_of(t.parts.begin(), t.parts.end(), [](const std::string& s) { return s.empty(); }))
      throw Error(ErrorKind::checkpoint, "Z-Image single-file layout: " + key + " lacks one of q, k, v");
  // The original layout's top-level norm_final.weight (an RMS norm the model never applies;
  // diffusers drops it): written as ones so loaders that expect it find it.
  by_key["norm_final.weight"] = {"norm_final.weight", {c.dim}, {}};
  std::vector<ZImageFileTensor> out;
  for (auto& [key, t] : by_key) out.push_back(std::move(t));
  return out;
}

at::Tensor assemble_z_image_file_tensor(const ZImageFileTensor& t, const std::function<at::Tensor(const std::string&)>& read) {
  if (t.parts.empty()) return at::ones(t.shape, at::kFloat);
  if (t.parts.size() == 1) return read(t.parts.front()).to(at::kFloat);
  std::vector<at::Tensor> rows;
  for (const auto& part : t.parts) rows.push_back(read(part).to(at::kFloat));
  return at::cat(rows, 0);
}

ZImageFile::ZImageFile(const std::string& path) : reader_(std::make_shared<io::SafetensorsReader>(path)) {
  std::vector<std::string> names;
  for (const auto& e : reader_->entries()) names.push_back(e.name);
  const auto prefix = find_z_image_file_prefix(names);
  if (!prefix)
    throw Error(ErrorKind::config, path + ": not a Z-Image transformer in the single-file layout (no "
                                          "layers.0.attention.qkv.weight and cap_embedder.1.weight); give ComfyUI's "
                                          "z_image*.safetensors transformer file, or a diffusers folder");
  prefix_ = *prefix;
  for (const auto& e : reader_->entries())
    if (e.name.starts_with(prefix_)) {
      names_.push_back(e.name.substr(prefix_.size()));
      shapes_[names_.back()] = e.shape;
    }
}

const std::string& ZImageFile::path() const { return reader_->path(); }

ZImageConfig ZImageFile::config() const {
  auto dims = [&](const std::string& key, std::size_t rank) {
    const auto it = shapes_.find(key);
    if (it == shapes_.end() || it->second.size() != rank)
      throw Error(ErrorKind::config, path() + ": " + prefix_ + key + (it == shapes_.end() ? " is missing" : " has shape " + shape_text(it->second)) +
                                         " (a Z-Image transformer has it, of rank " + std::to_string(rank) + ")");
    return it->second;
  };
  ZImageConfig c;
  c.axes_lens = {1536, 512, 512};
  const auto x = dims("x_embedder.weight", 2), cap = dims("cap_embedder.1.weight", 2);
  const auto q_norm = dims("layers.0.attention.q_norm.weight", 1);
  c.dim = x[0];
  c.in_channels = x[1] / 4;  // 2×2 patches of one frame
  c.cap_feat_dim = cap[1];
  c.n_layers = numbered_blocks(names_, "layers.");
  c.n_refiner_layers = numbered_blocks(names_, "noise_refiner.");
  if (numbered_blocks(names_, "context_refiner.") != c.n_refiner_layers)
    throw Error(ErrorKind::config, path() + ": " + std::to_string(c.n_refiner_layers) + " noise_refiner blocks but " +
                                       std::to_string(numbered_blocks(names_, "context_refiner.")) +
                                       " context_refiner blocks (a Z-Image transformer has as many of each)");
  if (q_norm[0] <= 0 || c.dim % q_norm[0] != 0)
    throw Error(ErrorKind::config, path() + ": the width " + std::to_string(c.dim) + " is not a multiple of " + prefix_ +
                                       "layers.0.attention.q_norm.weight's " + std::to_string(q_norm[0]));
  c.n_heads = c.dim / q_norm[0];
  if (q_norm[0] != 128)
    throw Error(ErrorKind::config, path() + ": heads of " + std::to_string(q_norm[0]) +
                                       " dimensions (Z-Image's are 128); set model.config_path to a diffusers folder "
                                       "whose transformer/config.json describes this model");
  return c;
}

ZImageConfig ZImageFile::config(const std::string& config_dir) const {
  std::error_code ec;
  if (!config_dir.empty()) {
    const auto file = std::filesystem::path(config_dir) / "transformer" / "config.json";
    if (std::filesystem::exists(file, ec)) return ZImageConfig::from_file(file.string());
  }
  return config();
}

void ZImageFile::check(const ZImageConfig& c) const {
  for (const auto& t : z_image_file_layout(c)) {
    if (t.parts.empty()) continue;  // norm_final: never read
    const auto it = shapes_.find(t.key);
    if (it == shapes_.end())
      throw Error(ErrorKind::config, path() + ": has no " + prefix_ + t.key + " (a Z-Image transformer with " +
                                         std::to_string(c.n_refiner_layers) + " noise and context refiner blocks and " +
                                         std::to_string(c.n_layers) + " main blocks, " + std::to_string(c.dim) +
                                         " wide, has it); the file is incomplete or another model");
    if (it->second != t.shape)
      throw Error(ErrorKind::config, path() + ": " + prefix_ + t.key + " has shape " + shape_text(it->second) +
                                         ", the transformer's config needs " + shape_text(t.shape));
  }
}

at::Tensor ZImageFile::tensor(const std::string& name, const ZImageConfig& c) const {
  const auto [key, third] = file_place(name);
  const std::string full = prefix_ + key;
  if (!reader_->contains(full)) return {};
  const at::Tensor t = reader_->weight(full);
  if (third < 0) return t;
  return fused_rows(t, 3, third, c.dim, full, path());
}

}  // namespace zs::models
