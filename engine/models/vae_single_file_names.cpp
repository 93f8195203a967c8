#include "models/vae_single_file_names.h"

#include <regex>

#include "core/error.h"

namespace zs::models {

std::vector<std::pair<std::string, std::string>> single_file_vae_names(const std::vector<std::string>& diffusers_names,
                                                                      int num_blocks) {
  static const std::regex down_res(R"(^encoder\.down_blocks\.(\d+)\.resnets\.(\d+)\.(.*)$)");
  static const std::regex down_smp(R"(^encoder\.down_blocks\.(\d+)\.downsamplers\.0\.conv\.(.*)$)");
  static const std::regex up_res(R"(^decoder\.up_blocks\.(\d+)\.resnets\.(\d+)\.(.*)$)");
  static const std::regex up_smp(R"(^decoder\.up_blocks\.(\d+)\.upsamplers\.0\.conv\.(.*)$)");
  static const std::regex mid_res(R"(^(encoder|decoder)\.mid_block\.resnets\.(\d)\.(.*)$)");
  static const std::regex mid_attn(R"(^(encoder|decoder)\.mid_block\.attentions\.0\.(group_norm|to_q|to_k|to_v|to_out\.0)\.(weight|bias)$)");
  static const std::map<std::string, std::string> attn = {
      {"group_norm", "norm"}, {"to_q", "q"}, {"to_k", "k"}, {"to_v", "v"}, {"to_out.0", "proj_out"}};
  auto resnet_part = [](std::string rest) {
    if (rest.rfind("conv_shortcut.", 0) == 0) rest = "nin_shortcut." + rest.substr(14);
    return rest;
  };
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& n : diffusers_names) {
    std::smatch m;
    std::string ldm;
    if (std::regex_match(n, m, down_res)) {
      ldm = "encoder.down." + m[1].str() + ".block." + m[2].str() + "." + resnet_part(m[3]);
    } else if (std::regex_match(n, m, down_smp)) {
      ldm = "encoder.down." + m[1].str() + ".downsample.conv." + m[2].str();
    } else if (std::regex_match(n, m, up_res)) {
      ldm = "decoder.up." + std::to_string(num_blocks - 1 - std::stoi(m[1])) + ".block." + m[2].str() + "." + resnet_part(m[3]);
    } else if (std::regex_match(n, m, up_smp)) {
      ldm = "decoder.up." + std::to_string(num_blocks - 1 - std::stoi(m[1])) + ".upsample.conv." + m[2].str();
    } else if (std::regex_match(n, m, mid_res)) {
      ldm = m[1].str() + ".mid.block_" + std::to_string(std::stoi(m[2]) + 1) + "." + resnet_part(m[3]);
    } else if (std::regex_match(n, m, mid_attn)) {
      ldm = m[1].str() + ".mid.attn_1." + attn.at(m[2].str()) + "." + m[3].str();
    } else if (n.rfind("encoder.conv_norm_out.", 0) == 0 || n.rfind("decoder.conv_norm_out.", 0) == 0) {
      ldm = n.substr(0, 8) + "norm_out." + n.substr(n.rfind('.') + 1);
    } else if (n.rfind("encoder.conv_in.", 0) == 0 || n.rfind("encoder.conv_out.", 0) == 0 ||
               n.rfind("decoder.conv_in.", 0) == 0 || n.rfind("decoder.conv_out.", 0) == 0 ||
               n.rfind("quant_conv.", 0) == 0 || n.rfind("post_quant_conv.", 0) == 0) {
      ldm = n;
    } else {
      throw Error(ErrorKind::checkpoint, "VAE parameter " + n + " has no place in the single-file layout");
    }
    out.emplace_back(n, ldm);
  }
  return out;
}

bool single_file_vae_is_conv(const std::string& ldm_name) {
  static const std::regex conv(R"(^(encoder|decoder)\.mid\.attn_1\.(q|k|v|proj_out)\.weight$)");
  return std::regex_match(ldm_name, conv);
}

}  // namespace zs::models
