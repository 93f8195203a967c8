#include "models/export_sources.h"

#include <algorithm>
#include <filesystem>
#include <memory>
#include <set>

#include <ATen/ATen.h>
#include <torch/nn/module.h>

#include "checkpoint/checkpoint.h"
#include "checkpoint/export.h"
#include "checkpoint/sharded_state.h"
#include "core/error.h"
#include "core/text.h"
#include "io/safetensors.h"
#include "models/diffusers_folder.h"
#include "models/peft_lora_config.h"

namespace zs::checkpoint {

namespace fs = std::filesystem;

namespace {

constexpr const char* kDown = ".lora_down.weight";
constexpr const char* kUp = ".lora_up.weight";

bool is_adapter_name(const std::string& name) { return name.ends_with(kDown) || name.ends_with(kUp); }

}  // namespace

bool is_lora_checkpoint(const nlohmann::json& meta) { return meta.contains("lora"); }

/// `base` with each adapter's update added to the weight of its layer ("<path>.weight"), in
/// float32. Throws zs::Error(checkpoint) naming an adapter whose layer the base lacks.
ExportTensors merged(ExportTensors base, const ComponentAdapters& adapters, const std::string& component) {
  std::set<std::string> used;
  for (auto& t : base) {
    if (!t.name.ends_with(".weight")) continue;
    const auto it = adapters.find(t.name.substr(0, t.name.size() - 7));
    if (it == adapters.end()) continue;
    used.insert(it->first);
    t.read = [read = t.read, adapter = it->second, shape = t.shape] {
      return read().to(at::kFloat) + models::lora_delta(*adapter).to(at::kFloat).reshape(shape);
    };
  }
  for (const auto& [path, adapter] : adapters)
    if (!used.contains(path))
      throw Error(ErrorKind::checkpoint, component + ": the adapter of '" + path +
                                             "' has no weight in the base model to merge into (another base?)");
  return base;
}

std::int64_t stream_tensors(const ExportTensors& tensors, const std::string& path, const ExportOptions& o,
                            const std::map<std::string, std::string>& metadata, std::size_t& done, std::size_t total) {
  if (tensors.empty()) throw Error(ErrorKind::checkpoint, path + ": nothing to export");
  std::vector<io::SafetensorsStreamWriter::Entry> entries;
  for (const auto& e : tensors) entries.push_back({e.name, o.dtype.value_or(at::kFloat), e.shape});
  io::SafetensorsStreamWriter writer(path, entries, metadata);
  for (const auto& e : tensors) {
    writer.write(e.read().reshape(e.shape));
    ++done;
    if (o.progress) o.progress(done, total);
    if (o.cancelled && o.cancelled()) throw Error(ErrorKind::io, path + ": export cancelled");
  }
  writer.finish();
  return static_cast<std::int64_t>(fs::file_size(path));
}

void copy_pipeline_components(const std::string& source, const std::string& root, const std::string& skip,
                              const std::vector<std::string>& own) {
  fs::create_directories(root);
  for (const auto& entry : fs::directory_iterator(source)) {
    const std::string name = entry.path().filename().string();
    if (name == skip) continue;
    const fs::path to = fs::path(root) / name;
    if (entry.is_directory()) {
      fs::create_directories(to);
      fs::copy(entry.path(), to, fs::copy_options::recursive | fs::copy_options::overwrite_existing);
    } else {
      fs::copy_file(entry.path(), to, fs::copy_options::overwrite_existing);
    }
    if (std::find(own.begin(), own.end(), name) != own.end())  // its weights are written by the export; its config stays
      for (const auto& f : fs::directory_iterator(to))
        if (f.path().extension() != ".json" || f.path().filename().string().ends_with(".index.json")) fs::remove(f.path());
  }
}

ExportTensors file_tensors(const std::vector<std::string>& files) {
  ExportTensors out;
  for (const auto& f : files) {
    auto reader = std::make_shared<io::SafetensorsReader>(f);
    for (const auto& e : reader->entries()) out.push_back({e.name, e.shape, [reader, name = e.name] { return reader->tensor(name); }});
  }
  return out;
}

CheckpointAdapters read_checkpoint_adapters(const ShardReader& shards, const nlohmann::json& meta, const std::string& kind) {
  const double alpha = meta.contains("lora") ? meta["lora"].value("alpha", 0.0) : 0.0;
  CheckpointAdapters out;
  for (const auto& name : shards.parameter_names()) {
    if (!name.ends_with(kDown)) continue;
    const std::string stem = name.substr(0, name.size() - std::string(kDown).size());
    const auto dot = stem.find('.');
    auto a = std::make_shared<models::LoraAdapter>();
    a->down = shards.parameter(name, kind).to(at::kFloat);
    a->up = shards.parameter(stem + kUp, kind).to(at::kFloat);
    a->alpha = alpha > 0 ? alpha : static_cast<double>(a->down.size(0));
    out[stem.substr(0, dot)][stem.substr(dot + 1)] = std::move(a);
  }
  return out;
}

ExportTensors shard_tensors(const ShardReader& shards, const std::string& prefix, const std::string& kind) {
  std::map<std::string, std::vector<std::int64_t>> shapes;
  for (const auto& u : shards.units())
    for (const auto& p : u.params) shapes[p.name] = p.shape;
  ExportTensors out;
  for (const auto& name : shards.parameter_names())
    if (name.starts_with(prefix) && !is_adapter_name(name))
      out.push_back({name.substr(prefix.size()), shapes.at(name), [&shards, name, kind] { return shards.parameter(name, kind); }});
  return out;
}

ExportResult write_lora_tensors(const ExportTensors& tensors, const std::string& out, const ExportOptions& o,
                                const std::map<std::string, std::string>& metadata, std::string note) {
  ExportOptions half = o;
  if (!half.dtype) half.dtype = at::kHalf;
  if (std::filesystem::path(out).has_parent_path()) std::filesystem::create_directories(std::filesystem::path(out).parent_path());
  ExportResult r;
  std::size_t done = 0;
  r.bytes = stream_tensors(tensors, out, half, metadata, done, tensors.size());
  r.tensors = done;
  r.files.push_back(out);
  r.notes.push_back(std::move(note));
  return r;
}

ExportTensors peft_lora_tensors(const ComponentAdapters& layers, const std::string& prefix, const std::string& suffix) {
  ExportTensors tensors;
  for (const auto& [path, a] : layers) {
    const std::string stem = prefix + path;
    tensors.push_back({stem + ".lora_A" + suffix + ".weight", a->down.sizes().vec(), [a = a] { return a->down; }});
    tensors.push_back({stem + ".lora_B" + suffix + ".weight", a->up.sizes().vec(), [a = a] { return a->up * a->scale(); }});
  }
  return tensors;
}

std::map<std::string, std::string> peft_lora_header(const CheckpointAdapters& adapters) {
  std::vector<models::PeftLoraLayer> list;
  for (const auto& [component, layers] : adapters)
    for (const auto& [path, a] : layers) list.push_back({component, path, a->rank()});
  return models::peft_lora_metadata(list);
}

ExportTensors kohya_lora_tensors(const ComponentAdapters& layers, const std::string& prefix) {
  ExportTensors tensors;
  for (const auto& [path, a] : layers) {
    std::string stem = prefix + path;
    std::replace(stem.begin() + static_cast<std::ptrdiff_t>(prefix.size()), stem.end(), '.', '_');
    tensors.push_back({stem + ".lora_down.weight", a->down.sizes().vec(), [a = a] { return a->down; }});
    tensors.push_back({stem + ".lora_up.weight", a->up.sizes().vec(), [a = a] { return a->up; }});
    const at::Tensor alpha = at::scalar_tensor(a->alpha, at::kFloat);
    tensors.push_back({stem + ".alpha", {}, [alpha] { return alpha; }});
  }
  return tensors;
}

ExportResult export_tensors_file(const ExportTensors& tensors, const std::string& out, const ExportOptions& o,
                                 const std::map<std::string, std::string>& metadata, bool text_left_out) {
  ExportResult r;
  std::size_t done = 0;
  if (std::filesystem::path(out).has_parent_path()) std::filesystem::create_directories(std::filesystem::path(out).parent_path());
  r.bytes += stream_tensors(tensors, out, o, metadata, done, tensors.size());
  r.files.push_back(out);
  if (text_left_out) r.notes.push_back("the trained text encoder is not in this file: export --format diffusers for it");
  r.tensors = done;
  return r;
}

ExportResult export_transformer_folder(const std::string& source, const std::string& model_dir, const std::string& out,
                                       const ExportTensors& transformer, const ExportTensors& text,
                                       const ExportOptions& o, const std::map<std::string, std::string>& metadata) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::exists(out) && !fs::is_empty(out, ec))
    throw Error(ErrorKind::io, out + ": exists and is not empty; choose a new folder for the export");
  const fs::path root(out), model(model_dir);
  if (!source.empty()) {
    // Every untouched component (VAE, frozen text encoders, tokenizers, scheduler, model_index.json).
    copy_pipeline_components(source, out, "transformer",
                             text.empty() ? std::vector<std::string>{} : std::vector<std::string>{"text_encoder"});
  } else {
    for (const char* sub : {"text_encoder", "tokenizer", "scheduler"})
      if (fs::exists(model / sub)) {
        fs::create_directories(root / sub);
        fs::copy(model / sub, root / sub, fs::copy_options::recursive | fs::copy_options::overwrite_existing);
      }
    // The base encoder stays unless the run trained it (then the checkpoint's is written below).
    if (!text.empty() && fs::exists(root / "text_encoder" / "model.safetensors"))
      fs::remove(root / "text_encoder" / "model.safetensors");
  }
  fs::create_directories(root / "transformer");
  fs::copy_file(model / "transformer" / "config.json", root / "transformer" / "config.json",
                fs::copy_options::overwrite_existing, ec);
  if (ec) throw Error(ErrorKind::io, (model / "transformer" / "config.json").string() + ": cannot copy: " + ec.message());
  ExportResult r;
  std::size_t done = 0;
  const std::size_t total = transformer.size() + text.size();
  const std::string transformer_file = (root / "transformer" / "diffusion_pytorch_model.safetensors").string();
  r.bytes += stream_tensors(transformer, transformer_file, o, metadata, done, total);
  r.files.push_back(transformer_file);
  if (!text.empty()) {
    fs::create_directories(root / "text_encoder");
    const std::string file = (root / "text_encoder" / "model.safetensors").string();
    r.bytes += stream_tensors(text, file, o, metadata, done, total);
    r.files.push_back(file);
  }
  r.tensors = done;
  return r;
}

