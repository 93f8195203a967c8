// Fuzz targets for weight files whose header decides what is read, one binary each (ZS_FUZZ_WEIGHTS).
// The input is the safetensors header JSON (names, dtypes, shapes, offsets, metadata); its data
// section is made to the length the header asks (fuzz_support.h), so the fuzzer spends its time on
// what the readers interpret rather than on tensor bytes. The first byte picks a slot.
//   lora_file    LoRA imports: SD's kohya and diffusers/PEFT files into a tiny SD 1.x UNet and
//                text encoder (models/sd/lora_file.h), Qwen-Image's (transformer_lora_file.h, with
//                diffusers' lora_adapter_metadata), and the format detection
//   single_file  single-file checkpoints: Black Forest Labs' Flux transformer (with the companion
//                folder's config, and with the config its shapes imply), SD 1.x / SDXL LDM files
//                (with the companion folder, and inferred from shapes alone)
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>
#include <torch/nn/module.h>

#include "checkpoint/export.h"
#include "core/meta_tensors.h"
#include "fuzz_support.h"
#include "io/safetensors.h"
#include "models/clip_text_model.h"
#include "models/flux/flux_single_file.h"
#include "models/flux/flux_transformer.h"
#include "models/lora.h"
#include "models/model_family.h"
#include "models/transformer_lora_file.h"
#include "models/sd/lora_file.h"
#include "models/sd/sd_export.h"
#include "models/sd/sd_family.h"
#include "models/sd/single_file_model.h"
#include "models/sd/unet_2d_condition.h"

namespace fs = std::filesystem;
using namespace zs;

