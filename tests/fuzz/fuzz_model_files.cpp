// Fuzz targets for the files of a model folder, one binary per kind (ZS_FUZZ_SLOTS):
//   model_config     config.json of every component of each family (Flux.1, Qwen-Image, SD 1.x),
//                    model_index.json and scheduler_config.json
//   shard_index      *.safetensors.index.json (weight_map, shard names)
//   tokenizer_files  vocab.json + merges.txt (CLIP), tokenizer.json / vocab.json / merges.txt
//                    (Qwen2), spiece.model (T5's SentencePiece), tokenizer_config.json
// An input's first byte picks a slot (a file of a fixture folder, copied once into the scratch
// folder); the rest replaces that file. The folder is then read as `zerostudio model info` and
// every run start read it (ModelFamily::describe, the denoiser's shape: models::model_files_problem)
// and, for a tokenizer, the tokenizer is loaded and encodes a prompt. The original file is put
// back after each input.
#include <cstdlib>
#include <filesystem>
#include <ostream>
#include <string>
#include <vector>

#include "fuzz_support.h"
#include "models/clip_tokenizer.h"
#include "models/model_family.h"
#include "models/model_shape.h"
#include "models/qwen_text/qwen_tokenizer.h"
#include "models/t5_tokenizer.h"
#include "settings/trainer_config.h"

namespace fs = std::filesystem;

namespace {

enum class Tokenizer { none, clip, t5, qwen };

struct Slot {
  std::string folder;  ///< fixture folder (tests/fixtures/… or ../shared/fixtures/…)
  std::string file;    ///< below it
  Tokenizer tokenizer = Tokenizer::none;
  std::string copy;      ///< the scratch copy of the folder
  std::string original;  ///< the file's bytes
};

std::vector<Slot> slots_of_kind() {
  const std::string kind = ZS_FUZZ_SLOTS;
  const std::string flux = zs::fuzz::fixture("flux-tiny"), qwen = zs::fuzz::fixture("qwen-image-tiny");
  const std::string sd = zs::fuzz::shared_fixture("sd15-tiny");  // last: absent without ../shared
  std::vector<Slot> s;
  if (kind == "model_config") {
    for (const char* f : {"model_index.json", "transformer/config.json", "vae/config.json", "text_encoder/config.json",
                          "text_encoder_2/config.json", "scheduler/scheduler_config.json"})
      s.push_back({flux, f});
    for (const char* f : {"model_index.json", "transformer/config.json", "vae/config.json", "text_encoder/config.json",
                          "text_encoder/generation_config.json", "scheduler/scheduler_config.json"})
      s.push_back({qwen, f});
    if (!sd.empty())
      for (const char* f : {"model_index.json", "unet/config.json", "vae/config.json", "text_encoder/config.json",
                            "scheduler/scheduler_config.json"})
        s.push_back({sd, f});
  } else if (kind == "shard_index") {
    s.push_back({flux, "transformer/diffusion_pytorch_model.safetensors.index.json"});
    s.push_back({flux, "text_encoder_2/model.safetensors.index.json"});
    s.push_back({qwen, "transformer/diffusion_pytorch_model.safetensors.index.json"});
    s.push_back({qwen, "text_encoder/model.safetensors.index.json"});
  } else if (kind == "tokenizer_files") {
    s.push_back({flux, "tokenizer/vocab.json", Tokenizer::clip});
    s.push_back({flux, "tokenizer/merges.txt", Tokenizer::clip});
    s.push_back({flux, "tokenizer/tokenizer_config.json", Tokenizer::clip});
    s.push_back({flux, "tokenizer_2/spiece.model", Tokenizer::t5});
    s.push_back({flux, "tokenizer_2/tokenizer_config.json", Tokenizer::t5});
    s.push_back({qwen, "tokenizer/tokenizer.json", Tokenizer::qwen});
    s.push_back({qwen, "tokenizer/vocab.json", Tokenizer::qwen});
    s.push_back({qwen, "tokenizer/merges.txt", Tokenizer::qwen});
    s.push_back({qwen, "tokenizer/tokenizer_config.json", Tokenizer::qwen});
  } else {
    std::abort();
  }
  return s;
}

std::vector<Slot>& slots() {
  static std::vector<Slot> s = [] {
    std::vector<Slot> out = slots_of_kind();
    for (Slot& slot : out) {
      const bool fresh = !fs::exists(fs::path(zs::fuzz::scratch()) / fs::path(slot.folder).filename());
      slot.copy = zs::fuzz::copy_folder(slot.folder, fs::path(slot.folder).filename().string());
      // SD 1.x's copy reads Flux's tiny CLIP vocabulary instead of CLIP's real one (1 MB, ~0.8 s
      // an input under ASan); the CLIP tokenizer files are fuzzed through Flux's slots.
      if (fresh && fs::exists(slot.copy + "/unet"))
        for (const char* f : {"vocab.json", "merges.txt"})
          fs::copy_file(zs::fuzz::fixture("flux-tiny/tokenizer/") + f, slot.copy + "/tokenizer/" + f,
                        fs::copy_options::overwrite_existing);
      slot.original = zs::fuzz::read_file(slot.copy + "/" + slot.file);
    }
    return out;
  }();
  return s;
}

void read_folder(const Slot& slot) {
  zs::config::TrainerConfig cfg = zs::config::TrainerConfig::defaults();
  cfg.model.path = slot.copy;
  const zs::models::ModelFamily& family = zs::models::family_of(cfg);
  std::ostream listing(nullptr);
  family.describe(listing, cfg.model.path, "");
  (void)family.shape(cfg);
}

void read_tokenizer(const Slot& slot) {
  const std::string dir = (fs::path(slot.copy) / slot.file).parent_path().string();
  const std::string prompt = "a photo of a cat, ÄÖ 東京 <extra_id_0> 123  \t end";
  switch (slot.tokenizer) {
    case Tokenizer::clip: (void)zs::models::ClipTokenizer::load(dir).encode(prompt); break;
    case Tokenizer::t5: (void)zs::models::T5Tokenizer::load_folder(dir).encode(prompt, 32); break;
    case Tokenizer::qwen: (void)zs::models::QwenTokenizer::load(dir).encode(prompt); break;
    case Tokenizer::none: break;
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  zs::fuzz::initialize([] {
    zs::fuzz::Seeds seeds;
    const std::vector<Slot>& s = slots();
    for (std::size_t i = 0; i < s.size(); ++i)
      seeds.emplace_back("slot" + std::to_string(i), std::string(1, static_cast<char>(i)) + s[i].original);
    return seeds;
  });
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  std::vector<Slot>& s = slots();
  const Slot& slot = s[data[0] % s.size()];
  const std::string path = fs::path(slot.copy).filename().string() + "/" + slot.file;
  zs::fuzz::write_file(path, {reinterpret_cast<const char*>(data) + 1, size - 1});
  zs::fuzz::expect_accept_or_refuse([&] { read_folder(slot); });
  if (slot.tokenizer != Tokenizer::none) zs::fuzz::expect_accept_or_refuse([&] { read_tokenizer(slot); });
  zs::fuzz::write_file(path, slot.original);
  return 0;
}
