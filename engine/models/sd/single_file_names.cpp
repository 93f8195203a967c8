#include "models/sd/single_file_names.h"

#include <map>
#include <regex>
#include <set>

#include "core/error.h"

namespace zs::models {

namespace {

/// Inside a resnet: diffusers' layer names -> LDM's.
std::string resnet_part(const std::string& rest) {
  static const std::vector<std::pair<std::string, std::string>> names = {
      {"norm1.", "in_layers.0."},   {"conv1.", "in_layers.2."},  {"time_emb_proj.", "emb_layers.1."},
      {"norm2.", "out_layers.0."},  {"conv2.", "out_layers.3."}, {"conv_shortcut.", "skip_connection."}};
  for (const auto& [from, to] : names)
    if (rest.rfind(from, 0) == 0) return to + rest.substr(from.size());
  throw Error(ErrorKind::checkpoint, "resnet parameter '" + rest + "' has no place in the single-file layout");
}

}  // namespace

std::string single_file_unet_name(const std::string& n, int L, const std::set<int>& up_with_attention) {
  static const std::regex block(R"(^(down_blocks|up_blocks)\.(\d+)\.(resnets|attentions|downsamplers|upsamplers)\.(\d+)\.(.*)$)");
  static const std::regex mid(R"(^mid_block\.(resnets|attentions)\.(\d+)\.(.*)$)");
  static const std::map<std::string, std::string> top = {{"conv_in.", "input_blocks.0.0."},
                                                         {"time_embedding.linear_1.", "time_embed.0."},
                                                         {"time_embedding.linear_2.", "time_embed.2."},
                                                         {"add_embedding.linear_1.", "label_emb.0.0."},
                                                         {"add_embedding.linear_2.", "label_emb.0.2."},
                                                         {"conv_norm_out.", "out.0."},
                                                         {"conv_out.", "out.2."}};
  std::string ldm;
  std::smatch m;
  for (const auto& [from, to] : top)
    if (n.rfind(from, 0) == 0) ldm = to + n.substr(from.size());
  if (!ldm.empty()) {
  } else if (std::regex_match(n, m, block)) {
    const bool down = m[1] == "down_blocks";
    const int i = std::stoi(m[2]), j = std::stoi(m[4]);
    const std::string kind = m[3], rest = m[5];
    if (kind == "resnets") ldm = (down ? "input_blocks." + std::to_string(i * (L + 1) + j + 1)
                                       : "output_blocks." + std::to_string(i * (L + 1) + j)) + ".0." + resnet_part(rest);
    else if (kind == "attentions") ldm = (down ? "input_blocks." + std::to_string(i * (L + 1) + j + 1)
                                               : "output_blocks." + std::to_string(i * (L + 1) + j)) + ".1." + rest;
    else if (kind == "downsamplers" && rest.rfind("conv.", 0) == 0)
      ldm = "input_blocks." + std::to_string((i + 1) * (L + 1)) + ".0.op." + rest.substr(5);
    else if (kind == "upsamplers")
      ldm = "output_blocks." + std::to_string(i * (L + 1) + L) + "." + (up_with_attention.count(i) ? "2." : "1.") + rest;
  } else if (std::regex_match(n, m, mid)) {
    const std::string kind = m[1], rest = m[3];
    const int j = std::stoi(m[2]);
    if (kind == "attentions") ldm = "middle_block.1." + rest;
    else ldm = "middle_block." + std::to_string(j == 0 ? 0 : 2) + "." + resnet_part(rest);
  }
  if (ldm.empty()) throw Error(ErrorKind::checkpoint, "UNet parameter '" + n + "' has no place in the SD single-file layout");
  return ldm;
}

std::vector<std::pair<std::string, std::string>> single_file_unet_names(const std::vector<std::string>& diffusers_names,
                                                                       int L) {
  // Which up blocks have attention: their upsampler sits after the attention (index 2).
  std::set<int> up_with_attention;
  static const std::regex up_attn(R"(^up_blocks\.(\d+)\.attentions\.)");
  for (const auto& n : diffusers_names) {
    std::smatch m;
    if (std::regex_search(n, m, up_attn)) up_with_attention.insert(std::stoi(m[1]));
  }
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& n : diffusers_names) out.emplace_back(n, single_file_unet_name(n, L, up_with_attention));
  return out;
}

std::vector<OpenClipTensor> open_clip_text_names(const std::vector<std::string>& hf_names) {
  static const std::regex layer(R"(^text_model\.encoder\.layers\.(\d+)\.(.*)$)");
  static const std::map<std::string, std::string> top = {
      {"text_model.embeddings.token_embedding.weight", "token_embedding.weight"},
      {"text_model.embeddings.position_embedding.weight", "positional_embedding"},
      {"text_model.final_layer_norm.weight", "ln_final.weight"},
      {"text_model.final_layer_norm.bias", "ln_final.bias"}};
  static const std::vector<std::pair<std::string, std::string>> inside = {
      {"self_attn.out_proj.", "attn.out_proj."}, {"layer_norm1.", "ln_1."}, {"layer_norm2.", "ln_2."},
      {"mlp.fc1.", "mlp.c_fc."}, {"mlp.fc2.", "mlp.c_proj."}};
  const std::set<std::string> present(hf_names.begin(), hf_names.end());
  std::vector<OpenClipTensor> out;
  for (const auto& n : hf_names) {
    std::smatch m;
    if (const auto it = top.find(n); it != top.end()) {
      out.push_back({it->second, {n}});
    } else if (n == "text_projection.weight") {
      out.push_back({"text_projection", {n}, true});
    } else if (n == "text_model.embeddings.position_ids") {
      continue;  // a buffer of transformers' (0..76); OpenCLIP has none
    } else if (std::regex_match(n, m, layer)) {
      const std::string block = "transformer.resblocks." + m[1].str() + ".";
      const std::string rest = m[2];
      static const std::regex qkv(R"(^self_attn\.(q|k|v)_proj\.(weight|bias)$)");
      std::smatch a;
      if (std::regex_match(rest, a, qkv)) {
        if (a[1] != "q") continue;  // k and v join q's in_proj tensor
        const std::string base = "text_model.encoder.layers." + m[1].str() + ".self_attn.";
        OpenClipTensor t{block + "attn.in_proj_" + a[2].str(), {}};
        for (const char* part : {"q", "k", "v"}) {
          t.parts.push_back(base + part + "_proj." + a[2].str());
          if (!present.count(t.parts.back()))
            throw Error(ErrorKind::checkpoint, "text encoder 2: " + t.parts.back() + " is missing (OpenCLIP's in_proj needs q, k and v)");
        }
        out.push_back(std::move(t));
        continue;
      }
      std::string name;
      for (const auto& [from, to] : inside)
        if (rest.rfind(from, 0) == 0) name = block + to + rest.substr(from.size());
      if (name.empty()) throw Error(ErrorKind::checkpoint, "text encoder 2 parameter " + n + " has no place in OpenCLIP's layout");
      out.push_back({name, {n}});
    } else {
      throw Error(ErrorKind::checkpoint, "text encoder 2 parameter " + n + " has no place in OpenCLIP's layout");
    }
  }
  return out;
}

}  // namespace zs::models