CheckpointExport::CheckpointExport(const CheckpointInfo& info, const ExportOptions& o)
    : path(info.path),
      meta(info.meta),
      shards(info.path, info.meta["sharding"]),
      kind(o.ema ? "ema" : "weights"),
      model_dir((std::filesystem::path(without_trailing_slash(info.path)).parent_path().parent_path() / "model").string()),
      lora(is_lora_checkpoint(info.meta)),
      merge(o.merge) {
  if (o.ema && !shards.has("ema"))
    throw Error(ErrorKind::checkpoint, path + ": has no EMA weights (the run had ema.enabled: false); drop --ema");
  metadata = {{"format", "pt"},
              {"producer", "zerostudio"},
              {"step", std::to_string(info.step)},
              {"config_hash", info.meta.value("config_hash", "")},
              {"weights", kind + (lora && o.merge ? "+merged lora" : "")}};
}

void CheckpointExport::require_lora(const std::string& full_formats) const {
  if (!lora)
    throw Error(ErrorKind::config, path + ": holds no LoRA adapters (the run trained the full model); export --format " +
                                       full_formats);
}

CheckpointAdapters CheckpointExport::lora_adapters(const std::string& full_formats) const {
  require_lora(full_formats);
  return read_checkpoint_adapters(shards, meta, kind);
}

