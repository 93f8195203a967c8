#include "models/t5_tokenizer.h"

#include <algorithm>
#include <filesystem>

#include <dlfcn.h>
#include <unistd.h>

#include <mutex>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/json_file.h"

namespace zs::models {

namespace fs = std::filesystem;

namespace {

/// The module's C interface (models/sentencepiece_shim.cpp).
struct SpmModule {
  void* (*open)(const char*, char*, std::size_t) = nullptr;
  void (*close)(void*) = nullptr;
  int (*piece_size)(void*) = nullptr;
  int (*special_id)(void*, int) = nullptr;
  int (*encode)(void*, const char*, std::size_t, int*, std::size_t, std::size_t*, char*, std::size_t) = nullptr;
};

// AddressSanitizer refuses RTLD_DEEPBIND (github.com/google/sanitizers/issues/611): the fuzz build
// (make fuzz) loads the module, built there without sanitizers, into a link-map namespace of its
// own instead (dlmopen), where its protobuf cannot meet LibTorch's either.
#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define ZS_NO_DEEPBIND 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define ZS_NO_DEEPBIND 1
#endif
void* open_module(const std::string& path) {
#ifdef ZS_NO_DEEPBIND
  return dlmopen(LM_ID_NEWLM, path.c_str(), RTLD_NOW | RTLD_LOCAL);
#else
  return dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
#endif
}

/// Loads the module once, locally and deep-bound (its protobuf copy stays its own).
const SpmModule& spm_module() {
  static SpmModule m;
  static std::string failure;
  static std::once_flag once;
  std::call_once(once, [] {
    std::string tried;
    for (const std::string& path : T5Tokenizer::module_candidates()) {
      if (path.empty() || !fs::exists(path)) continue;
      void* h = open_module(path);
      if (!h) {
        tried += "\n  " + path + ": " + dlerror();
        continue;
      }
      m.open = reinterpret_cast<decltype(m.open)>(dlsym(h, "zs_spm_open"));
      m.close = reinterpret_cast<decltype(m.close)>(dlsym(h, "zs_spm_close"));
      m.piece_size = reinterpret_cast<decltype(m.piece_size)>(dlsym(h, "zs_spm_piece_size"));
      m.special_id = reinterpret_cast<decltype(m.special_id)>(dlsym(h, "zs_spm_special_id"));
      m.encode = reinterpret_cast<decltype(m.encode)>(dlsym(h, "zs_spm_encode"));
      if (m.open && m.close && m.piece_size && m.special_id && m.encode) return;
      tried += "\n  " + path + ": not ZeroStudio's SentencePiece module";
      m = SpmModule{};
    }
    failure = "the SentencePiece module (libzs_sentencepiece.so, for T5's tokenizer) was not found" +
              (tried.empty() ? std::string(" in any of its places") : ":" + tried) +
              "; reinstall ZeroStudio, or point ZEROSTUDIO_SENTENCEPIECE at the file";
  });
  if (!m.open) throw Error(ErrorKind::io, failure);
  return m;
}

/// extra_ids within 0..kMaxExtraIds (each is a string made up front), refused naming `where`.
void check_extra_ids(std::int64_t extra_ids, const std::string& where) {
  if (extra_ids < 0 || extra_ids > T5Tokenizer::kMaxExtraIds)
    throw Error(ErrorKind::config, where + ": extra_ids: " + std::to_string(extra_ids) + " is outside 0.." +
                                       std::to_string(T5Tokenizer::kMaxExtraIds) +
                                       ", what ZeroStudio accepts (T5's tokenizers have 100)");
}

}  // namespace

struct T5Tokenizer::Processor {
  void* handle = nullptr;
  ~Processor() {
    if (handle) spm_module().close(handle);
  }
};

std::vector<std::string> T5Tokenizer::module_candidates() {
  std::vector<std::string> out;
  if (const char* env = std::getenv("ZEROSTUDIO_SENTENCEPIECE")) out.emplace_back(env);
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) out.push_back((exe.parent_path().parent_path() / "lib" / "zerostudio" / "libzs_sentencepiece.so").string());
#ifdef ZS_SENTENCEPIECE_INSTALLED
  out.emplace_back(ZS_SENTENCEPIECE_INSTALLED);
#endif
#ifdef ZS_SENTENCEPIECE_BUILT
  out.emplace_back(ZS_SENTENCEPIECE_BUILT);
#endif
  return out;
}

T5Tokenizer::T5Tokenizer() = default;
T5Tokenizer::~T5Tokenizer() = default;
T5Tokenizer::T5Tokenizer(T5Tokenizer&&) noexcept = default;
T5Tokenizer& T5Tokenizer::operator=(T5Tokenizer&&) noexcept = default;

