#include "models/flux/flux_single_file.h"

#include <algorithm>
#include <filesystem>
#include <map>

#include <ATen/ATen.h>

#include "core/error.h"
#include "core/meta_tensors.h"
#include "io/safetensors.h"
#include "models/weights.h"

namespace zs::models {

namespace {

bool starts_with(const std::string& s, const std::string& p) { return s.compare(0, p.size(), p) == 0; }

/// "transformer_blocks.12.attn.to_q.weight" → (12, "attn.to_q.weight") for `head` "transformer_blocks.".
bool block_part(const std::string& name, const std::string& head, std::int64_t& index, std::string& rest) {
  if (!starts_with(name, head)) return false;
  const std::size_t dot = name.find('.', head.size());
  if (dot == std::string::npos) return false;
  try {
    index = std::stoll(name.substr(head.size(), dot - head.size()));
  } catch (const std::exception&) {
    return false;
  }
  rest = name.substr(dot + 1);
  return true;
}

/// "weight" or "bias" of a parameter name (after its module path).
std::string leaf(const std::string& name) { return name.substr(name.rfind('.') + 1); }

}  // namespace

std::optional<std::string> find_bfl_flux_prefix(const std::vector<std::string>& names) {
  for (const std::string prefix : {"", "model.diffusion_model."}) {
    auto has = [&](const std::string& key) {
      return std::any_of(names.begin(), names.end(), [&](const std::string& n) { return n == prefix + key; });
    };
    // FLUX.2's single file shares the block names but has one shared modulation instead of a
    // modulation per block: not Flux.1's (models/flux2/ says so).
    if (has("double_blocks.0.img_attn.qkv.weight")) return has("double_stream_modulation_img.lin.weight") ? std::nullopt : std::optional(prefix);
  }
  return std::nullopt;
}

std::string bfl_flux_prefix(const std::vector<std::string>& names, const std::string& file) {
  if (auto prefix = find_bfl_flux_prefix(names)) return *prefix;
  throw Error(ErrorKind::config, file + ": not a Flux transformer in Black Forest Labs' layout (no "
                                        "double_blocks.0.img_attn.qkv.weight); give the flux1-dev/flux1-schnell "
                                        "transformer file, or a diffusers folder");
}

FluxConfig bfl_flux_config(const std::vector<std::string>& names, const FileShape& shape, const std::string& prefix,
                           const std::string& file) {
  std::vector<std::string> bare;
  for (const auto& n : names)
    if (starts_with(n, prefix)) bare.push_back(n.substr(prefix.size()));
  auto dims = [&](const std::string& key) {
    const auto s = shape(prefix + key);
    if (s.empty()) throw Error(ErrorKind::config, file + ": " + prefix + key + " is missing (a Flux transformer has it)");
    return s;
  };
  FluxConfig c;
  c.num_layers = numbered_blocks(bare, "double_blocks.");
  c.num_single_layers = numbered_blocks(bare, "single_blocks.");
  const auto img_in = dims("img_in.weight"), txt_in = dims("txt_in.weight"), vector_in = dims("vector_in.in_layer.weight");
  const auto head = dims("double_blocks.0.img_attn.norm.query_norm.scale"), out = dims("final_layer.linear.weight");
  const std::int64_t inner = img_in[0];
  c.in_channels = img_in[1];
  c.joint_attention_dim = txt_in[1];
  c.pooled_projection_dim = vector_in[1];
  c.attention_head_dim = head[0];
  c.out_channels = out[0];
  if (c.attention_head_dim <= 0 || inner % c.attention_head_dim != 0)
    throw Error(ErrorKind::config, file + ": the width " + std::to_string(inner) +
                                       " is not a multiple of the qk-norm width " + std::to_string(c.attention_head_dim));
  c.num_attention_heads = inner / c.attention_head_dim;
  c.guidance_embeds = !shape(prefix + "guidance_in.in_layer.weight").empty();
  // BFL's RoPE axes are (16, 56, 56) for the 128-wide heads; other widths are not Flux.1's.
  if (c.attention_head_dim != 128)
    throw Error(ErrorKind::config, file + ": heads of " + std::to_string(c.attention_head_dim) +
                                       " dimensions; Flux.1's are 128 (this file is another model)");
  return c;
}

at::Tensor bfl_flux_tensor(const std::string& name, const FileTensor& tensor, const FluxConfig& c,
                           const std::string& prefix, const std::string& where) {
  const std::int64_t dim = c.inner_dim(), mlp = 4 * dim;
  auto get = [&](const std::string& key) { return tensor(prefix + key); };
  // Fused tensors are checked whole against the config before any cut (a short one would be cut
  // past its end).
  auto chunk = [&](const std::string& key, std::int64_t index, std::int64_t count) {
    const at::Tensor t = get(key);
    return t.defined() ? fused_rows(t, count, index, dim, prefix + key, where) : t;
  };
  auto rows = [&](const std::string& key, std::int64_t first, std::int64_t n) {
    const at::Tensor t = get(key);
    if (!t.defined()) return t;
    expect_rows(t, 3 * dim + mlp, prefix + key, where);  // single blocks' linear1: q, k, v, then the MLP's input
    return t.narrow(0, first, n).contiguous();
  };
  const std::string w = leaf(name);
  static const std::map<std::string, std::string> kEmbedders = {
      {"time_text_embed.timestep_embedder.linear_1", "time_in.in_layer"},
      {"time_text_embed.timestep_embedder.linear_2", "time_in.out_layer"},
      {"time_text_embed.guidance_embedder.linear_1", "guidance_in.in_layer"},
      {"time_text_embed.guidance_embedder.linear_2", "guidance_in.out_layer"},
      {"time_text_embed.text_embedder.linear_1", "vector_in.in_layer"},
      {"time_text_embed.text_embedder.linear_2", "vector_in.out_layer"},
      {"context_embedder", "txt_in"},
      {"x_embedder", "img_in"},
      {"proj_out", "final_layer.linear"}};
  const std::string module = name.substr(0, name.rfind('.'));
  if (const auto it = kEmbedders.find(module); it != kEmbedders.end()) return get(it->second + "." + w);
  if (module == "norm_out.linear") {  // (shift, scale) in BFL's file, (scale, shift) in diffusers'
    const std::string key = "final_layer.adaLN_modulation.1." + w;
    const at::Tensor t = get(key);
    if (!t.defined()) return t;
    return at::cat({fused_rows(t, 2, 1, dim, prefix + key, where), fused_rows(t, 2, 0, dim, prefix + key, where)}, 0);
  }
  std::int64_t i = 0;
  std::string rest;
  if (block_part(name, "transformer_blocks.", i, rest)) {
    const std::string b = "double_blocks." + std::to_string(i) + ".";
    static const std::map<std::string, std::string> kPlain = {
        {"norm1.linear", "img_mod.lin"},       {"norm1_context.linear", "txt_mod.lin"},
        {"attn.to_out.0", "img_attn.proj"},    {"attn.to_add_out", "txt_attn.proj"},
        {"ff.net.0.proj", "img_mlp.0"},        {"ff.net.2", "img_mlp.2"},
        {"ff_context.net.0.proj", "txt_mlp.0"}, {"ff_context.net.2", "txt_mlp.2"}};
    static const std::map<std::string, std::string> kNorms = {
        {"attn.norm_q.weight", "img_attn.norm.query_norm.scale"},
        {"attn.norm_k.weight", "img_attn.norm.key_norm.scale"},
        {"attn.norm_added_q.weight", "txt_attn.norm.query_norm.scale"},
        {"attn.norm_added_k.weight", "txt_attn.norm.key_norm.scale"}};
    static const std::map<std::string, std::pair<std::string, std::int64_t>> kQkv = {
        {"attn.to_q", {"img_attn.qkv", 0}},      {"attn.to_k", {"img_attn.qkv", 1}},
        {"attn.to_v", {"img_attn.qkv", 2}},      {"attn.add_q_proj", {"txt_attn.qkv", 0}},
        {"attn.add_k_proj", {"txt_attn.qkv", 1}}, {"attn.add_v_proj", {"txt_attn.qkv", 2}}};
    if (const auto it = kNorms.find(rest); it != kNorms.end()) return get(b + it->second);
    const std::string part = rest.substr(0, rest.rfind('.'));
    if (const auto it = kPlain.find(part); it != kPlain.end()) return get(b + it->second + "." + w);
    if (const auto it = kQkv.find(part); it != kQkv.end()) return chunk(b + it->second.first + "." + w, it->second.second, 3);
    return {};
  }
  if (block_part(name, "single_transformer_blocks.", i, rest)) {
    const std::string b = "single_blocks." + std::to_string(i) + ".";
    if (rest == "attn.norm_q.weight") return get(b + "norm.query_norm.scale");
    if (rest == "attn.norm_k.weight") return get(b + "norm.key_norm.scale");
    const std::string part = rest.substr(0, rest.rfind('.'));
    if (part == "norm.linear") return get(b + "modulation.lin." + w);
    if (part == "proj_out") return get(b + "linear2." + w);
    // linear1's rows: q, k, v (dim each), then the MLP's input (4·dim).
    if (part == "attn.to_q") return rows(b + "linear1." + w, 0, dim);
    if (part == "attn.to_k") return rows(b + "linear1." + w, dim, dim);
    if (part == "attn.to_v") return rows(b + "linear1." + w, 2 * dim, dim);
    if (part == "proj_mlp") return rows(b + "linear1." + w, 3 * dim, mlp);
    return {};
  }
  return {};
}

BflFile::BflFile(const std::string& path) : reader_(std::make_shared<io::SafetensorsReader>(path)) {
  for (const auto& e : reader_->entries()) names_.push_back(e.name);
  prefix_ = bfl_flux_prefix(names_, path);
}

const std::string& BflFile::path() const { return reader_->path(); }

FluxConfig BflFile::config() const {
  std::map<std::string, std::vector<std::int64_t>> shapes;
  for (const auto& e : reader_->entries()) shapes[e.name] = e.shape;
  return bfl_flux_config(names_, [&](const std::string& n) {
    const auto it = shapes.find(n);
    return it == shapes.end() ? std::vector<std::int64_t>{} : it->second;
  }, prefix_, path());
}

FluxConfig BflFile::config(const std::string& config_dir) const {
  if (!config_dir.empty()) {
    const std::string folder_config = config_dir + "/transformer/config.json";
    if (std::filesystem::exists(folder_config)) return FluxConfig::from_file(folder_config);
  }
  return config();
}

at::Tensor BflFile::tensor(const std::string& name, const FluxConfig& c) const {
  return bfl_flux_tensor(name, [this](const std::string& k) { return reader_->contains(k) ? reader_->weight(k) : at::Tensor(); },
                         c, prefix_, path());
}

std::vector<BflTensor> bfl_flux_layout(const FluxConfig& c) {
  // The diffusers parameters and their shapes, on meta tensors.
  std::vector<std::pair<std::string, std::vector<std::int64_t>>> params;
  {
    const MetaTensorScope meta;
    const FluxTransformer2DModel m(c);
    for (const auto& p : m->named_parameters()) params.emplace_back(p.key(), p.value().sizes().vec());
  }
  // Pass 1: which BFL key each parameter reads, and so how many rows each key has.
  std::map<std::string, std::int64_t> rows_of;
  std::map<std::string, std::string> key_of;
  for (const auto& [name, shape] : params) {
    std::string asked;
    bfl_flux_tensor(name, [&](const std::string& key) {
      asked = key;
      return at::Tensor();
    }, c, "");
    if (asked.empty())
      throw Error(ErrorKind::checkpoint, name + ": has no place in Black Forest Labs' Flux layout");
    key_of[name] = asked;
    rows_of[asked] += shape.at(0);
  }
  // Pass 2: the rows each parameter takes, read off a key whose rows are their own indices.
  std::map<std::string, BflTensor> out;
  for (const auto& [name, shape] : params) {
    const std::string& key = key_of.at(name);
    const at::Tensor rows = bfl_flux_tensor(name, [&](const std::string& k) {
      return at::arange(rows_of.at(k), at::kLong).to(at::kDouble);
    }, c, "").to(at::kLong);
    BflTensor& t = out[key];
    if (t.key.empty()) {
      t.key = key;
      t.shape = shape;
      t.shape[0] = rows_of.at(key);
    }
    t.parts.push_back({name, rows});
  }
  std::vector<BflTensor> sorted;
  for (auto& [key, t] : out) sorted.push_back(std::move(t));
  return sorted;
}

at::Tensor assemble_bfl_tensor(const BflTensor& t, const std::function<at::Tensor(const std::string&)>& read) {
  at::Tensor out = at::empty(t.shape, at::kFloat);
  for (const auto& part : t.parts) out.index_copy_(0, part.rows, read(part.name).to(at::kFloat));
  return out;
}

}  // namespace zs::models
