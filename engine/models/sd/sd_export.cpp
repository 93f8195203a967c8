// The SD family's export (SdFamily::export_checkpoint, models/sd/sd_export.h): a checkpoint's
// UNet and trained text encoders as safetensors, the original single-file layout, a diffusers
// folder, or a LoRA checkpoint's adapters as a kohya / diffusers file.
#include "models/sd/sd_export.h"

#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>

#include <nlohmann/json.hpp>
#include <torch/nn/module.h>

#include <ATen/ATen.h>

#include "checkpoint/checkpoint.h"
#include "checkpoint/sharded_state.h"
#include "core/error.h"
#include "io/atomic_file.h"
#include "io/json_file.h"
#include "io/safetensors.h"
#include "models/autoencoder_kl.h"
#include "models/export_sources.h"
#include "models/sd/diffusers_pipeline.h"
#include "models/sd/diffusion_model.h"
#include "models/sd/sd_base_model.h"
#include "models/sd/sd_lora_export.h"
#include "models/sd/single_file_model.h"
#include "models/sd/single_file_names.h"
#include "models/sd/unet_config.h"
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

using Extra = ExportTensor;

/// `tensors` renamed by `rename` (name -> new name).
ExportTensors renamed(ExportTensors tensors, const std::function<std::string(const std::string&)>& rename) {
  for (auto& t : tensors) t.name = rename(t.name);
  return tensors;
}