T5Tokenizer T5Tokenizer::load(const std::string& spiece_model, std::int64_t extra_ids) {
  if (!fs::is_regular_file(spiece_model))
    throw Error(ErrorKind::config, spiece_model + ": missing (the T5 tokenizer's SentencePiece model, "
                                                  "tokenizer_2/spiece.model of a Flux folder)");
  const SpmModule& m = spm_module();
  T5Tokenizer t;
  t.sp_ = std::make_unique<Processor>();
  char error[512] = {0};
  t.sp_->handle = m.open(spiece_model.c_str(), error, sizeof error);
  if (!t.sp_->handle)
    throw Error(ErrorKind::config, spiece_model + ": not a SentencePiece model (" + error +
                                       "); put the model's own tokenizer_2/spiece.model there");
  const int pad = m.special_id(t.sp_->handle, 0), eos = m.special_id(t.sp_->handle, 1),
            unk = m.special_id(t.sp_->handle, 2);
  if (pad != kPad || eos != kEos || unk != kUnk)
    throw Error(ErrorKind::config, spiece_model + ": special ids pad " + std::to_string(pad) + ", eos " +
                                       std::to_string(eos) + ", unk " + std::to_string(unk) +
                                       " are not T5's (0, 1, 2): this is not a T5 tokenizer");
  check_extra_ids(extra_ids, spiece_model);
  t.extra_ids_ = extra_ids;
  t.path_ = spiece_model;
  t.added_ = {{"<pad>", kPad}, {"</s>", kEos}, {"<unk>", kUnk}};
  const std::int64_t pieces = m.piece_size(t.sp_->handle);
  for (std::int64_t i = 0; i < extra_ids; ++i)
    t.added_.emplace_back("<extra_id_" + std::to_string(i) + ">", pieces + extra_ids - 1 - i);
  return t;
}

T5Tokenizer T5Tokenizer::load_folder(const std::string& dir) {
  std::int64_t extra_ids = 100;
  const fs::path config = fs::path(dir) / "tokenizer_config.json";
  if (fs::exists(config)) {
    const nlohmann::json j = io::read_json_file(config.string(), "T5 tokenizer config");
    extra_ids = io::config_int(j, "extra_ids", extra_ids, config.string());
    check_extra_ids(extra_ids, config.string());  // named where the number is
  }
  return load((fs::path(dir) / "spiece.model").string(), extra_ids);
}

std::int64_t T5Tokenizer::vocab_size() const {
  return sp_ ? spm_module().piece_size(sp_->handle) + extra_ids_ : 0;
}

std::vector<std::int64_t> T5Tokenizer::encode(const std::string& text, std::int64_t max_length) const {
  if (!sp_) throw std::logic_error("T5Tokenizer: not loaded");
  if (max_length < 1) throw Error(ErrorKind::config, "T5 max_sequence_length must be at least 1");
  const SpmModule& m = spm_module();
  std::vector<std::int64_t> ids;
  auto encode_piece = [&](const std::string& piece) {
    if (piece.empty()) return;
    std::vector<int> out(piece.size() + 8);
    std::size_t count = 0;
    char error[512] = {0};
    for (int attempt = 0; attempt < 2; ++attempt) {
      if (m.encode(sp_->handle, piece.data(), piece.size(), out.data(), out.size(), &count, error, sizeof error) != 0)
        throw Error(ErrorKind::data, path_ + ": cannot encode a prompt (" + std::string(error) + ")");
      if (count <= out.size()) break;
      out.resize(count);
    }
    ids.insert(ids.end(), out.begin(), out.begin() + static_cast<std::ptrdiff_t>(count));
  };
  std::size_t pos = 0;
  while (pos < text.size()) {
    // The earliest added token from here (the longest at the same place).
    std::size_t best = std::string::npos, best_len = 0;
    std::int64_t best_id = 0;
    for (const auto& [s, id] : added_) {
      const std::size_t at = text.find(s, pos);
      if (at == std::string::npos) continue;
      if (at < best || (at == best && s.size() > best_len)) best = at, best_len = s.size(), best_id = id;
    }
    if (best == std::string::npos) {
      encode_piece(text.substr(pos));
      break;
    }
    encode_piece(text.substr(pos, best - pos));
    ids.push_back(best_id);
    pos = best + best_len;
  }
  if (static_cast<std::int64_t>(ids.size()) > max_length - 1) ids.resize(static_cast<std::size_t>(max_length - 1));
  ids.push_back(kEos);
  ids.resize(static_cast<std::size_t>(max_length), kPad);
  return ids;
}

}  // namespace zs::models
