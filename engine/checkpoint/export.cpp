#include "checkpoint/export.h"

#include <filesystem>

#include <ATen/ATen.h>

#include "checkpoint/checkpoint.h"
#include "checkpoint/sharded_state.h"
#include "core/error.h"
#include "io/safetensors.h"

namespace zs::checkpoint {

namespace fs = std::filesystem;

namespace {

/// Streams the parameters whose names start with `prefix` (prefix removed) into `path`.
std::int64_t stream_component(const ShardReader& shards, const std::string& prefix, const std::string& kind,
                              const std::string& path, const ExportOptions& o,
                              const std::map<std::string, std::string>& metadata, std::size_t& done, std::size_t total) {
  std::vector<io::SafetensorsStreamWriter::Entry> entries;
  std::vector<std::string> sources;
  for (const auto& u : shards.units())
    for (const auto& p : u.params)
      if (p.name.rfind(prefix, 0) == 0) {
        entries.push_back({p.name.substr(prefix.size()), o.dtype.value_or(at::kFloat), p.shape});
        sources.push_back(p.name);
      }
  if (entries.empty()) throw Error(ErrorKind::checkpoint, "the checkpoint has no parameters named " + prefix + "*");
  io::SafetensorsStreamWriter writer(path, entries, metadata);
  for (const auto& name : sources) {
    writer.write(shards.parameter(name, kind));
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
  if (o.format == "safetensors") {
    if (fs::path(out).has_parent_path()) fs::create_directories(fs::path(out).parent_path());
    std::size_t unet_total = 0;
    for (const auto& u : shards.units())
      for (const auto& p : u.params) unet_total += p.name.rfind("unet.", 0) == 0;
    r.bytes += stream_component(shards, "unet.", kind, out, o, metadata, done, unet_total);
    r.files.push_back(out);
  } else if (o.format == "diffusers") {
    std::error_code ec;
    if (fs::exists(out) && !fs::is_empty(out, ec))
      throw Error(ErrorKind::io, out + ": exists and is not empty; choose a new folder for the export");
    const fs::path root(out);
    fs::create_directories(root / "unet");
    fs::create_directories(root / "text_encoder");
    fs::copy_file(model_dir / "unet" / "config.json", root / "unet" / "config.json", fs::copy_options::overwrite_existing, ec);
    if (ec) throw Error(ErrorKind::io, (model_dir / "unet" / "config.json").string() + ": cannot copy: " + ec.message());
    fs::copy_file(model_dir / "text_encoder" / "config.json", root / "text_encoder" / "config.json",
                  fs::copy_options::overwrite_existing, ec);
    const std::string unet_file = (root / "unet" / "diffusion_pytorch_model.safetensors").string();
    const std::string text_file = (root / "text_encoder" / "model.safetensors").string();
    r.bytes += stream_component(shards, "unet.", kind, unet_file, o, metadata, done, total);
    r.bytes += stream_component(shards, "text_encoder.", kind, text_file, o, metadata, done, total);
    copy_folder(model_dir / "scheduler", root / "scheduler");
    copy_folder(model_dir / "tokenizer", root / "tokenizer");
    r.files = {unet_file, text_file};
  } else {
    throw Error(ErrorKind::config, "export format '" + o.format + "' does not exist (safetensors, diffusers)");
  }
  r.tensors = done;
  return r;
}

}  // namespace zs::checkpoint