CheckpointAdapters CheckpointExport::merged_adapters(const std::string& lora_formats) const {
  if (lora && !merge)
    throw Error(ErrorKind::config, path + ": holds LoRA adapters, not full weights; export --format " + lora_formats +
                                       " for the adapters, or add --merge for full weights with them merged");
  if (!lora && merge) throw Error(ErrorKind::config, path + ": holds no LoRA adapters to merge; drop --merge");
  return lora ? read_checkpoint_adapters(shards, meta, kind) : CheckpointAdapters{};
}

namespace {

/// The transformer's base weights: the preset's in the run's model folder, or the pipeline's files.
ExportTensors base_transformer(const fs::path& model_dir, const std::string& source) {
  if (!source.empty()) return file_tensors(models::component_weight_files((fs::path(source) / "transformer").string()));
  const fs::path file = model_dir / "transformer" / "diffusion_pytorch_model.safetensors";
  if (!fs::exists(file))
    throw Error(ErrorKind::checkpoint, model_dir.string() + ": holds no base weights (transformer/" +
                                           file.filename().string() + "); runs keep them there when their checkpoints need a base");
  return file_tensors({file.string()});
}

ExportResult write_lora_layout(const ComponentAdapters& layers, const LoraLayout& l, const std::string& out,
                               const ExportOptions& o, std::map<std::string, std::string> metadata) {
  if (l.tensors) return write_lora_tensors(l.tensors(layers), out, o, metadata, l.note);
  if (!l.kohya) {
    if (l.peft_header) metadata.merge(peft_lora_header({{"transformer", layers}}));  // as save_lora_weights writes it
    return write_lora_tensors(peft_lora_tensors(layers, l.prefix, l.suffix), out, o, metadata, l.note);
  }
  std::int64_t rank = 0;
  double alpha = 0;
  for (const auto& [path, a] : layers) {
    rank = std::max(rank, a->rank());
    alpha = a->alpha;
  }
  metadata["ss_network_module"] = l.kohya_module;
  metadata["ss_network_dim"] = std::to_string(rank);
  metadata["ss_network_alpha"] = python_float(alpha);
  return write_lora_tensors(kohya_lora_tensors(layers, l.prefix), out, o, metadata, l.note);
}

}  // namespace

