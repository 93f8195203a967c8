#include "models/flux2/flux2_single_file.h"

#include <algorithm>
#include <tuple>

#include "core/error.h"
#include "core/meta_tensors.h"
#include "models/weights.h"

namespace zs::models {

namespace {

using Place = SingleFilePlace;

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

SingleFilePlace flux2_file_place(const std::string& name) { return file_place(name); }

std::optional<std::string> find_flux2_file_prefix(const std::vector<std::string>& names) {
  for (const std::string prefix : {"", "model.diffusion_model."})
    if (std::find(names.begin(), names.end(), prefix + "double_stream_modulation_img.lin.weight") != names.end())
      return prefix;
  return std::nullopt;
}

std::vector<SingleFileTensor> flux2_file_layout(const Flux2Config& c) {
  const MetaTensorScope meta;
  return single_file_layout(*Flux2Transformer2DModel(c), file_place, "FLUX.2");
}

Flux2File::Flux2File(const std::string& path)
    : file_(path, find_flux2_file_prefix,
            "not a FLUX.2 transformer in Black Forest Labs' layout (no double_stream_modulation_img.lin.weight); give "
            "BFL's flux-2-*.safetensors transformer file, or a diffusers folder") {}

Flux2Config Flux2File::config() const {
  auto dims = [&](const std::string& key, std::size_t rank) { return file_.dims(key, rank, "a FLUX.2 transformer"); };
  Flux2Config c;
  const auto img_in = dims("img_in.weight", 2), txt_in = dims("txt_in.weight", 2), time_in = dims("time_in.in_layer.weight", 2);
  const auto out = dims("final_layer.linear.weight", 2);
  c.num_layers = numbered_blocks(file_.names(), "double_blocks.");
  c.num_single_layers = numbered_blocks(file_.names(), "single_blocks.");
  const std::string block = c.num_layers > 0 ? "double_blocks.0.img_attn.norm.query_norm.scale" : "single_blocks.0.norm.query_norm.scale";
  const auto head = dims(block, 1);
  const std::int64_t inner = img_in[0];
  c.in_channels = img_in[1];
  c.out_channels = out[0];
  c.joint_attention_dim = txt_in[1];
  c.timestep_guidance_channels = time_in[1];
  c.guidance_embeds = file_.has("guidance_in.in_layer.weight");
  if (head[0] <= 0 || inner % head[0] != 0)
    throw Error(ErrorKind::config, path() + ": the width " + std::to_string(inner) + " is not a multiple of " + prefix() + block +
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
  if (const auto file = folder_transformer_config(config_dir)) return Flux2Config::from_file(*file);
  return config();
}

void Flux2File::check(const Flux2Config& c) const {
  file_.check(flux2_file_layout(c), "a FLUX.2 transformer with " + std::to_string(c.num_layers) + " double-stream and " +
                                        std::to_string(c.num_single_layers) + " single-stream blocks, " +
                                        std::to_string(c.inner_dim()) + " wide" +
                                        (c.guidance_embeds ? ", with the guidance embedding ([dev])," : ","));
}

at::Tensor Flux2File::tensor(const std::string& name, const Flux2Config& c) const {
  return file_.tensor(file_place(name), c.inner_dim());
}

}  // namespace zs::models
