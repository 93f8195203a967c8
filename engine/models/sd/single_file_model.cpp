#include "models/sd/single_file_model.h"

#include <algorithm>
#include <filesystem>
#include <regex>
#include <set>

#include <ATen/ATen.h>

#include "core/error.h"
#include "io/safetensors.h"
#include "models/sd/single_file_names.h"
#include "models/weights.h"

namespace zs::models {

namespace fs = std::filesystem;

namespace {

/// The header's names and shapes, with the questions config inference asks of them.
struct Header {
  const std::map<std::string, std::vector<std::int64_t>>& shapes;
  std::string path;  ///< names the file in errors
  bool has(const std::string& name) const { return shapes.count(name) > 0; }
  bool has_prefix(const std::string& prefix) const {
    const auto it = shapes.lower_bound(prefix);
    return it != shapes.end() && it->first.rfind(prefix, 0) == 0;
  }
  const std::vector<std::int64_t>& shape(const std::string& name) const {
    const auto it = shapes.find(name);
    if (it == shapes.end())
      throw Error(ErrorKind::checkpoint, path + ": has no tensor " + name +
                                             " (expected a Stable Diffusion 1.x or SDXL single-file checkpoint)");
    return it->second;
  }
  /// The distinct values of the first capture group of `pattern` over all names, ascending.
  std::vector<std::int64_t> indices(const std::string& pattern) const {
    const std::regex re(pattern);
    std::set<std::int64_t> out;
    std::smatch m;
    for (const auto& [name, s] : shapes)
      if (std::regex_match(name, m, re)) out.insert(std::stoll(m[1]));
    return {out.begin(), out.end()};
  }
};

std::string escape(const std::string& prefix) { return std::regex_replace(prefix, std::regex(R"(\.)"), R"(\.)"); }

UNetConfig infer_unet(const Header& h, bool xl) {
  const std::string U = kSingleFileUNet;
  UNetConfig c = xl ? UNetConfig::sdxl() : UNetConfig::sd15();
  const auto& conv_in = h.shape(U + "input_blocks.0.0.weight");
  c.in_channels = conv_in[1];
  c.out_channels = h.shape(U + "out.2.weight")[0];
  const auto ops = h.indices("^" + escape(U) + R"(input_blocks\.(\d+)\.0\.op\.weight$)");
  const auto inputs = h.indices("^" + escape(U) + R"(input_blocks\.(\d+)\..*$)");
  const std::int64_t L = ops.empty() ? static_cast<std::int64_t>(inputs.size()) - 1 : ops.front() - 1;
  if (L < 1) throw Error(ErrorKind::checkpoint, h.path + ": cannot tell the UNet's layers per block from input_blocks");
  const std::size_t n = ops.size() + 1;
  c.layers_per_block = L;
  c.block_out_channels.assign(n, 0);
  c.down_block_types.assign(n, "DownBlock2D");
  c.up_block_types.assign(n, "UpBlock2D");
  c.transformer_layers_per_block.assign(n, 1);
  c.num_attention_heads.assign(n, 8);
  std::string first_attention;
  for (std::size_t i = 0; i < n; ++i) {
    const std::string block = U + "input_blocks." + std::to_string(static_cast<std::int64_t>(i) * (L + 1) + 1) + ".";
    c.block_out_channels[i] = h.shape(block + "0.out_layers.3.weight")[0];
    if (!h.has_prefix(block + "1.")) continue;
    c.down_block_types[i] = "CrossAttnDownBlock2D";
    c.up_block_types[n - 1 - i] = "CrossAttnUpBlock2D";
    c.transformer_layers_per_block[i] = static_cast<std::int64_t>(
        h.indices("^" + escape(block) + R"(1\.transformer_blocks\.(\d+)\..*$)").size());
    if (first_attention.empty()) first_attention = block + "1.";
  }
  c.mid_block_type = h.has_prefix(U + "middle_block.") ? "UNetMidBlock2DCrossAttn" : "";
  if (!c.mid_block_type.empty()) {
    const auto depth = static_cast<std::int64_t>(
        h.indices("^" + escape(U) + R"(middle_block\.1\.transformer_blocks\.(\d+)\..*$)").size());
    if (c.down_block_types[n - 1] == "CrossAttnDownBlock2D" && c.transformer_layers_per_block[n - 1] != depth)
      throw Error(ErrorKind::checkpoint, h.path + ": the mid block's transformer depth (" + std::to_string(depth) +
                                             ") differs from the last level's; give model.config_path a unet/config.json");
    c.transformer_layers_per_block[n - 1] = depth;
    if (first_attention.empty()) first_attention = U + "middle_block.1.";
  }
  if (first_attention.empty()) throw Error(ErrorKind::checkpoint, h.path + ": the UNet has no cross-attention");
  c.use_linear_projection = h.shape(first_attention + "proj_in.weight").size() == 2;
  c.cross_attention_dim = h.shape(first_attention + "transformer_blocks.0.attn2.to_k.weight")[1];
  // Stable Diffusion 1.x: 8 heads everywhere; SDXL (and 2.x): heads of 64 channels.
  for (std::size_t i = 0; i < n; ++i) c.num_attention_heads[i] = xl ? std::max<std::int64_t>(1, c.block_out_channels[i] / 64) : 8;
  if (h.has(U + "label_emb.0.0.weight")) {
    c.addition_embed_type = "text_time";
    c.projection_class_embeddings_input_dim = h.shape(U + "label_emb.0.0.weight")[1];
    // The input is the pooled text embedding and six sinusoid blocks of addition_time_embed_dim.
    const std::string proj = std::string(kSingleFileXLTextEncoder2) + "text_projection";
    const std::int64_t pooled = h.has(proj) ? h.shape(proj)[1] : 1280;
    c.addition_time_embed_dim = (c.projection_class_embeddings_input_dim - pooled) / 6;
  } else {
    c.addition_embed_type.clear();
    c.addition_time_embed_dim = 0;
    c.projection_class_embeddings_input_dim = 0;
  }
  c.sample_size = xl ? 128 : 64;
  return c;
}

AutoencoderKLConfig infer_vae(const Header& h, bool xl) {
  const std::string V = kSingleFileVae;
  AutoencoderKLConfig c;
  const auto levels = h.indices("^" + escape(V) + R"(encoder\.down\.(\d+)\.block\.0\.conv1\.weight$)");
  if (levels.empty()) h.shape(V + "encoder.down.0.block.0.conv1.weight");  // throws naming it
  c.block_out_channels.clear();
  for (auto i : levels) c.block_out_channels.push_back(h.shape(V + "encoder.down." + std::to_string(i) + ".block.0.conv1.weight")[0]);
  c.layers_per_block = static_cast<std::int64_t>(h.indices("^" + escape(V) + R"(encoder\.down\.0\.block\.(\d+)\.conv1\.weight$)").size());
  c.latent_channels = h.shape(V + "quant_conv.weight")[0] / 2;
  c.in_channels = h.shape(V + "encoder.conv_in.weight")[1];
  c.out_channels = h.shape(V + "decoder.conv_out.weight")[0];
  c.mid_block_add_attention = h.has_prefix(V + "encoder.mid.attn_1.");
  c.scaling_factor = xl ? 0.13025 : 0.18215;
  c.sample_size = xl ? 1024 : 512;
  return c;
}

/// A CLIP text tower's config from its tensors, under either naming: transformers' (`base` =
/// the prefix, with or without the `text_model.` level older versions lacked) or OpenCLIP's.
ClipTextConfig infer_text_encoder(const Header& h, const std::string& prefix, bool open_clip) {
  const std::string base = !open_clip && h.has_prefix(prefix + "text_model.") ? prefix + "text_model." : prefix;
  const std::string token = open_clip ? "token_embedding.weight" : "embeddings.token_embedding.weight";
  const std::string position = open_clip ? "positional_embedding" : "embeddings.position_embedding.weight";
  const std::string layers = open_clip ? "transformer.resblocks." : "encoder.layers.";
  const std::string fc1 = open_clip ? ".mlp.c_fc.weight" : ".mlp.fc1.weight";
  ClipTextConfig c;
  c.vocab_size = h.shape(base + token)[0];
  c.hidden_size = h.shape(base + token)[1];
  c.max_position_embeddings = h.shape(base + position)[0];
  c.num_hidden_layers = static_cast<std::int64_t>(h.indices("^" + escape(base + layers) + R"((\d+))" + escape(fc1) + "$").size());
  c.intermediate_size = h.shape(base + layers + "0" + fc1)[0];
  c.num_attention_heads = c.hidden_size / 64;
  // OpenAI's CLIP ViT-L/14 uses quick_gelu; OpenCLIP's ViT-bigG/14 (SDXL's second) gelu and a projection.
  c.hidden_act = open_clip ? "gelu" : "quick_gelu";
  if (open_clip) {
    c.with_projection = true;
    c.projection_dim = h.shape(base + "text_projection")[1];
  }
  return c;
}

/// The tensor under `name` if the file has it.
at::Tensor read_if(const io::SafetensorsReader& r, const std::string& name) { return r.contains(name) ? r.weight(name) : at::Tensor(); }

std::vector<std::string> parameter_names(const torch::nn::Module& m) {
  std::vector<std::string> out;
  for (const auto& p : m.named_parameters(true)) out.push_back(p.key());
  for (const auto& b : m.named_buffers(true)) out.push_back(b.key());
  return out;
}

}  // namespace

SingleFileInfo infer_single_file(const io::SafetensorsReader& reader) {
  std::map<std::string, std::vector<std::int64_t>> shapes;
  for (const auto& e : reader.entries()) shapes[e.name] = e.shape;
  return infer_single_file(shapes, reader.path());
}

SingleFileInfo infer_single_file(const std::map<std::string, std::vector<std::int64_t>>& shapes, const std::string& source) {
  const Header h{shapes, source};
  if (h.has_prefix("cond_stage_model.model."))
    throw Error(ErrorKind::checkpoint, source + ": a Stable Diffusion 2.x single file (OpenCLIP ViT-H text encoder); "
                                                       "ZeroStudio reads SD 1.x and SDXL single files; convert it to a "
                                                       "diffusers folder and set model.path to that");
  if (!h.has_prefix(kSingleFileUNet))
    throw Error(ErrorKind::checkpoint, source + ": has no model.diffusion_model.* tensors; not a Stable Diffusion "
                                                       "single-file checkpoint (a diffusers folder has model_index.json)");
  SingleFileInfo info;
  const bool xl = h.has_prefix(kSingleFileXLTextEncoder2);
  info.family = xl ? "sdxl" : "sd1";
  if (!xl && !h.has_prefix(kSingleFileTextEncoder))
    throw Error(ErrorKind::checkpoint, source + ": has no text encoder (cond_stage_model.transformer.* or "
                                                       "conditioner.embedders.*); ZeroStudio needs the whole checkpoint");
  info.unet = infer_unet(h, xl);
  info.vae = infer_vae(h, xl);
  info.text_encoder = infer_text_encoder(h, xl ? kSingleFileXLTextEncoder : kSingleFileTextEncoder, false);
  if (xl) info.text_encoder_2 = infer_text_encoder(h, kSingleFileXLTextEncoder2, true);
  for (const char* part : {"unet", "vae", "text_encoder"}) info.config_sources[part] = "inferred from shapes";
  if (xl) info.config_sources["text_encoder_2"] = "inferred from shapes";
  return info;
}

SingleFileModel SingleFileModel::open(const std::string& path, const std::string& config_path) {
  if (fs::path(path).extension() != ".safetensors")
    throw Error(ErrorKind::config, path + ": only .safetensors single files are read (a .ckpt is a Python pickle, "
                                          "which can run code; convert it to .safetensors first)");
  SingleFileModel m;
  m.path_ = path;
  m.config_path_ = config_path;
  m.reader_ = std::make_unique<io::SafetensorsReader>(path);
  m.info_ = infer_single_file(*m.reader_);
  if (!config_path.empty()) {
    if (!fs::is_directory(config_path))
      throw Error(ErrorKind::config, "model.config_path: " + config_path + " is not a folder (give a diffusers folder of the "
                                                                           "same family, or one with vocab.json and merges.txt)");
    // A companion diffusers folder's configs replace the inferred ones where it has them.
    const fs::path root(config_path);
    auto from = [&](const std::string& part) -> std::string {
      const fs::path f = root / part / "config.json";
      if (!fs::exists(f)) return {};
      m.info_.config_sources[part] = f.string();
      return f.string();
    };
    if (const auto f = from("unet"); !f.empty()) m.info_.unet = UNetConfig::from_file(f);
    if (const auto f = from("vae"); !f.empty()) m.info_.vae = AutoencoderKLConfig::from_file(f);
    if (const auto f = from("text_encoder"); !f.empty()) m.info_.text_encoder = ClipTextConfig::from_file(f);
    if (m.info_.family == "sdxl")
      if (const auto f = from("text_encoder_2"); !f.empty()) m.info_.text_encoder_2 = ClipTextConfig::from_file(f);
  }
  return m;
}

SingleFileModel::~SingleFileModel() = default;
SingleFileModel::SingleFileModel(SingleFileModel&&) noexcept = default;

bool SingleFileModel::has(const std::string& component) const {
  static const std::set<std::string> always = {"unet", "vae", "text_encoder", "tokenizer", "scheduler"};
  return always.count(component) || (info_.family == "sdxl" && (component == "text_encoder_2" || component == "tokenizer_2"));
}

TensorLookup SingleFileModel::unet_weights() const {
  std::set<int> up_with_attention;
  for (std::size_t i = 0; i < info_.unet.up_block_types.size(); ++i)
    if (info_.unet.up_block_types[i] == "CrossAttnUpBlock2D") up_with_attention.insert(static_cast<int>(i));
  const int L = static_cast<int>(info_.unet.layers_per_block);
  return [this, L, up_with_attention, requested = requested_](const std::string& name) {
    const std::string key = kSingleFileUNet + single_file_unet_name(name, L, up_with_attention);
    requested->insert(key);
    return read_if(*reader_, key);
  };
}

UNet2DConditionModel SingleFileModel::load_unet(const UnitBuilt& on_unit) const {
  requested_->clear();
  UNet2DConditionModel unet = ModelSource::load_unet(on_unit);
  std::vector<std::string> extra;
  for (const auto& e : reader_->entries())
    if (e.name.rfind(kSingleFileUNet, 0) == 0 && !requested_->count(e.name)) extra.push_back(e.name);
  if (!extra.empty())
    throw Error(ErrorKind::checkpoint, path_ + ": the UNet has " + std::to_string(extra.size()) + " tensors this architecture "
                                               "has no place for, e.g. " + extra.front() +
                                               " (an inpainting, ControlNet-merged or otherwise modified UNet?)");
  return unet;
}

AutoencoderKL SingleFileModel::load_vae() const {
  AutoencoderKL vae(info_.vae);
  std::map<std::string, std::string> ldm;
  for (auto& [d, l] : single_file_vae_names(parameter_names(*vae), static_cast<int>(info_.vae.block_out_channels.size())))
    ldm[d] = kSingleFileVae + l;
  load_weights(*vae, [&](const std::string& n) { return read_if(*reader_, ldm.at(n)); }, path_ + " (VAE)");
  return vae;
}

ClipTextModel SingleFileModel::load_text_encoder(const std::string& component) const {
  if (component == "text_encoder") {
    ClipTextModel model(info_.text_encoder);
    const std::string prefix = info_.family == "sdxl" ? kSingleFileXLTextEncoder : kSingleFileTextEncoder;
    load_weights(*model, [&](const std::string& n) {
      if (const auto t = read_if(*reader_, prefix + n); t.defined()) return t;
      // Files saved with older transformers have no "text_model." level.
      return n.rfind("text_model.", 0) == 0 ? read_if(*reader_, prefix + n.substr(11)) : at::Tensor();
    }, path_ + " (text encoder)");
    return model;
  }
  if (component != "text_encoder_2" || info_.family != "sdxl")
    throw Error(ErrorKind::config, path_ + ": has no " + component);
  ClipTextModel model(info_.text_encoder_2);
  // OpenCLIP: q, k, v fused into in_proj; the projection stored transposed.
  std::map<std::string, std::pair<OpenClipTensor, std::size_t>> from;
  for (const auto& t : open_clip_text_names(parameter_names(*model)))
    for (std::size_t i = 0; i < t.parts.size(); ++i) from[t.parts[i]] = {t, i};
  load_weights(*model, [&](const std::string& n) {
    const auto it = from.find(n);
    if (it == from.end()) return at::Tensor();
    const auto& [t, part] = it->second;
    at::Tensor x = read_if(*reader_, kSingleFileXLTextEncoder2 + t.name);
    if (!x.defined()) return x;
    if (t.parts.size() > 1) {
      // q, k and v fused: checked whole against the model before the cut.
      const auto parts = static_cast<std::int64_t>(t.parts.size());
      x = fused_rows(x, parts, static_cast<std::int64_t>(part), model->named_parameters()[n].size(0),
                     kSingleFileXLTextEncoder2 + t.name, path_);
    }
    return t.transposed ? x.t().contiguous() : x;
  }, path_ + " (text encoder 2)");
  return model;
}

std::string companion_tokenizer_dir(const std::string& config_path, const std::string& component) {
  const fs::path root(config_path);
  for (const fs::path& dir : {root / component, root / "tokenizer", root})
    if (fs::exists(dir / "vocab.json")) return dir.string();
  throw Error(ErrorKind::config, "model.config_path: " + config_path + " has neither " + component +
                                     "/vocab.json nor vocab.json (the CLIP tokenizer files)");
}

ClipTokenizer SingleFileModel::load_tokenizer(const std::string& component) const {
  if (config_path_.empty())
    throw Error(ErrorKind::config, path_ + ": a single-file checkpoint carries no tokenizer; set model.config_path to a "
                                           "diffusers folder of the same family (its tokenizer/ is used; every SD 1.x and "
                                           "SDXL model shares CLIP's vocabulary) or to a folder with vocab.json and merges.txt");
  const std::string dir = companion_tokenizer_dir(config_path_, component);
  ClipTokenizer t = ClipTokenizer::load(dir);
  if (component == "tokenizer_2" && fs::path(dir) != fs::path(config_path_) / component) t.set_pad_id(0);  // "!"
  return t;
}

diffusion::ScheduleConfig SingleFileModel::load_scheduler() const {
  const fs::path f = fs::path(config_path_) / "scheduler" / "scheduler_config.json";
  if (!config_path_.empty() && fs::exists(f)) return diffusion::ScheduleConfig::from_file(f.string());
  return {};  // Stable Diffusion's: scaled_linear 0.00085–0.012 over 1000 steps
}

std::map<std::string, std::int64_t> SingleFileModel::parameter_counts() const {
  std::map<std::string, std::int64_t> out;
  const std::vector<std::pair<std::string, std::string>> prefixes = {
      {kSingleFileUNet, "unet"}, {kSingleFileVae, "vae"}, {kSingleFileTextEncoder, "text_encoder"},
      {kSingleFileXLTextEncoder, "text_encoder"}, {kSingleFileXLTextEncoder2, "text_encoder_2"}};
  for (const auto& e : reader_->entries())
    for (const auto& [prefix, part] : prefixes)
      if (e.name.rfind(prefix, 0) == 0 && e.name.find("position_ids") == std::string::npos && !e.name.ends_with("logit_scale"))
        out[part] += e.numel();
  return out;
}

}  // namespace zs::models