/// A text encoder's tensors (transformers names) under the single-file names: SD 1.x's under
/// cond_stage_model.transformer., SDXL's first under conditioner.embedders.0.transformer., its
/// second (CLIPTextModelWithProjection) in OpenCLIP's layout (q, k, v fused into in_proj, the
/// projection transposed).
ExportTensors single_file_text_encoder(const std::string& component, bool xl, const ExportTensors& hf) {
  if (component == "text_encoder")
    return renamed(hf, [xl](const std::string& n) { return (xl ? kSingleFileXLTextEncoder : kSingleFileTextEncoder) + n; });
  std::map<std::string, const ExportTensor*> by_name;
  std::vector<std::string> names;
  for (const auto& t : hf) {
    by_name[t.name] = &t;
    names.push_back(t.name);
  }
  ExportTensors out;
  for (const auto& t : models::open_clip_text_names(names)) {
    std::vector<std::int64_t> shape = by_name.at(t.parts[0])->shape;
    if (t.parts.size() > 1) shape[0] *= static_cast<std::int64_t>(t.parts.size());
    if (t.transposed) std::swap(shape[0], shape[1]);
    std::vector<std::function<at::Tensor()>> reads;
    for (const auto& p : t.parts) reads.push_back(by_name.at(p)->read);
    out.push_back({kSingleFileXLTextEncoder2 + t.name, shape, [reads, transposed = t.transposed] {
                     std::vector<at::Tensor> parts;
                     for (const auto& r : reads) parts.push_back(r());
                     const at::Tensor x = parts.size() > 1 ? at::cat(parts, 0) : parts[0];
                     return transposed ? x.t().contiguous() : x;
                   }});
  }
  return out;
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

/// The frozen components of the model a run was trained from, under their single-file names,
/// leaving out the text encoders in `own` (the export writes those itself): a single file's own
/// VAE and text-encoder tensors as they are; a diffusers folder's VAE renamed and its text
/// encoders as single_file_text_encoder names them. Readers stay alive in `sources`.
std::vector<Extra> frozen_single_file_tensors(const std::string& source, const std::set<std::string>& own,
                                              std::vector<std::unique_ptr<io::SafetensorsReader>>& sources) {
  std::vector<Extra> extras;
  auto open = [&](const std::string& file) { return keep_open(sources, file); };
  if (models::is_single_file(source)) {
    const io::SafetensorsReader* reader = open(source);
    std::vector<std::string> prefixes = {kSingleFileVae};
    if (!own.contains("text_encoder")) {
      prefixes.push_back("cond_stage_model.");
      prefixes.push_back("conditioner.embedders.0.");
    }
    if (!own.contains("text_encoder_2")) prefixes.push_back("conditioner.embedders.1.");
    for (const auto& e : reader->entries())
      for (const auto& prefix : prefixes)
        if (e.name.starts_with(prefix))
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
  for (const std::string component : {"text_encoder", "text_encoder_2"}) {
    if (own.contains(component) || !pipeline.has(component)) continue;
    for (auto& t : single_file_text_encoder(component, xl, file_tensors(pipeline.weight_files(component))))
      extras.push_back(std::move(t));
  }
  return extras;
}

/// A single file's frozen components as a diffusers folder beside the exported UNet: vae/,
/// text_encoder/ (SDXL: text_encoder_2/), the tokenizers from its companion folder, scheduler/
/// and model_index.json with the run's prediction type. The file's UNet is not read (the
/// checkpoint's is exported).
void write_single_file_components(const models::PipelineRef& ref, const std::set<std::string>& own,
                                  const fs::path& root, const ExportOptions& o, ExportResult& r) {
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
  // A text encoder the export writes itself (trained, or with adapters merged) gets its config here.
  auto text_encoder = [&](const std::string& name, const models::ClipTextConfig& config) {
    if (own.contains(name)) {
      fs::create_directories(root / name);
      io::write_file_atomic((root / name / "config.json").string(), config.to_json().dump(2) + "\n");
      return;
    }
    const auto encoder = file.load_text_encoder(name);
    component(name, *encoder, encoder->config().to_json(), "model.safetensors");
  };
  text_encoder("text_encoder", file.info().text_encoder);
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
    text_encoder("text_encoder_2", file.info().text_encoder_2);
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

ExportResult export_sd_checkpoint(const CheckpointInfo& info, const std::string& out, const ExportOptions& o) {
  const CheckpointExport e(info, o);
  const ShardReader& shards = e.shards;
  const std::string& kind = e.kind;
  const fs::path model_dir(e.model_dir);
  const bool lora = e.lora;
  if (o.format == "lora-kohya" || o.format == "lora-diffusers") {
    e.require_lora("diffusers, single-file or safetensors");
    return export_lora_file(info, shards, model_dir.string(), out, o);
  }
  if (o.format != "safetensors" && o.format != "single-file" && o.format != "diffusers")
    throw Error(ErrorKind::config, "export format '" + o.format +
                                       "' does not exist (diffusers, single-file, safetensors, lora-kohya, lora-diffusers)");
  // The weights, part by part, under diffusers/transformers names: the checkpoint's trained
  // tensors, or (LoRA) the base's with the adapters merged. `own` text encoders are written here;
  // a pipeline's other components come from the pipeline.
  const CheckpointAdapters adapters = e.merged_adapters("lora-kohya or lora-diffusers");
  auto adapters_of = [&](const std::string& c) { return adapters.contains(c) ? adapters.at(c) : ComponentAdapters{}; };
  // Where the checkpoint leaves parts out (adapters; a preset's frozen text encoder), the base has them.
  std::optional<BaseModel> base;
  if (lora || info.meta.contains("base_model")) base.emplace(model_dir.string());
  const ExportTensors unet = adapters.contains("unet") ? base->unet(adapters.at("unet")) : shard_tensors(shards, "unet.", kind);
  std::map<std::string, ExportTensors> text_encoders;
  for (const std::string component : {"text_encoder", "text_encoder_2"}) {
    ExportTensors t = shard_tensors(shards, component + ".", kind);
    if (t.empty() && base && (adapters.contains(component) || base->preset())) t = base->text_encoder(component, adapters_of(component));
    if (!t.empty()) text_encoders[component] = std::move(t);
  }
  std::set<std::string> own;
  for (const auto& [component, t] : text_encoders) own.insert(component);

  std::size_t total = unet.size(), done = 0;
  for (const auto& [component, t] : text_encoders) total += t.size();
  const std::map<std::string, std::string>& metadata = e.metadata;  // lora here means merged (refused otherwise)
  ExportResult r;
  const models::PipelineRef ref = models::DiffusionModel::pipeline_of(model_dir.string());
  const std::string& source = ref.path;
  if (o.format == "safetensors") {
    if (fs::path(out).has_parent_path()) fs::create_directories(fs::path(out).parent_path());
    r.bytes += stream_tensors(unet, out, o, metadata, done, unet.size());
    r.files.push_back(out);
  } else if (o.format == "single-file") {
    // The original SD layout: UNet blocks renumbered, the text encoders under their LDM names, and
    // a pipeline's untouched VAE and text encoders from there.
    if (fs::path(out).has_parent_path()) fs::create_directories(fs::path(out).parent_path());
    const auto unet_config = models::UNetConfig::from_file((model_dir / "unet" / "config.json").string());
    std::vector<std::string> names;
    for (const auto& t : unet) names.push_back(t.name);
    const auto ldm = single_file_unet_names(names, static_cast<int>(unet_config.layers_per_block));
    ExportTensors all = unet;
    for (std::size_t i = 0; i < all.size(); ++i) all[i].name = kSingleFileUNet + ldm[i].second;
    const bool xl = !unet_config.addition_embed_type.empty();
    for (const auto& [component, t] : text_encoders)
      for (auto& e : single_file_text_encoder(component, xl, t)) all.push_back(std::move(e));
    std::vector<std::unique_ptr<io::SafetensorsReader>> sources;
    if (!source.empty())
      for (auto& e : frozen_single_file_tensors(source, own, sources)) all.push_back(std::move(e));
    r.bytes += stream_tensors(all, out, o, metadata, done, all.size());
    r.files.push_back(out);
  } else {
    std::error_code ec;
    if (fs::exists(out) && !fs::is_empty(out, ec))
      throw Error(ErrorKind::io, out + ": exists and is not empty; choose a new folder for the export");
    const fs::path root(out);
    if (!source.empty() && models::is_single_file(source)) {
      write_single_file_components(ref, own, root, o, r);
    } else if (!source.empty()) {
      // Trained from a diffusers pipeline: every untouched component (VAE, frozen text encoders,
      // tokenizers, scheduler, model_index.json, …) comes from it, beside the trained ones.
      copy_pipeline_components(source, out, "unet", std::vector<std::string>(own.begin(), own.end()));
      // The scheduler as the pipeline has it, but with what the run trained to predict.
      const std::string scheduler = (root / "scheduler" / "scheduler_config.json").string();
      if (fs::exists(scheduler)) {
        nlohmann::json j = io::read_json_file(scheduler, "scheduler config");
        if (j.value("prediction_type", std::string("epsilon")) != ref.prediction_type) {
          j["prediction_type"] = ref.prediction_type;
          io::write_file_atomic(scheduler, j.dump(2) + "\n");
        }
      }
    } else {
      // A preset model: its text encoder's config, the run's scheduler and tokenizer.
      for (const auto& [component, t] : text_encoders) {
        fs::create_directories(root / component);
        fs::copy_file(model_dir / component / "config.json", root / component / "config.json",
                      fs::copy_options::overwrite_existing, ec);
      }
      copy_folder(model_dir / "scheduler", root / "scheduler");
      copy_folder(model_dir / "tokenizer", root / "tokenizer");
    }
    fs::create_directories(root / "unet");
    fs::copy_file(model_dir / "unet" / "config.json", root / "unet" / "config.json", fs::copy_options::overwrite_existing, ec);
    if (ec) throw Error(ErrorKind::io, (model_dir / "unet" / "config.json").string() + ": cannot copy: " + ec.message());
    const std::string unet_file = (root / "unet" / "diffusion_pytorch_model.safetensors").string();
    r.bytes += stream_tensors(unet, unet_file, o, metadata, done, total);
    r.files.push_back(unet_file);
    for (const auto& [component, t] : text_encoders) {
      const std::string file = (root / component / "model.safetensors").string();
      r.bytes += stream_tensors(t, file, o, metadata, done, total);
      r.files.push_back(file);
    }
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
  for (auto& e : frozen_single_file_tensors(pipeline_dir, {}, sources)) tensors.push_back(std::move(e));
  if (fs::path(out).has_parent_path()) fs::create_directories(fs::path(out).parent_path());
  ExportResult r;
  r.bytes = stream_tensors(tensors, out, o, {{"format", "pt"}, {"producer", "zerostudio"}}, r.tensors, tensors.size());
  r.files = {out};
  return r;
}

}  // namespace zs::checkpoint