namespace {

const std::string kTarget = ZS_FUZZ_WEIGHTS;

// ---- LoRA files ----------------------------------------------------------------------------

struct TinySd {
  models::UNetConfig config;
  models::UNet2DConditionModel unet{nullptr};
  models::ClipTextModel text{nullptr};
  std::vector<checkpoint::LoraModelPart> parts() const {
    return {{models::LoraPart::unet, unet.ptr().get()}, {models::LoraPart::text_encoder, text.ptr().get()}};
  }
};

// SD 1.x's tiny fixture with adapters on the default targets (nullptr without ../shared).
const TinySd* tiny_sd() {
  static const std::unique_ptr<TinySd> sd = []() -> std::unique_ptr<TinySd> {
    const std::string dir = fuzz::shared_fixture("sd15-tiny");
    if (dir.empty()) return nullptr;
    auto m = std::make_unique<TinySd>();
    m->config = models::UNetConfig::from_file(dir + "/unet/config.json");
    m->unet = models::UNet2DConditionModel(m->config);
    m->text = models::ClipTextModel(models::ClipTextConfig::from_file(dir + "/text_encoder/config.json"));
    models::LoraOptions o;
    o.rank = 4;
    o.alpha = 2;
    models::attach_lora(*m->unet, models::sd_family().default_lora_targets(), o, 1);
    models::attach_lora(*m->text, models::default_text_encoder_lora_targets(), o, 2);
    return m;
  }();
  return sd.get();
}

// The Qwen-Image layers the fixture LoRA file adapts (module paths below the transformer).
const std::vector<std::string>& qwen_layers() {
  static const std::vector<std::string> layers = [] {
    std::vector<std::string> out;
    const io::SafetensorsReader r(fuzz::fixture("qwen_lora_alpha.safetensors"));
    const std::string down = ".lora_A.weight";
    for (const auto& e : r.entries()) {
      std::string n = e.name;
      if (!n.ends_with(down)) continue;
      n = n.substr(0, n.size() - down.size());
      if (n.starts_with("transformer.")) n = n.substr(12);
      out.push_back(n);
    }
    return out;
  }();
  return layers;
}

void read_lora(int slot, const std::string& path) {
  switch (slot % 4) {
    case 0:
    case 1:
      if (const TinySd* sd = tiny_sd()) (void)checkpoint::read_lora_file(path, sd->parts(), sd->config, false);
      break;
    case 2: (void)models::read_transformer_lora_file(path, qwen_layers(), "Qwen-Image"); break;
    default: (void)checkpoint::detect_lora_format(path); break;
  }
}

fuzz::Seeds lora_seeds() {
  fuzz::Seeds seeds;
  if (const TinySd* sd = tiny_sd()) {
    for (const auto format : {checkpoint::LoraFileFormat::kohya, checkpoint::LoraFileFormat::diffusers}) {
      const bool kohya = format == checkpoint::LoraFileFormat::kohya;
      const std::string p = fuzz::scratch() + (kohya ? "/kohya.safetensors" : "/peft.safetensors");
      checkpoint::LoraFileOptions o;
      o.dtype = at::kFloat;
      checkpoint::write_lora_file(p, sd->parts(), sd->config, format, o);
      seeds.emplace_back(kohya ? "sd_kohya" : "sd_diffusers", std::string(1, kohya ? 0 : 1) + fuzz::safetensors_header(p));
    }
  }
  seeds.emplace_back("qwen", std::string(1, 2) + fuzz::safetensors_header(fuzz::fixture("qwen_lora_alpha.safetensors")));
  seeds.emplace_back("detect", std::string(1, 3) + fuzz::safetensors_header(fuzz::fixture("qwen_lora_alpha.safetensors")));
  return seeds;
}

// ---- single files --------------------------------------------------------------------------

void read_flux_file(const std::string& path, bool companion) {
  const std::string config_dir = fuzz::fixture("flux-tiny");
  std::ostream listing(nullptr);
  models::find_family("flux")->describe(listing, path, companion ? config_dir : "");
  const models::BflFile f(path);
  const models::FluxConfig c = companion ? f.config(config_dir) : f.config();
  std::vector<std::string> names;
  {
    const MetaTensorScope meta;
    const models::FluxTransformer2DModel m(c);
    for (const auto& p : m->named_parameters()) names.push_back(p.key());
  }
  if (!companion) return;  // the implied config can be any size: its tensors are not read
  for (const std::string& n : names) (void)f.tensor(n, c);
}

void read_sd_file(const std::string& path, bool companion) {
  const std::string config_dir = fuzz::shared_fixture("sd15-tiny");
  if (config_dir.empty()) return;
  std::ostream listing(nullptr);
  models::find_family("sd")->describe(listing, path, companion ? config_dir : "");
  const models::SingleFileModel m = models::SingleFileModel::open(path, companion ? config_dir : "");
  (void)m.parameter_counts();
  if (!companion) return;  // configs inferred from shapes can be any size: no modules are built
  (void)m.load_unet();
  (void)m.load_vae();
  (void)m.load_text_encoder("text_encoder");
}

void read_single_file(int slot, const std::string& path) {
  switch (slot % 4) {
    case 0: read_flux_file(path, true); break;
    case 1: read_flux_file(path, false); break;
    case 2: read_sd_file(path, true); break;
    default: read_sd_file(path, false); break;
  }
}

fuzz::Seeds single_file_seeds() {
  fuzz::Seeds seeds;
  const std::string bfl = fuzz::safetensors_header(fuzz::fixture("flux_bfl.safetensors"));
  seeds.emplace_back("flux_companion", std::string(1, 0) + bfl);
  seeds.emplace_back("flux_implied", std::string(1, 1) + bfl);
  const std::string sd = fuzz::shared_fixture("sd15-tiny");
  if (!sd.empty()) {
    const std::string p = fuzz::scratch() + "/sd15.safetensors";
    checkpoint::ExportOptions o;
    o.format = "single-file";
    checkpoint::convert_to_single_file(sd, p, o);
    const std::string header = fuzz::safetensors_header(p);
    seeds.emplace_back("sd_companion", std::string(1, 2) + header);
    seeds.emplace_back("sd_inferred", std::string(1, 3) + header);
  }
  return seeds;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  zs::fuzz::initialize(kTarget == "lora_file" ? lora_seeds : single_file_seeds);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const int slot = data[0];
  const std::string path =
      fuzz::safetensors_from_header("input.safetensors", {reinterpret_cast<const char*>(data) + 1, size - 1});
  fuzz::expect_accept_or_refuse([&] {
    if (kTarget == "lora_file") read_lora(slot, path);
    else read_single_file(slot, path);
  });
  return 0;
}