ExportTensors single_file_tensors(std::vector<models::SingleFileTensor> layout, const ExportTensors& transformer,
                                  const std::string& model_dir) {
  auto by_name = std::make_shared<std::map<std::string, ExportTensor>>();
  for (const auto& t : transformer) (*by_name)[t.name] = t;
  ExportTensors out;
  for (auto& t : layout) {
    for (const auto& part : t.parts)
      if (!by_name->contains(part)) throw Error(ErrorKind::checkpoint, model_dir + ": the export has no transformer tensor " + part);
    auto shared = std::make_shared<models::SingleFileTensor>(std::move(t));
    out.push_back({shared->key, shared->shape, [shared, by_name] {
                     return models::assemble_single_file_tensor(*shared,
                                                                 [&](const std::string& n) { return by_name->at(n).read(); });
                   }});
  }
  return out;
}

ExportTensors mapped_tensors(const torch::nn::Module& skeleton, std::function<at::Tensor(const std::string&)> read,
                             const std::string& source) {
  auto shared = std::make_shared<std::function<at::Tensor(const std::string&)>>(std::move(read));
  ExportTensors out;
  for (const auto& p : skeleton.named_parameters())
    out.push_back({p.key(), p.value().sizes().vec(), [shared, source, name = p.key()] {
                     const at::Tensor t = (*shared)(name);
                     if (!t.defined()) throw Error(ErrorKind::checkpoint, source + ": has no tensor for " + name);
                     return t;
                   }});
  return out;
}

ExportResult export_transformer_checkpoint(const CheckpointInfo& info, const std::string& out, const ExportOptions& o,
                                           const TransformerExport& spec) {
  const CheckpointExport e(info, o);
  const fs::path model_dir(e.model_dir);
  std::string lora_names;
  const LoraLayout* layout = nullptr;
  for (const LoraLayout& l : spec.loras) {
    lora_names += (lora_names.empty() ? "" : ", ") + l.format;
    if (l.format == o.format) layout = &l;
  }
  if (layout) {
    const CheckpointAdapters adapters = e.lora_adapters("diffusers or safetensors");
    if (!adapters.contains("transformer"))
      throw Error(ErrorKind::checkpoint, e.path + ": holds no transformer adapters");
    return write_lora_layout(adapters.at("transformer"), *layout, out, o, e.metadata);
  }
  const bool single_file = o.format == "single-file" && spec.single_file;
  if (o.format != "safetensors" && o.format != "diffusers" && !single_file)
    throw Error(ErrorKind::config, "export format '" + o.format + "' does not exist for " + spec.family + " (diffusers, " +
                                       (spec.single_file ? "single-file, " : "") + "safetensors, " + lora_names + ")");
  const CheckpointAdapters adapters = e.merged_adapters(lora_names);
  const std::string source = spec.pipeline_of(model_dir.string());
  ExportTensors transformer;
  if (adapters.contains("transformer")) {
    ExportTensors base = spec.base_transformer ? spec.base_transformer(model_dir.string()) : ExportTensors{};
    if (base.empty()) base = base_transformer(model_dir, source);
    transformer = merged(std::move(base), adapters.at("transformer"), "transformer");
  } else {
    transformer = shard_tensors(e.shards, "transformer.", e.kind);
  }
  const ExportTensors text = shard_tensors(e.shards, "text_encoder.", e.kind);  // a tiny preset's, trained in full
  if (single_file)
    return export_tensors_file(spec.single_file(model_dir.string(), transformer), out, o, e.metadata, !text.empty());
  if (o.format == "safetensors") return export_tensors_file(transformer, out, o, e.metadata, !text.empty());
  return export_transformer_folder(source, model_dir.string(), out, transformer, text, o, e.metadata);
}

}  // namespace zs::checkpoint
