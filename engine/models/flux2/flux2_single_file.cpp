#include "models/flux2/flux2_single_file.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <map>

#include <ATen/ATen.h>

#include "core/error.h"
#include "core/meta_tensors.h"
#include "io/safetensors.h"
#include "models/weights.h"

namespace zs::models {

namespace {

using Place = Flux2FilePlace;

Place file_place(const std::string& name) {
  static const std::vector<std::pair<std::string, std::string>> kTop = {
      {"x_embedder.", "img_in."},
      {"context_embedder.", "txt_in."},
      {"time_guidance_embed.timestep_embedder.linear_1.", "time_in.in_layer."},
      {"time_guidance_embed.timestep_embedder.linear_2.", "time_in.out_layer."},
      {"time_guidance_embed.guidance_embedder.linear_1.", "guidance_in.in_layer."},
      {"time_guidance_embed.guidance_embedder.linear_2.", "guidance_in.out_layer."},
      {"double_stream_modulation_img.linear.", "double_stream_modulation_img.lin."},
      {"double_stream_modulation_txt.linear.", "double_stream_modulation_txt.lin."},
      {"single_stream_modulation.linear.", "single_stream_modulation.lin."},
      {"proj_out.", "final_layer.linear."}};
  for (const auto& [from, to] : kTop)
    if (name.starts_with(from)) return {to + name.substr(from.size())};
  if (name.starts_with("norm_out.linear.")) return {"final_layer.adaLN_modulation.1." + name.substr(16), -1, true};
  // Blocks: "<head>N.<inner>.<param>".
  struct Rename {
    const char* inner;
    const char* to;
    int third;
  };
  static const std::vector<Rename> kDouble = {
      {"attn.to_q", "img_attn.qkv", 0},           {"attn.to_k", "img_attn.qkv", 1},
      {"attn.to_v", "img_attn.qkv", 2},           {"attn.add_q_proj", "txt_attn.qkv", 0},
      {"attn.add_k_proj", "txt_attn.qkv", 1},     {"attn.add_v_proj", "txt_attn.qkv", 2},
      {"attn.norm_q", "img_attn.norm.query_norm", -1}, {"attn.norm_k", "img_attn.norm.key_norm", -1},
      {"attn.norm_added_q", "txt_attn.norm.query_norm", -1}, {"attn.norm_added_k", "txt_attn.norm.key_norm", -1},
      {"attn.to_out.0", "img_attn.proj", -1},     {"attn.to_add_out", "txt_attn.proj", -1},
      {"ff.linear_in", "img_mlp.0", -1},          {"ff.linear_out", "img_mlp.2", -1},
      {"ff_context.linear_in", "txt_mlp.0", -1},  {"ff_context.linear_out", "txt_mlp.2", -1}};
  static const std::vector<Rename> kSingle = {{"attn.to_qkv_mlp_proj", "linear1", -1},
                                              {"attn.to_out", "linear2", -1},
                                              {"attn.norm_q", "norm.query_norm", -1},
                                              {"attn.norm_k", "norm.key_norm", -1}};
  for (const auto& [head, file_head, table] :
       {std::tuple<std::string, std::string, const std::vector<Rename>*>{"transformer_blocks.", "double_blocks.", &kDouble},
        {"single_transformer_blocks.", "single_blocks.", &kSingle}}) {
    if (!name.starts_with(head)) continue;
    const auto dot = name.find('.', head.size()), last = name.rfind('.');
    if (dot == std::string::npos || last <= dot) break;
    const std::string block = name.substr(head.size(), dot - head.size()), inner = name.substr(dot + 1, last - dot - 1);
    std::string param = name.substr(last + 1);
    for (const Rename& r : *table)
      if (inner == r.inner) {
        if (std::string(r.to).find("norm") != std::string::npos && param == "weight") param = "scale";
        return {file_head + block + "." + r.to + "." + param, r.third};
      }
  }
  return {name};
}

}  // namespace

Flux2FilePlace flux2_file_place(const std::string& name) { return file_place(name); }

std::optional<std::string> find_flux2_file_prefix(const std::vector<std::string>& names) {
  for (const std::string prefix : {"", "model.diffusion_model."})
    if (std::find(names.begin(), names.end(), prefix + "double_stream_modulation_img.lin.weight") != names.end())
      return prefix;
  return std::nullopt;
}

std::vector<Flux2FileTensor> flux2_file_layout(const Flux2Config& c) {
  std::map<std::string, Flux2FileTensor> by_key;
  const MetaTensorScope meta;
  const Flux2Transformer2DModel skeleton(c);
  for (const auto& p : skeleton->named_parameters()) {
    const Place place = file_place(p.key());
    Flux2FileTensor& t = by_key[place.key];
    t.key = place.key;
    t.swapped = place.swapped;
    const auto shape = p.value().sizes().vec();
    if (place.third < 0) {
      t.shape = shape;
      t.parts = {p.key()};
      continue;
    }
    if (t.parts.size() < 3) t.parts.resize(3);
    t.parts[static_cast<std::size_t>(place.third)] = p.key();
    t.shape = shape;
    t.shape[0] = 3 * shape[0];
  }
  std::vector<Flux2FileTensor> out;
  for (auto& [key, t] : by_key) {
    if (std::any_of(t.parts.begin(), t.parts.end(), [](const std::string& s) { return s.empty(); }))
      throw Error(ErrorKind::checkpoint, "FLUX.2 single-file layout: " + key + " lacks one of q, k, v");
    out.push_back(std::move(t));
  }
  return out;
}

at::Tensor assemble_flux2_file_tensor(const Flux2FileTensor& t, const std::function<at::Tensor(const std::string&)>& read) {
  if (t.parts.size() == 1) {
    const at::Tensor v = read(t.parts.front()).to(at::kFloat);
    if (!t.swapped) return v;
    const std::int64_t half = v.size(0) / 2;
    return at::cat({v.narrow(0, half, half), v.narrow(0, 0, half)}, 0);
  }
  std::vector<at::Tensor> rows;
  for (const auto& part : t.parts) rows.push_back(read(part).to(at::kFloat));
  return at::cat(rows, 0);
}

Flux2File::Flux2File(const std::string& path) : reader_(std::make_shared<io::SafetensorsReader>(path)) {
  std::vector<std::string> names;
  for (const auto& e : reader_->entries()) names.push_back(e.name);
  const auto prefix = find_flux2_file_prefix(names);
  if (!prefix)
    throw Error(ErrorKind::config, path + ": not a FLUX.2 transformer in Black Forest Labs' layout (no "
                                          "double_stream_modulation_img.lin.weight); give BFL's flux-2-*.safetensors "
                                          "transformer file, or a diffusers folder");
  prefix_ = *prefix;
  for (const auto& e : reader_->entries())
    if (e.name.starts_with(prefix_)) {
      names_.push_back(e.name.substr(prefix_.size()));
      shapes_[names_.back()] = e.shape;
    }
}

const std::string& Flux2File::path() const { return reader_->path(); }

Flux2Config Flux2File::config() const {
  auto dims = [&](const std::string& key, std::size_t rank) {
    const auto it = shapes_.find(key);
    if (it == shapes_.end() || it->second.size() != rank)
      throw Error(ErrorKind::config, path() + ": " + prefix_ + key +
                                         (it == shapes_.end() ? " is missing" : " has shape " + shape_text(it->second)) +
                                         " (a FLUX.2 transformer has it, of rank " + std::to_string(rank) + ")");
    return it->second;
  };
  Flux2Config c;
  const auto img_in = dims("img_in.weight", 2), txt_in = dims("txt_in.weight", 2), time_in = dims("time_in.in_layer.weight", 2);
  const auto out = dims("final_layer.linear.weight", 2);
  c.num_layers = numbered_blocks(names_, "double_blocks.");
  c.num_single_layers = numbered_blocks(names_, "single_blocks.");
  const std::string block = c.num_layers > 0 ? "double_blocks.0.img_attn.norm.query_norm.scale" : "single_blocks.0.norm.query_norm.scale";
  const auto head = dims(block, 1);
  const std::int64_t inner = img_in[0];
  c.in_channels = img_in[1];
  c.out_channels = out[0];
  c.joint_attention_dim = txt_in[1];
  c.timestep_guidance_channels = time_in[1];
  c.guidance_embeds = shapes_.count("guidance_in.in_layer.weight") > 0;
  if (head[0] <= 0 || inner % head[0] != 0)
    throw Error(ErrorKind::config, path() + ": the width " + std::to_string(inner) + " is not a multiple of " + prefix_ + block +
                                       "'s " + std::to_string(head[0]));
  c.attention_head_dim = head[0];
  c.num_attention_heads = inner / head[0];
  const std::string mlp = c.num_layers > 0 ? "double_blocks.0.img_mlp.0.weight" : "";
  if (!mlp.empty()) c.mlp_ratio = static_cast<double>(dims(mlp, 2)[0] / 2) / static_cast<double>(inner);
  if (head[0] != 128)
    throw Error(ErrorKind::config, path() + ": heads of " + std::to_string(head[0]) +
                                       " dimensions (FLUX.2's are 128); set model.config_path to a diffusers folder whose "
                                       "transformer/config.json describes this model");
  return c;
}

Flux2Config Flux2File::config(const std::string& config_dir) const {
  std::error_code ec;
  if (!config_dir.empty()) {
    const auto file = std::filesystem::path(config_dir) / "transformer" / "config.json";
    if (std::filesystem::exists(file, ec)) return Flux2Config::from_file(file.string());
  }
  return config();
}

void Flux2File::check(const Flux2Config& c) const {
  for (const auto& t : flux2_file_layout(c)) {
    const auto it = shapes_.find(t.key);
    if (it == shapes_.end())
      throw Error(ErrorKind::config, path() + ": has no " + prefix_ + t.key + " (a FLUX.2 transformer with " +
                                         std::to_string(c.num_layers) + " double-stream and " +
                                         std::to_string(c.num_single_layers) + " single-stream blocks, " +
                                         std::to_string(c.inner_dim()) + " wide" +
                                         (c.guidance_embeds ? ", with the guidance embedding ([dev])" : "") +
                                         ", has it); the file is incomplete or another model");
    if (it->second != t.shape)
      throw Error(ErrorKind::config, path() + ": " + prefix_ + t.key + " has shape " + shape_text(it->second) +
                                         ", the transformer's config needs " + shape_text(t.shape));
  }
}

at::Tensor Flux2File::tensor(const std::string& name, const Flux2Config& c) const {
  const Place place = file_place(name);
  const std::string full = prefix_ + place.key;
  if (!reader_->contains(full)) return {};
  const at::Tensor t = reader_->weight(full);
  if (place.swapped) {
    const std::int64_t half = t.size(0) / 2;
    return at::cat({t.narrow(0, half, half), t.narrow(0, 0, half)}, 0);
  }
  if (place.third < 0) return t;
  return fused_rows(t, 3, place.third, c.inner_dim(), full, path());
}

}  // namespace zs::models
