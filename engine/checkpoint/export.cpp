#include "checkpoint/export.h"

#include <filesystem>
#include <functional>
#include <memory>

#include <ATen/ATen.h>

#include "checkpoint/checkpoint.h"
#include "checkpoint/sharded_state.h"
#include "checkpoint/single_file_names.h"
#include "core/error.h"
#include "io/safetensors.h"
#include "models/unet_config.h"
#include "models/diffusers_pipeline.h"
#include "models/diffusion_model.h"
#include "models/autoencoder_kl.h"

namespace zs::checkpoint {

namespace fs = std::filesystem;

namespace {

/// (name in the checkpoint, name in the output file) for the parameters starting with `prefix`.
using Renames = std::vector<std::pair<std::string, std::string>>;

Renames strip_prefix(const ShardReader& shards, const std::string& prefix, const std::string& new_prefix = "") {
  Renames out;
  for (const auto& name : shards.parameter_names())
    if (name.rfind(prefix, 0) == 0) out.emplace_back(name, new_prefix + name.substr(prefix.size()));
  return out;
}

/// A tensor from elsewhere (an untouched pipeline component), read when its turn comes.
struct Extra {
  std::string name;
  std::vector<std::int64_t> shape;
  std::function<at::Tensor()> read;
};

/// Streams `renames` (then `extras`) into `path`, one consolidated tensor at a time.
std::int64_t stream_tensors(const ShardReader& shards, const Renames& renames, const std::string& kind,
                            const std::string& path, const ExportOptions& o,
                            const std::map<std::string, std::string>& metadata, std::size_t& done, std::size_t total,
                            const std::vector<Extra>& extras = {}) {
  if (renames.empty()) throw Error(ErrorKind::checkpoint, path + ": nothing to export");
  std::map<std::string, std::vector<std::int64_t>> shapes;
  for (const auto& u : shards.units())
    for (const auto& p : u.params) shapes[p.name] = p.shape;
  std::vector<io::SafetensorsStreamWriter::Entry> entries;
  for (const auto& [from, to] : renames) entries.push_back({to, o.dtype.value_or(at::kFloat), shapes.at(from)});
  for (const auto& e : extras) entries.push_back({e.name, o.dtype.value_or(at::kFloat), e.shape});
  io::SafetensorsStreamWriter writer(path, entries, metadata);
  for (const auto& [from, to] : renames) {
    writer.write(shards.parameter(from, kind));
    ++done;
    if (o.progress) o.progress(done, total);
  }
  for (const auto& e : extras) {
    writer.write(e.read().reshape(e.shape));
    ++done;
    if (o.progress) o.progress(done, total);
  }
  writer.finish();
  return static_cast<std::int64_t>(fs::file_size(path));
}

void copy_folder(const fs::path& from, const fs::path& to) {
  std::error_code ec;
  if (!fs::exists(from)) return;
  fs::create_directories(to, ec);
  fs::copy(from, to, fs::copy_options::recursive | fs::copy_options::overwrite_existing, ec);
  if (ec) throw Error(ErrorKind::io, to.string() + ": cannot copy " + from.string() + ": " + ec.message());
}

}  // namespace

ExportResult export_checkpoint(const std::string& checkpoint, const std::string& out, const ExportOptions& o) {
  const CheckpointInfo info = open_checkpoint(checkpoint);
  if (!info.meta.contains("sharding"))
    throw Error(ErrorKind::checkpoint, checkpoint + ": saved by an older ZeroStudio (version 1); export reads version 2");
  const ShardReader shards(checkpoint, info.meta["sharding"]);
  const std::string kind = o.ema ? "ema" : "weights";
  if (o.ema && !shards.has("ema"))
    throw Error(ErrorKind::checkpoint, checkpoint + ": has no EMA weights (the run had ema.enabled: false); drop --ema");
  std::size_t total = 0, done = 0;
  for (const auto& u : shards.units()) total += u.params.size();
  const std::map<std::string, std::string> metadata = {{"format", "pt"},
                                                      {"producer", "zerostudio"},
                                                      {"step", std::to_string(info.step)},
                                                      {"config_hash", info.meta.value("config_hash", "")},
                                                      {"weights", kind}};
  ExportResult r;
  const fs::path model_dir = fs::path(checkpoint).parent_path().parent_path() / "model";
  if (o.format == "safetensors" || o.format == "single-file") {
    if (fs::path(out).has_parent_path()) fs::create_directories(fs::path(out).parent_path());
    Renames renames;
    if (o.format == "safetensors") {
      renames = strip_prefix(shards, "unet.");
    } else {
      // The original SD layout: UNet blocks renumbered, the text encoder under cond_stage_model.
      const auto unet_config = models::UNetConfig::from_file((model_dir / "unet" / "config.json").string());
      const Renames unet = strip_prefix(shards, "unet.");
      std::vector<std::string> names;
      for (const auto& [from, to] : unet) names.push_back(to);
      const auto ldm = single_file_unet_names(names, static_cast<int>(unet_config.layers_per_block));
      for (std::size_t i = 0; i < unet.size(); ++i) renames.emplace_back(unet[i].first, kSingleFileUNet + ldm[i].second);
      for (auto& r : strip_prefix(shards, "text_encoder.", kSingleFileTextEncoder)) renames.push_back(r);
    }
    // A run trained from a pipeline: the untouched VAE and text encoder join the file from there.
    std::vector<std::unique_ptr<io::SafetensorsReader>> sources;
    std::vector<Extra> extras;
    const std::string source = o.format == "single-file" ? models::DiffusionModel::pipeline_of(model_dir.string()) : "";
    if (!source.empty()) {
      const auto pipeline = models::DiffusersPipeline::open(source);
      const auto vae_config = models::AutoencoderKLConfig::from_file(pipeline.dir("vae") + "/config.json");
      for (const auto& file : pipeline.weight_files("vae")) {
        sources.push_back(std::make_unique<io::SafetensorsReader>(file));
        const io::SafetensorsReader* reader = sources.back().get();
        std::vector<std::string> names;
        for (const auto& e : reader->entries()) names.push_back(e.name);
        // The pairs come in the order of `names`, so entry i gives pair i its shape.
        const auto ldm = single_file_vae_names(names, static_cast<int>(vae_config.block_out_channels.size()));
        for (std::size_t i = 0; i < ldm.size(); ++i) {
          std::vector<std::int64_t> shape = reader->entries()[i].shape;
          if (single_file_vae_is_conv(ldm[i].second) && shape.size() == 2) shape = {shape[0], shape[1], 1, 1};
          extras.push_back({kSingleFileVae + ldm[i].second, shape, [reader, from = ldm[i].first] { return reader->tensor(from); }});
        }
      }
      for (const auto& file : pipeline.weight_files("text_encoder")) {
        sources.push_back(std::make_unique<io::SafetensorsReader>(file));
        const io::SafetensorsReader* reader = sources.back().get();
        for (const auto& e : reader->entries())
          extras.push_back({kSingleFileTextEncoder + e.name, e.shape, [reader, name = e.name] { return reader->tensor(name); }});
      }
    }
    r.bytes += stream_tensors(shards, renames, kind, out, o, metadata, done, renames.size() + extras.size(), extras);
    r.files.push_back(out);
  } else if (o.format == "diffusers") {
    std::error_code ec;
    if (fs::exists(out) && !fs::is_empty(out, ec))
      throw Error(ErrorKind::io, out + ": exists and is not empty; choose a new folder for the export");
    const fs::path root(out);
    const std::string source = models::DiffusionModel::pipeline_of(model_dir.string());
    if (!source.empty()) {
      // Trained from a diffusers pipeline: every untouched component (VAE, text encoder,
      // tokenizer, scheduler, model_index.json, …) comes from it, beside the trained UNet.
      fs::create_directories(root);
      for (const auto& entry : fs::directory_iterator(source)) {
        if (entry.path().filename() == "unet") continue;
        if (entry.is_directory()) copy_folder(entry.path(), root / entry.path().filename());
        else fs::copy_file(entry.path(), root / entry.path().filename(), fs::copy_options::overwrite_existing);
      }
    }
    fs::create_directories(root / "unet");
    fs::copy_file(model_dir / "unet" / "config.json", root / "unet" / "config.json", fs::copy_options::overwrite_existing, ec);
    if (ec) throw Error(ErrorKind::io, (model_dir / "unet" / "config.json").string() + ": cannot copy: " + ec.message());
    const std::string unet_file = (root / "unet" / "diffusion_pytorch_model.safetensors").string();
    r.bytes += stream_tensors(shards, strip_prefix(shards, "unet."), kind, unet_file, o, metadata, done, total);
    r.files = {unet_file};
    if (source.empty()) {
      // A preset model: its trained text encoder and the run's scheduler and tokenizer.
      fs::create_directories(root / "text_encoder");
      fs::copy_file(model_dir / "text_encoder" / "config.json", root / "text_encoder" / "config.json",
                    fs::copy_options::overwrite_existing, ec);
      const std::string text_file = (root / "text_encoder" / "model.safetensors").string();
      r.bytes += stream_tensors(shards, strip_prefix(shards, "text_encoder."), kind, text_file, o, metadata, done, total);
      copy_folder(model_dir / "scheduler", root / "scheduler");
      copy_folder(model_dir / "tokenizer", root / "tokenizer");
      r.files.push_back(text_file);
    }
  } else {
    throw Error(ErrorKind::config, "export format '" + o.format + "' does not exist (diffusers, single-file, safetensors)");
  }
  r.tensors = done;
  return r;
}

}  // namespace zs::checkpoint
