#include "models/diffusers_folder.h"

#include <filesystem>
#include <map>
#include <memory>
#include <ostream>
#include <set>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/text.h"
#include "io/json_file.h"
#include "io/safetensors.h"
#include "models/weights.h"

namespace zs::models {

namespace fs = std::filesystem;

DiffusersFolder DiffusersFolder::open(const std::string& root) {
  DiffusersFolder p;
  p.root_ = root;
  const std::string index = (fs::path(root) / "model_index.json").string();
  if (!fs::exists(index))
    throw Error(ErrorKind::config, index + ": not found; a diffusers pipeline folder has model_index.json (" + root +
                                       " may be a single component or a single-file checkpoint)");
  const nlohmann::json j = io::read_json_file(index, "pipeline index");
  if (!j.is_object()) throw Error(ErrorKind::config, index + ": expected a JSON object");
  p.class_name_ = j.value("_class_name", std::string());
  for (const auto& [key, value] : j.items()) {
    if (key.starts_with("_") || !value.is_array() || value.size() != 2 || !value[0].is_string() || !value[1].is_string())
      continue;  // settings such as requires_safety_checker, and [null, null] components
    p.components_.push_back({key, value[0].get<std::string>(), value[1].get<std::string>()});
  }
  return p;
}

bool DiffusersFolder::has(const std::string& component) const {
  for (const auto& c : components_)
    if (c.name == component) return true;
  return false;
}

std::string DiffusersFolder::dir(const std::string& component) const { return (fs::path(root_) / component).string(); }

namespace {
/// The most shard files one index may name (real ones have a few dozen).
constexpr std::size_t kMaxShards = 10'000;
}  // namespace

std::vector<std::string> DiffusersFolder::weight_files(const std::string& component) const {
  return component_weight_files(dir(component));
}

std::vector<std::string> component_weight_files(const std::string& folder) {
  const fs::path d(folder);
  for (const char* base : {"diffusion_pytorch_model", "model"})
    for (const std::string variant : {"", ".fp16"}) {
      const fs::path single = d / (std::string(base) + variant + ".safetensors");
      if (fs::exists(single)) return {single.string()};
      const fs::path index = d / (std::string(base) + ".safetensors.index" + variant + ".json");
      if (fs::exists(index)) {
        const nlohmann::json j = io::read_json_file(index.string(), "weight index");
        if (!j.contains("weight_map") || !j["weight_map"].is_object())
          throw Error(ErrorKind::config, index.string() + ": weight_map: missing (expected tensor name -> shard file)");
        std::set<std::string> files;
        for (const auto& [name, file] : j["weight_map"].items()) {
          // A shard is a plain file name beside the index: nothing outside the folder is opened.
          if (!file.is_string())
            throw Error(ErrorKind::config, index.string() + ": weight_map: \"" + name + "\": expected a shard file name "
                                           "(a string), found " + file.dump());
          const std::string shard = file.get<std::string>();
          if (shard.empty() || shard == "." || shard == ".." || shard.find('/') != std::string::npos ||
              shard.find('\0') != std::string::npos || shard.size() > 255)
            throw Error(ErrorKind::config, index.string() + ": weight_map: \"" + name + "\": \"" + shard +
                                           "\" is not a plain file name in the index's folder; shards must lie beside it");
          files.insert((d / shard).string());
          if (files.size() > kMaxShards)
            throw Error(ErrorKind::config, index.string() + ": weight_map names more than " + std::to_string(kMaxShards) +
                                           " shard files, the most ZeroStudio accepts");
        }
        for (const auto& f : files)
          if (!fs::exists(f)) throw Error(ErrorKind::io, index.string() + ": names " + f + ", which is missing");
        return {files.begin(), files.end()};
      }
    }
  if (fs::exists(d / "diffusion_pytorch_model.bin") || fs::exists(d / "pytorch_model.bin"))
    throw Error(ErrorKind::config, d.string() + ": only PyTorch .bin weights found; ZeroStudio reads .safetensors "
                                                "(convert them, e.g. with diffusers' save_pretrained(safe_serialization=True))");
  throw Error(ErrorKind::config, d.string() + ": no weights (diffusion_pytorch_model.safetensors or model.safetensors, "
                                              "sharded or fp16)");
}

std::vector<std::string> describe_pipeline(std::ostream& out, const DiffusersFolder& p,
                                           const std::function<std::string(const PipelineComponent&)>& tokenizer_line) {
  out << p.root() << ": " << (p.class_name().empty() ? "pipeline" : p.class_name()) << "\n";
  std::vector<std::string> unreadable;
  for (const auto& c : p.components()) {
    out << "  " << c.name << "  " << c.library << "." << c.class_name;
    // Tokenizers and schedulers have no weights; every other component has.
    const bool weightless = c.class_name.find("Tokenizer") != std::string::npos ||
                            c.class_name.find("Scheduler") != std::string::npos ||
                            c.class_name.find("Processor") != std::string::npos;
    std::vector<std::string> files;
    std::int64_t params = 0, bytes = 0;
    std::map<std::string, std::int64_t> dtypes;
    try {
      // The component's own config parses (what loading it reads first).
      for (const char* name : {"config.json", "scheduler_config.json"})
        if (const fs::path config = fs::path(p.dir(c.name)) / name; fs::exists(config))
          (void)io::read_json_file(config.string(), c.name + " config");
      if (!weightless) files = p.weight_files(c.name);
      for (const auto& f : files) {
        const io::SafetensorsReader r(f);
        for (const auto& e : r.entries()) {
          params += e.numel();
          dtypes[e.dtype] += e.numel();
        }
        bytes += static_cast<std::int64_t>(fs::file_size(f));
      }
    } catch (const Error& e) {
      out << "  (unreadable: " << e.what() << ")\n";
      unreadable.push_back(c.name + ": " + e.what());
      continue;
    }
    if (!files.empty()) {
      out << "  " << params << " parameters  ";
      for (const auto& [d, n] : dtypes) {
        out << d;
        if (dtypes.size() > 1)
          out << '(' << n << ") ";
        else
          out << ' ';
      }
      out << format_bytes(bytes);
      if (files.size() > 1) out << " in " << files.size() << " shards";
    } else if (c.class_name.find("Tokenizer") != std::string::npos) {
      try {
        out << "  " << tokenizer_line(c);
      } catch (const Error& e) {
        out << "  (unreadable: " << e.what() << ")";
        unreadable.push_back(c.name + ": " + e.what());
      }
    }
    out << "\n";
  }
  return unreadable;
}

void fail_unreadable(const std::string& root, const std::vector<std::string>& unreadable) {
  if (unreadable.empty()) return;
  std::string list;
  for (const auto& u : unreadable) list += "\n  " + u;
  throw Error(ErrorKind::io, root + ": " + std::to_string(unreadable.size()) + " component" +
                                 (unreadable.size() == 1 ? "" : "s") + " could not be read:" + list);
}

AutoencoderKL DiffusersFolder::load_vae() const {
  AutoencoderKL vae(AutoencoderKLConfig::from_file((fs::path(dir("vae")) / "config.json").string()));
  const WeightFiles r(weight_files("vae"));
  load_vae_weights(*vae, r.view);
  return vae;
}

ClipTextModel DiffusersFolder::load_text_encoder(const std::string& component) const {
  ClipTextModel model(ClipTextConfig::from_file((fs::path(dir(component)) / "config.json").string()));
  const WeightFiles r(weight_files(component));
  // transformers 5 saves CLIPTextModel's tensors without the "text_model." its 4.x releases wrote.
  load_weights(*model, r.view, "", [](const std::string& name) -> std::vector<std::string> {
    if (name.rfind("text_model.", 0) == 0) return {name.substr(11)};
    return {};
  });
  return model;
}

ClipTokenizer DiffusersFolder::load_tokenizer(const std::string& component) const { return ClipTokenizer::load(dir(component)); }

}  // namespace zs::models
