#include "models/sd/unet_config.h"

#include <algorithm>


#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/json_file.h"

namespace zs::models {
namespace {

using nlohmann::json;

[[noreturn]] void fail(const std::string& source, const std::string& key, const std::string& what) {
  throw Error(ErrorKind::config, source + ": " + key + ": " + what);
}

std::int64_t get_int(const json& j, const std::string& key, std::int64_t fallback, const std::string& source) {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  if (!j[key].is_number_integer()) fail(source, key, "expected an integer, got " + j[key].dump());
  return j[key].get<std::int64_t>();
}

/// An int or a list of ints, expanded to `n` entries.
std::vector<std::int64_t> get_int_list(const json& j, const std::string& key, std::vector<std::int64_t> fallback,
                                       std::size_t n, const std::string& source) {
  std::vector<std::int64_t> out;
  if (!j.contains(key) || j[key].is_null()) {
    out = std::move(fallback);
  } else if (j[key].is_number_integer()) {
    out.assign(n, j[key].get<std::int64_t>());
  } else if (j[key].is_array()) {
    for (const auto& v : j[key]) {
      if (!v.is_number_integer()) fail(source, key, "expected integers, got " + v.dump());
      out.push_back(v.get<std::int64_t>());
    }
  } else {
    fail(source, key, "expected an integer or a list of integers, got " + j[key].dump());
  }
  if (out.size() == 1 && n > 1) out.assign(n, out[0]);
  if (out.size() != n) fail(source, key, "needs " + std::to_string(n) + " entries (one per down block), has " +
                                             std::to_string(out.size()));
  return out;
}

std::vector<std::string> get_string_list(const json& j, const std::string& key, const std::string& source) {
  if (!j.contains(key) || !j[key].is_array()) fail(source, key, "expected a list of block type names");
  std::vector<std::string> out;
  for (const auto& v : j[key]) {
    if (!v.is_string()) fail(source, key, "expected strings, got " + v.dump());
    out.push_back(v.get<std::string>());
  }
  return out;
}

/// Keys whose non-default values this UNet does not implement yet.
void refuse_unsupported(const json& j, const std::string& source) {
  if (j.contains("addition_embed_type") && !j["addition_embed_type"].is_null() && j["addition_embed_type"] != "text_time")
    fail(source, "addition_embed_type", "value " + j["addition_embed_type"].dump() + " is not supported (only SDXL's \"text_time\")");
  const auto must_be_null = {"class_embed_type", "encoder_hid_dim", "time_cond_proj_dim",
                             "num_class_embeds", "time_embedding_dim", "timestep_post_act"};
  for (const char* key : must_be_null)
    if (j.contains(key) && !j[key].is_null())
      fail(source, key, "value " + j[key].dump() + " is not supported yet (SDXL-style added embeddings come "
                        "with real-model support); use a SD 1.x/2.x-shaped UNet");
  const auto must_be_false = {"dual_cross_attention", "upcast_attention", "only_cross_attention",
                              "center_input_sample", "resnet_skip_time_act"};
  for (const char* key : must_be_false)
    if (j.contains(key) && j[key].is_boolean() && j[key].get<bool>())
      fail(source, key, "true is not supported; this UNet implements the SD 1.x/2.x form");
  if (j.contains("act_fn") && j["act_fn"] != "silu") fail(source, "act_fn", "only \"silu\" is supported");
  if (j.contains("resnet_time_scale_shift") && j["resnet_time_scale_shift"] != "default")
    fail(source, "resnet_time_scale_shift", "only \"default\" is supported");
  if (j.contains("time_embedding_type") && j["time_embedding_type"] != "positional")
    fail(source, "time_embedding_type", "only \"positional\" is supported");
  for (const char* key : {"conv_in_kernel", "conv_out_kernel"})
    if (j.contains(key) && j[key] != 3) fail(source, key, "only 3 is supported");
  if (j.contains("mid_block_scale_factor") && j["mid_block_scale_factor"] != 1)
    fail(source, "mid_block_scale_factor", "only 1 is supported");
}

}  // namespace

UNetConfig UNetConfig::sd15() { return UNetConfig{}; }

UNetConfig UNetConfig::sdxl() {
  UNetConfig c;
  c.sample_size = 128;
  c.block_out_channels = {320, 640, 1280};
  c.down_block_types = {"DownBlock2D", "CrossAttnDownBlock2D", "CrossAttnDownBlock2D"};
  c.up_block_types = {"CrossAttnUpBlock2D", "CrossAttnUpBlock2D", "UpBlock2D"};
  c.num_attention_heads = {5, 10, 20};
  c.transformer_layers_per_block = {1, 2, 10};
  c.cross_attention_dim = 2048;
  c.use_linear_projection = true;
  c.addition_embed_type = "text_time";
  c.addition_time_embed_dim = 256;
  c.projection_class_embeddings_input_dim = 2816;
  return c;
}

UNetConfig UNetConfig::from_json(const json& j, const std::string& source) {
  if (!j.is_object()) throw Error(ErrorKind::config, source + ": expected a JSON object (diffusers unet/config.json)");
  refuse_unsupported(j, source);
  UNetConfig c;
  c.in_channels = get_int(j, "in_channels", c.in_channels, source);
  c.out_channels = get_int(j, "out_channels", c.out_channels, source);
  c.sample_size = get_int(j, "sample_size", c.sample_size, source);
  if (j.contains("block_out_channels")) c.block_out_channels = get_int_list(j, "block_out_channels", {}, j["block_out_channels"].size(), source);
  c.down_block_types = get_string_list(j, "down_block_types", source);
  c.up_block_types = get_string_list(j, "up_block_types", source);
  const std::size_t n = c.down_block_types.size();
  if (j.contains("mid_block_type")) c.mid_block_type = j["mid_block_type"].is_null() ? "" : j["mid_block_type"].get<std::string>();
  c.layers_per_block = get_int(j, "layers_per_block", c.layers_per_block, source);
  c.cross_attention_dim = get_int(j, "cross_attention_dim", c.cross_attention_dim, source);
  const char* heads_key = (j.contains("num_attention_heads") && !j["num_attention_heads"].is_null())
                              ? "num_attention_heads" : "attention_head_dim";
  c.num_attention_heads = get_int_list(j, heads_key, std::vector<std::int64_t>(n, 8), n, source);
  c.transformer_layers_per_block = get_int_list(j, "transformer_layers_per_block", std::vector<std::int64_t>(n, 1), n, source);
  c.norm_num_groups = get_int(j, "norm_num_groups", c.norm_num_groups, source);
  if (j.contains("norm_eps")) c.norm_eps = j["norm_eps"].get<double>();
  if (j.contains("use_linear_projection")) c.use_linear_projection = j["use_linear_projection"].get<bool>();
  if (j.contains("flip_sin_to_cos")) c.flip_sin_to_cos = j["flip_sin_to_cos"].get<bool>();
  c.freq_shift = get_int(j, "freq_shift", c.freq_shift, source);
  if (j.contains("addition_embed_type") && j["addition_embed_type"] == "text_time") {
    c.addition_embed_type = "text_time";
    c.addition_time_embed_dim = get_int(j, "addition_time_embed_dim", 256, source);
    c.projection_class_embeddings_input_dim = get_int(j, "projection_class_embeddings_input_dim", 0, source);
    if (c.projection_class_embeddings_input_dim <= 0)
      fail(source, "projection_class_embeddings_input_dim", "needed with addition_embed_type text_time (SDXL: 2816)");
  }
  c.validate(source);
  return c;
}

UNetConfig UNetConfig::from_file(const std::string& path) {
  const json j = io::read_json_file(path, "UNet config (expected diffusers' unet/config.json)");
  try {
    return from_json(j, path);
  } catch (const json::exception& e) {
    throw Error(ErrorKind::config, path + ": " + e.what());
  }
}

void UNetConfig::validate(const std::string& source) const {
  const std::size_t n = block_out_channels.size();
  if (n == 0) fail(source, "block_out_channels", "must not be empty");
  if (down_block_types.size() != n) fail(source, "down_block_types", "needs one entry per block_out_channels entry");
  if (up_block_types.size() != n) fail(source, "up_block_types", "needs one entry per block_out_channels entry");
  for (const auto& t : down_block_types)
    if (t != "CrossAttnDownBlock2D" && t != "DownBlock2D") fail(source, "down_block_types", "unsupported block \"" + t + "\"");
  for (const auto& t : up_block_types)
    if (t != "CrossAttnUpBlock2D" && t != "UpBlock2D") fail(source, "up_block_types", "unsupported block \"" + t + "\"");
  if (!mid_block_type.empty() && mid_block_type != "UNetMidBlock2DCrossAttn")
    fail(source, "mid_block_type", "unsupported block \"" + mid_block_type + "\"");
  if (num_attention_heads.size() != n) fail(source, "attention_head_dim", "needs one entry per block");
  if (transformer_layers_per_block.size() != n) fail(source, "transformer_layers_per_block", "needs one entry per block");
  if (layers_per_block < 1) fail(source, "layers_per_block", "must be at least 1");
  if (norm_num_groups < 1) fail(source, "norm_num_groups", "must be at least 1");
  for (std::size_t i = 0; i < n; ++i) {
    const auto c = block_out_channels[i];
    if (c % norm_num_groups != 0)
      fail(source, "block_out_channels", std::to_string(c) + " is not divisible by norm_num_groups " + std::to_string(norm_num_groups));
    if (num_attention_heads[i] < 1 || c % num_attention_heads[i] != 0)
      fail(source, "attention_head_dim", std::to_string(c) + " channels do not split into " +
                                             std::to_string(num_attention_heads[i]) + " heads");
  }
}

std::int64_t UNetConfig::downsample_factor() const {
  return std::int64_t{1} << (block_out_channels.size() - 1);
}

json UNetConfig::to_json() const {
  json j;
  j["_class_name"] = "UNet2DConditionModel";
  j["_diffusers_version"] = "0.25.0";
  j["act_fn"] = "silu";
  j["attention_head_dim"] = num_attention_heads;
  j["block_out_channels"] = block_out_channels;
  j["center_input_sample"] = false;
  j["cross_attention_dim"] = cross_attention_dim;
  j["down_block_types"] = down_block_types;
  j["downsample_padding"] = 1;
  j["flip_sin_to_cos"] = flip_sin_to_cos;
  j["freq_shift"] = freq_shift;
  j["in_channels"] = in_channels;
  j["layers_per_block"] = layers_per_block;
  j["mid_block_scale_factor"] = 1;
  j["mid_block_type"] = mid_block_type.empty() ? json(nullptr) : json(mid_block_type);
  j["norm_eps"] = norm_eps;
  j["norm_num_groups"] = norm_num_groups;
  j["out_channels"] = out_channels;
  j["sample_size"] = sample_size;
  j["transformer_layers_per_block"] = transformer_layers_per_block;
  j["up_block_types"] = up_block_types;
  j["use_linear_projection"] = use_linear_projection;
  if (!addition_embed_type.empty()) {
    j["addition_embed_type"] = addition_embed_type;
    j["addition_time_embed_dim"] = addition_time_embed_dim;
    j["projection_class_embeddings_input_dim"] = projection_class_embeddings_input_dim;
  }
  return j;
}

std::vector<UNetUnitPlan> UNetConfig::unit_plan() const {
  using Kind = UNetUnitPlan::Kind;
  std::vector<UNetUnitPlan> plan;
  const std::size_t n = block_out_channels.size();
  auto add = [&](const std::string& block, const std::string& part, Kind kind, std::int64_t in, std::int64_t out, int level,
                 std::size_t attention = 0, bool concat = false) {
    const std::string name = block + "." + part;
    if (kind != Kind::transformer) {
      plan.push_back({block, name, kind, in, out, level, attention, concat});
      return;
    }
    const std::int64_t depth = transformer_layers_per_block[attention];
    const std::int64_t pieces = split_transformer_blocks ? depth : 1;
    for (std::int64_t k = 0; k < pieces; ++k) {
      UNetUnitPlan u{block, k == 0 ? name : name + ".transformer_blocks." + std::to_string(k), kind, in, out, level, attention};
      u.block_begin = pieces == 1 ? 0 : k;
      u.block_end = pieces == 1 ? depth : k + 1;
      u.projects_in = k == 0;
      u.projects_out = k == pieces - 1;
      u.module = name;
      plan.push_back(std::move(u));
    }
  };
  std::int64_t out_ch = block_out_channels[0];
  for (std::size_t i = 0; i < n; ++i) {
    const std::int64_t in_ch = out_ch;
    out_ch = block_out_channels[i];
    const std::string block = "down_blocks." + std::to_string(i);
    const int level = static_cast<int>(i);
    for (std::int64_t j = 0; j < layers_per_block; ++j) {
      add(block, "resnets." + std::to_string(j), Kind::resnet, j == 0 ? in_ch : out_ch, out_ch, level);
      if (down_block_types[i] == "CrossAttnDownBlock2D")
        add(block, "attentions." + std::to_string(j), Kind::transformer, out_ch, out_ch, level, i);
    }
    if (i + 1 < n) add(block, "downsamplers.0", Kind::downsampler, out_ch, out_ch, level);
  }
  const int bottom = static_cast<int>(n) - 1;
  if (!mid_block_type.empty()) {
    const std::int64_t ch = block_out_channels.back();
    add("mid_block", "resnets.0", Kind::resnet, ch, ch, bottom);
    add("mid_block", "attentions.0", Kind::transformer, ch, ch, bottom, n - 1);
    add("mid_block", "resnets.1", Kind::resnet, ch, ch, bottom);
  }
  const std::vector<std::int64_t> rev(block_out_channels.rbegin(), block_out_channels.rend());
  out_ch = rev[0];
  for (std::size_t i = 0; i < n; ++i) {
    const std::int64_t prev_out = out_ch;
    out_ch = rev[i];
    const std::int64_t in_ch = rev[std::min(i + 1, n - 1)];
    const std::string block = "up_blocks." + std::to_string(i);
    const int level = bottom - static_cast<int>(i);
    const std::int64_t layers = layers_per_block + 1;
    for (std::int64_t j = 0; j < layers; ++j) {
      const std::int64_t skip = j == layers - 1 ? in_ch : out_ch;
      add(block, "resnets." + std::to_string(j), Kind::resnet, (j == 0 ? prev_out : out_ch) + skip, out_ch, level, 0, true);
      if (up_block_types[i] == "CrossAttnUpBlock2D")
        add(block, "attentions." + std::to_string(j), Kind::transformer, out_ch, out_ch, level, n - 1 - i);
    }
    if (i + 1 < n) add(block, "upsamplers.0", Kind::upsampler, out_ch, out_ch, level);
  }
  return plan;
}

}  // namespace zs::models
