#include "models/transformer_lora_file.h"

#include <algorithm>

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include "core/error.h"
#include "io/safetensors.h"
#include "models/lora.h"
#include "models/peft_lora_config.h"

namespace zs::models {

namespace {

bool strip_suffix(std::string& s, const std::string& suffix) {
  if (!s.ends_with(suffix)) return false;
  s.resize(s.size() - suffix.size());
  return true;
}

}  // namespace

std::map<std::string, FileAdapter> read_transformer_lora_file(const std::string& file, const std::vector<std::string>& layers,
                                                              const std::string& family) {
  const io::SafetensorsReader r(file);
  std::map<std::string, std::string> by_underscored;
  for (const auto& l : layers) {
    std::string u = l;
    std::replace(u.begin(), u.end(), '.', '_');
    by_underscored[u] = l;
  }
  const auto known = [&](const std::string& path) { return std::find(layers.begin(), layers.end(), path) != layers.end(); };
  auto foreign = [&](const std::string& key, const std::string& why) {
    return Error(ErrorKind::config, "lora.init_from: " + file + ": " + key + " " + why);
  };
  struct Parts {
    at::Tensor down, up;
    double alpha = -1;
  };
  std::map<std::string, Parts> found;
  for (const auto& e : r.entries()) {
    std::string k = e.name;
    for (const std::string prefix : {"diffusion_model.", "transformer."})
      if (k.starts_with(prefix)) k = k.substr(prefix.size());
    std::string path;
    enum { down, up, alpha } what;
    if (k.starts_with("lora_unet_")) {  // musubi-tuner / sd-scripts
      std::string stem = k.substr(10);
      if (strip_suffix(stem, ".lora_down.weight")) what = down;
      else if (strip_suffix(stem, ".lora_up.weight")) what = up;
      else if (strip_suffix(stem, ".alpha")) what = alpha;
      else throw foreign(e.name, "is not a LoRA tensor (lora_down, lora_up, alpha)");
      const auto it = by_underscored.find(stem);
      if (it == by_underscored.end())
        throw foreign(e.name, "names no layer of this " + family + " transformer that lora.targets adapts: a LoRA "
                              "for another model (Flux's lora_unet_double_blocks_*, SD's lora_unet_down_blocks_*), or "
                              "for other targets (set lora.targets to the file's)");
      path = it->second;
    } else {  // PEFT: diffusers, DiffSynth-Studio
      std::string stem = k;
      if (strip_suffix(stem, ".lora_A.default.weight") || strip_suffix(stem, ".lora_A.weight")) what = down;
      else if (strip_suffix(stem, ".lora_B.default.weight") || strip_suffix(stem, ".lora_B.weight")) what = up;
      else if (strip_suffix(stem, ".alpha")) what = alpha;
      else throw foreign(e.name, "is not a LoRA tensor in a layout ZeroStudio reads (PEFT's: diffusers', "
                                 "DiffSynth-Studio's, ai-toolkit's; musubi-tuner's)");
      if (!known(stem))
        throw foreign(e.name, "names no layer of this " + family + " transformer that lora.targets adapts: a LoRA "
                              "for another model (Flux's single_transformer_blocks, SD's unet), or for other targets "
                              "(set lora.targets to the file's)");
      path = stem;
    }
    Parts& p = found[path];
    const at::Tensor t = r.tensor(e.name).to(at::kFloat);
    // A matrix [rank, in] or [out, rank]; an alpha one number (issue 59 item 7: a 0-dimension
    // tensor was an "unexpected failure").
    if (what == alpha ? t.numel() != 1 : t.dim() != 2)
      throw foreign(e.name, "has " + std::to_string(t.dim()) + " dimensions and " + std::to_string(t.numel()) +
                                (what == alpha ? " values; an alpha is one number" : " values; a LoRA matrix has two dimensions"));
    if (what == down) p.down = t;
    else if (what == up) p.up = t;
    else p.alpha = t.item<double>();
  }
  // diffusers' own files carry PEFT's LoraConfig in the header (lora_alpha apart from r): the
  // scale its loader applies. Without it (or an .alpha per layer) a PEFT file means scale 1.
  const std::optional<PeftLoraConfig> peft = read_peft_lora_config(r, "transformer", "lora.init_from: " + file);
  std::map<std::string, FileAdapter> out;
  for (auto& [path, p] : found) {
    if (!p.down.defined() || !p.up.defined())
      throw Error(ErrorKind::config, "lora.init_from: " + file + ": the adapter of " + path + " lacks its " +
                                         (p.down.defined() ? "up (lora_B / lora_up)" : "down (lora_A / lora_down)") + " matrix");
    const double rank = static_cast<double>(p.down.size(0));
    if (peft && peft->r != rank)
      throw Error(ErrorKind::config, "lora.init_from: " + file + ": the adapter of " + path + " has rank " +
                                         std::to_string(p.down.size(0)) + ", the file's lora_adapter_metadata says r " +
                                         std::to_string(static_cast<std::int64_t>(peft->r)));
    out[path] = {p.down, p.up, p.alpha >= 0 ? p.alpha / rank : peft ? peft->scale() : 1.0};
  }
  return out;
}

std::size_t load_transformer_lora_file(torch::nn::Module& transformer, const std::string& path, const std::string& family) {
  std::vector<std::string> names;
  std::map<std::string, std::shared_ptr<LoraAdapter>> adapters;
  for (const LoraLayer& l : lora_layers(transformer)) {
    names.push_back(l.name);
    adapters[l.name] = l.adapter;
  }
  const std::map<std::string, FileAdapter> file = read_transformer_lora_file(path, names, family);
  c10::NoGradGuard no_grad;
  for (const auto& [name, f] : file) {
    LoraAdapter& a = *adapters.at(name);
    if (f.down.sizes() != a.down.sizes() || f.up.sizes() != a.up.sizes())
      throw Error(ErrorKind::config, "lora.init_from: " + path + ": the adapter of " + name + " has rank " +
                                         std::to_string(f.down.size(0)) + " and shape " + std::to_string(f.up.size(0)) + "×" +
                                         std::to_string(f.down.size(1)) + "; the run's is rank " +
                                         std::to_string(a.rank()) + ", " + std::to_string(a.up.size(0)) + "×" +
                                         std::to_string(a.down.size(1)) + " (set lora.rank to the file's)");
    a.down.copy_(f.down);
    a.up.copy_(f.up * (f.scale / a.scale()));
  }
  return file.size();
}

}  // namespace zs::models
