#include "checkpoint/export.h"

#include <filesystem>
#include <functional>
#include <map>
#include <memory>

#include <nlohmann/json.hpp>
#include <torch/nn/module.h>

#include <ATen/ATen.h>

#include "checkpoint/checkpoint.h"
#include "checkpoint/sharded_state.h"
#include "models/single_file_names.h"
#include "core/error.h"
#include "core/text.h"
#include "io/atomic_file.h"
#include "io/json_file.h"
#include "io/safetensors.h"
#include "models/unet_config.h"
#include "models/diffusers_pipeline.h"
#include "models/diffusion_model.h"
#include "models/autoencoder_kl.h"
#include "models/single_file_model.h"
#include "models/weights.h"

namespace zs::checkpoint {
using models::single_file_unet_names;
using models::single_file_vae_names;
using models::single_file_vae_is_conv;
using models::kSingleFileUNet;
using models::kSingleFileTextEncoder;
using models::kSingleFileVae;
using models::kSingleFileXLTextEncoder;
using models::kSingleFileXLTextEncoder2;

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

/// Streams `tensors` into `path` one at a time, converted to the export dtype.
std::int64_t stream_extras(const std::vector<Extra>& tensors, const std::string& path, const ExportOptions& o,
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

/// Streams `renames` (consolidated from the shards), then `extras`, into `path`.
std::int64_t stream_tensors(const ShardReader& shards, const Renames& renames, const std::string& kind,
                            const std::string& path, const ExportOptions& o,
                            const std::map<std::string, std::string>& metadata, std::size_t& done, std::size_t total,
                            const std::vector<Extra>& extras = {}) {
  if (renames.empty()) throw Error(ErrorKind::checkpoint, path + ": nothing to export");
  std::map<std::string, std::vector<std::int64_t>> shapes;
  for (const auto& u : shards.units())
    for (const auto& p : u.params) shapes[p.name] = p.shape;
  std::vector<Extra> all;
  for (const auto& [from, to] : renames)
    all.push_back({to, shapes.at(from), [&shards, from = from, &kind] { return shards.parameter(from, kind); }});
  all.insert(all.end(), extras.begin(), extras.end());
  return stream_extras(all, path, o, metadata, done, total);
}

void copy_folder(const fs::path& from, const fs::path& to) {
  std::error_code ec;
  if (!fs::exists(from)) return;
  fs::create_directories(to, ec);
  fs::copy(from, to, fs::copy_options::recursive | fs::copy_options::overwrite_existing, ec);
  if (ec) throw Error(ErrorKind::io, to.string() + ": cannot copy " + from.string() + ": " + ec.message());
}

/// Opens `file` into `sources` (which keeps it alive for the extras' readers) and returns it.
const io::SafetensorsReader* keep_open(std::vector<std::unique_ptr<io::SafetensorsReader>>& sources, const std::string& file) {
  sources.push_back(std::make_unique<io::SafetensorsReader>(file));
  return sources.back().get();
}

/// The frozen components of the model a run was trained from, under their single-file names:
/// a single file's own non-UNet tensors as they are; a diffusers folder's VAE, text encoder
/// (SDXL: under conditioner.embedders.0) and SDXL's OpenCLIP text encoder 2 renamed (q, k, v
/// fused into in_proj, the projection transposed). Readers stay alive in `sources`.
std::vector<Extra> frozen_single_file_tensors(const std::string& source,
                                              std::vector<std::unique_ptr<io::SafetensorsReader>>& sources) {
  std::vector<Extra> extras;
  auto open = [&](const std::string& file) { return keep_open(sources, file); };
  if (models::is_single_file(source)) {
    const io::SafetensorsReader* reader = open(source);
    for (const auto& e : reader->entries())
      for (const char* prefix : {kSingleFileVae, "cond_stage_model.", "conditioner."})
        if (e.name.rfind(prefix, 0) == 0)
          extras.push_back({e.name, e.shape, [reader, name = e.name] { return reader->tensor(name); }});
    return extras;
  }
  const auto pipeline = models::DiffusersPipeline::open(source);
  const auto vae_config = models::AutoencoderKLConfig::from_file(pipeline.dir("vae") + "/config.json");
  for (const auto& file : pipeline.weight_files("vae")) {
    const io::SafetensorsReader* reader = open(file);
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
  const bool xl = pipeline.has("text_encoder_2");
  for (const auto& file : pipeline.weight_files("text_encoder")) {
    const io::SafetensorsReader* reader = open(file);
    for (const auto& e : reader->entries())
      extras.push_back({(xl ? kSingleFileXLTextEncoder : kSingleFileTextEncoder) + e.name, e.shape,
                        [reader, name = e.name] { return reader->tensor(name); }});
  }
  if (!xl) return extras;
  // OpenCLIP's layout for encoder 2: its tensors may sit in any of the shards.
  std::map<std::string, std::pair<const io::SafetensorsReader*, std::vector<std::int64_t>>> where;
  std::vector<std::string> names;
  for (const auto& file : pipeline.weight_files("text_encoder_2")) {
    const io::SafetensorsReader* reader = open(file);
    for (const auto& e : reader->entries()) {
      where[e.name] = {reader, e.shape};
      names.push_back(e.name);
    }
  }
  for (const auto& t : models::open_clip_text_names(names)) {
    std::vector<std::int64_t> shape = where.at(t.parts[0]).second;
    if (t.parts.size() > 1) shape[0] *= static_cast<std::int64_t>(t.parts.size());
    if (t.transposed) std::swap(shape[0], shape[1]);
    extras.push_back({kSingleFileXLTextEncoder2 + t.name, shape, [t, where] {
                        std::vector<at::Tensor> parts;
                        for (const auto& p : t.parts) parts.push_back(where.at(p).first->tensor(p));
                        const at::Tensor x = parts.size() > 1 ? at::cat(parts, 0) : parts[0];
                        return t.transposed ? x.t().contiguous() : x;
                      }});
  }
  return extras;
}

/// A single file's frozen components as a diffusers folder beside the exported UNet: vae/,
/// text_encoder/ (SDXL: text_encoder_2/), the tokenizers from its companion folder, scheduler/
/// and model_index.json with the run's prediction type. The file's UNet is not read (the
/// checkpoint's is exported).
void write_single_file_components(const models::PipelineRef& ref, const fs::path& root, const ExportOptions& o,
                                  ExportResult& r) {
  const std::string& config_path = ref.config_path;
  const auto file = models::SingleFileModel::open(ref.path, config_path);
  const bool xl = file.has("text_encoder_2");
  nlohmann::json index = {{"_class_name", xl ? "StableDiffusionXLPipeline" : "StableDiffusionPipeline"},
                          {"_diffusers_version", "0.25.0"},
                          {"unet", {"diffusers", "UNet2DConditionModel"}},
                          {"vae", {"diffusers", "AutoencoderKL"}},
                          {"text_encoder", {"transformers", "CLIPTextModel"}},
                          {"tokenizer", {"transformers", "CLIPTokenizer"}},
                          {"scheduler", {"diffusers", "DDPMScheduler"}}};
  auto component = [&](const std::string& name, const torch::nn::Module& m, const nlohmann::json& config, const std::string& weights) {
    fs::create_directories(root / name);
    io::write_file_atomic((root / name / "config.json").string(), config.dump(2) + "\n");
    models::save_weights(m, (root / name / weights).string(), "", {{"format", "pt"}, {"producer", "zerostudio"}}, o.dtype);
    r.files.push_back((root / name / weights).string());
    r.bytes += static_cast<std::int64_t>(fs::file_size(root / name / weights));
  };
  const auto vae = file.load_vae();
  component("vae", *vae, vae->config().to_json(), "diffusion_pytorch_model.safetensors");
  const auto text_encoder = file.load_text_encoder("text_encoder");
  component("text_encoder", *text_encoder, text_encoder->config().to_json(), "model.safetensors");
  // The tokenizer files as the companion folder has them (SDXL's second pads with "!").
  auto tokenizer = [&](const std::string& name) {
    const fs::path from = models::companion_tokenizer_dir(config_path, name);
    fs::create_directories(root / name);
    for (const char* f : {"vocab.json", "merges.txt", "special_tokens_map.json", "tokenizer_config.json"})
      if (fs::exists(from / f)) fs::copy_file(from / f, root / name / f, fs::copy_options::overwrite_existing);
    if (name == "tokenizer_2" && from != fs::path(config_path) / name)
      io::write_file_atomic((root / name / "special_tokens_map.json").string(), R"({"pad_token": "!"})" "\n");
  };
  tokenizer("tokenizer");
  if (xl) {
    const auto text_encoder_2 = file.load_text_encoder("text_encoder_2");
    component("text_encoder_2", *text_encoder_2, text_encoder_2->config().to_json(), "model.safetensors");
    tokenizer("tokenizer_2");
    index["text_encoder_2"] = {"transformers", "CLIPTextModelWithProjection"};
    index["tokenizer_2"] = {"transformers", "CLIPTokenizer"};
  }
  diffusion::ScheduleConfig schedule = file.load_scheduler();
  schedule.prediction_type = ref.prediction_type;  // what the run trained
  fs::create_directories(root / "scheduler");
  io::write_file_atomic((root / "scheduler" / "scheduler_config.json").string(), schedule.to_json().dump(2) + "\n");
  io::write_file_atomic((root / "model_index.json").string(), index.dump(2) + "\n");
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
  const fs::path model_dir = fs::path(without_trailing_slash(checkpoint)).parent_path().parent_path() / "model";
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
    // A run trained from a pipeline: the untouched VAE and text encoders join the file from there.
    std::vector<std::unique_ptr<io::SafetensorsReader>> sources;
    std::vector<Extra> extras;
    const std::string source = o.format == "single-file" ? models::DiffusionModel::pipeline_of(model_dir.string()).path : "";
    if (!source.empty()) extras = frozen_single_file_tensors(source, sources);
    r.bytes += stream_tensors(shards, renames, kind, out, o, metadata, done, renames.size() + extras.size(), extras);
    r.files.push_back(out);
  } else if (o.format == "diffusers") {
    std::error_code ec;
    if (fs::exists(out) && !fs::is_empty(out, ec))
      throw Error(ErrorKind::io, out + ": exists and is not empty; choose a new folder for the export");
    const fs::path root(out);
    const models::PipelineRef ref = models::DiffusionModel::pipeline_of(model_dir.string());
    const std::string& source = ref.path;
    if (!source.empty() && models::is_single_file(source)) {
      write_single_file_components(ref, root, o, r);
    } else if (!source.empty()) {
      // Trained from a diffusers pipeline: every untouched component (VAE, text encoder,
      // tokenizer, scheduler, model_index.json, …) comes from it, beside the trained UNet.
      fs::create_directories(root);
      for (const auto& entry : fs::directory_iterator(source)) {
        if (entry.path().filename() == "unet") continue;
        if (entry.is_directory()) copy_folder(entry.path(), root / entry.path().filename());
        else fs::copy_file(entry.path(), root / entry.path().filename(), fs::copy_options::overwrite_existing);
      }
      // The scheduler as the pipeline has it, but with what the run trained to predict.
      const std::string scheduler = (root / "scheduler" / "scheduler_config.json").string();
      if (fs::exists(scheduler)) {
        nlohmann::json j = io::read_json_file(scheduler, "scheduler config");
        if (j.value("prediction_type", std::string("epsilon")) != ref.prediction_type) {
          j["prediction_type"] = ref.prediction_type;
          io::write_file_atomic(scheduler, j.dump(2) + "\n");
        }
      }
    }
    fs::create_directories(root / "unet");
    fs::copy_file(model_dir / "unet" / "config.json", root / "unet" / "config.json", fs::copy_options::overwrite_existing, ec);
    if (ec) throw Error(ErrorKind::io, (model_dir / "unet" / "config.json").string() + ": cannot copy: " + ec.message());
    const std::string unet_file = (root / "unet" / "diffusion_pytorch_model.safetensors").string();
    r.bytes += stream_tensors(shards, strip_prefix(shards, "unet."), kind, unet_file, o, metadata, done, total);
    r.files.push_back(unet_file);
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

ExportResult convert_to_single_file(const std::string& pipeline_dir, const std::string& out, const ExportOptions& o) {
  const auto pipeline = models::DiffusersPipeline::open(pipeline_dir);
  const auto unet_config = models::UNetConfig::from_file(pipeline.dir("unet") + "/config.json");
  std::vector<std::unique_ptr<io::SafetensorsReader>> sources;
  std::vector<Extra> tensors;
  for (const auto& file : pipeline.weight_files("unet")) {
    const io::SafetensorsReader* reader = keep_open(sources, file);
    std::vector<std::string> names;
    for (const auto& e : reader->entries()) names.push_back(e.name);
    const auto ldm = single_file_unet_names(names, static_cast<int>(unet_config.layers_per_block));
    for (std::size_t i = 0; i < ldm.size(); ++i)
      tensors.push_back({kSingleFileUNet + ldm[i].second, reader->entries()[i].shape,
                         [reader, from = ldm[i].first] { return reader->tensor(from); }});
  }
  for (auto& e : frozen_single_file_tensors(pipeline_dir, sources)) tensors.push_back(std::move(e));
  if (fs::path(out).has_parent_path()) fs::create_directories(fs::path(out).parent_path());
  ExportResult r;
  r.bytes = stream_extras(tensors, out, o, {{"format", "pt"}, {"producer", "zerostudio"}}, r.tensors, tensors.size());
  r.files = {out};
  return r;
}

}  // namespace zs::checkpoint
