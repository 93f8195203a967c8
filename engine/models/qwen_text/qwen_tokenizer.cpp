#include "models/qwen_text/qwen_tokenizer.h"

#include <algorithm>
#include <filesystem>

#include <nlohmann/json.hpp>
#include <unicode/normalizer2.h>
#include <unicode/regex.h>
#include <unicode/unistr.h>

#include "core/error.h"
#include "io/json_file.h"
#include "models/byte_level_bpe.h"

namespace zs::models {
namespace {

namespace fs = std::filesystem;

/// transformers' models/qwen2/tokenization_qwen2.py PRETOKENIZE_REGEX, verbatim.
constexpr const char* kQwen2Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

/// The chat tokens Qwen-Image's prompt template is made of, and the padding token.
constexpr const char* kRequiredTokens[] = {"<|endoftext|>", "<|im_start|>", "<|im_end|>"};

struct QwenAddedToken {
  std::string content;
  std::int64_t id = 0;
};

/// A token in tokenizer_config.json: a string, or an object with "content".
std::string qwen_token_text(const nlohmann::json& j) {
  if (j.is_string()) return j.get<std::string>();
  if (j.is_object() && j.contains("content") && j["content"].is_string()) return j["content"].get<std::string>();
  return {};
}

/// {"content": …} entries of tokenizer.json's "added_tokens" or tokenizer_config.json's
/// "added_tokens_decoder" (id → entry).
void read_qwen_added(const nlohmann::json& entry, std::int64_t id, const std::string& where, std::vector<QwenAddedToken>& out) {
  const std::string content = qwen_token_text(entry);
  if (content.empty() || id < 0) throw Error(ErrorKind::config, where + ": expected {\"content\": …} with an id ≥ 0");
  out.push_back({content, id});
}

}  // namespace

struct QwenTokenizer::Impl {
  ByteLevelBpe bpe;
  std::vector<QwenAddedToken> added;  // longest first, so the first match at a position is the longest
  std::int64_t pad = -1;
  std::size_t size = 0;
  std::unique_ptr<icu::RegexPattern> pattern;

  std::int64_t added_id(const std::string& token) const {
    for (const auto& a : added)
      if (a.content == token) return a.id;
    return -1;
  }

  /// Text between added tokens: NFC, Qwen2's pattern (the gaps kept, as the tokenizers library's
  /// "isolated" split does), each piece's bytes through BPE.
  void encode_plain(const std::string& text, std::vector<std::int64_t>& ids) const {
    if (text.empty()) return;
    UErrorCode status = U_ZERO_ERROR;
    icu::UnicodeString s = icu::UnicodeString::fromUTF8(text);
    const icu::Normalizer2* nfc = icu::Normalizer2::getNFCInstance(status);
    if (U_SUCCESS(status)) s = nfc->normalize(s, status);
    if (U_FAILURE(status)) throw Error(ErrorKind::config, "Qwen tokenizer: ICU could not NFC-normalise the text");
    std::unique_ptr<icu::RegexMatcher> m(pattern->matcher(s, status));
    if (U_FAILURE(status)) throw Error(ErrorKind::config, "Qwen tokenizer: ICU regex matcher failed");
    auto piece = [&](std::int32_t from, std::int32_t to) {
      if (to <= from) return;
      std::string utf8;
      s.tempSubStringBetween(from, to).toUTF8String(utf8);
      for (const std::string& t : bpe.merge(byte_level_text(utf8))) {
        const std::int64_t id = bpe.id(t);
        if (id < 0) throw Error(ErrorKind::config, "Qwen tokenizer: \"" + t + "\" is not in the vocabulary (vocab.json lacks a byte?)");
        ids.push_back(id);
      }
    };
    std::int32_t last = 0;
    while (m->find(status) && U_SUCCESS(status)) {
      const std::int32_t start = m->start(status), end = m->end(status);
      piece(last, start);
      piece(start, end);
      last = end;
    }
    piece(last, s.length());
  }
};

QwenTokenizer QwenTokenizer::load(const std::string& dir) {
  auto impl = std::make_shared<Impl>();
  const fs::path root(dir);
  const fs::path tokenizer_json = root / "tokenizer.json";
  const fs::path config_path = root / "tokenizer_config.json";
  nlohmann::json config;
  if (fs::exists(config_path)) config = io::read_json_file(config_path.string(), "Qwen tokenizer config");
  std::string added_source;  // the file the added tokens came from, for errors
  if (fs::exists(tokenizer_json)) {
    // transformers 5 takes tokenizer.json's vocabulary, merges and added tokens and applies
    // Qwen2Tokenizer's own normaliser and pre-tokenizer (tokenization_utils_tokenizers.py).
    const std::string path = tokenizer_json.string();
    const nlohmann::json j = io::read_json_file(path, "Qwen tokenizer (tokenizer.json)");
    impl->bpe = ByteLevelBpe::from_tokenizer_json(j.contains("model") ? j["model"] : nlohmann::json(), path);
    if (j.contains("added_tokens")) {
      if (!j["added_tokens"].is_array()) throw Error(ErrorKind::config, path + ": added_tokens: expected a list");
      std::size_t i = 0;
      for (const auto& a : j["added_tokens"]) {
        const std::string where = path + ": added_tokens[" + std::to_string(i++) + "]";
        read_qwen_added(a, a.is_object() && a.contains("id") && a["id"].is_number_integer() ? a["id"].get<std::int64_t>() : -1,
                   where, impl->added);
      }
    }
    added_source = path + ": added_tokens";
  } else {
    impl->bpe = ByteLevelBpe::from_files((root / "vocab.json").string(), (root / "merges.txt").string(),
                                         "a Qwen tokenizer folder (or tokenizer.json)");
    if (config.is_object() && config.contains("added_tokens_decoder")) {
      const auto& dec = config["added_tokens_decoder"];
      if (!dec.is_object()) throw Error(ErrorKind::config, config_path.string() + ": added_tokens_decoder: expected an object");
      for (const auto& [key, entry] : dec.items()) {
        std::int64_t id = -1;
        try {
          id = std::stoll(key);
        } catch (const std::exception&) {
        }
        read_qwen_added(entry, id, config_path.string() + ": added_tokens_decoder[\"" + key + "\"]", impl->added);
      }
      added_source = config_path.string() + ": added_tokens_decoder";
    } else if (fs::exists(root / "added_tokens.json")) {
      // Older folders list them in added_tokens.json (token → id) only.
      const std::string path = (root / "added_tokens.json").string();
      const nlohmann::json j = io::read_json_file(path, "Qwen added tokens");
      if (!j.is_object()) throw Error(ErrorKind::config, path + ": expected an object of token -> id");
      for (const auto& [token, id] : j.items())
        read_qwen_added(token, id.is_number_integer() ? id.get<std::int64_t>() : -1, path + ": \"" + token + "\"", impl->added);
      added_source = path;
    } else {
      added_source = config_path.string() + ": added_tokens_decoder";
    }
  }
  for (const char* required : kRequiredTokens)
    if (impl->added_id(required) < 0)
      throw Error(ErrorKind::config, added_source + ": has no \"" + std::string(required) +
                                         "\" (the chat templates of Qwen-Image and Z-Image need <|im_start|>, <|im_end|> "
                                         "and <|endoftext|> as added tokens; use the pipeline's own tokenizer folder: "
                                         "Qwen2.5-VL's, Qwen3's)");
  std::stable_sort(impl->added.begin(), impl->added.end(),
                   [](const QwenAddedToken& a, const QwenAddedToken& b) { return a.content.size() > b.content.size(); });

  impl->pad = impl->added_id("<|endoftext|>");
  if (config.is_object() && config.contains("pad_token") && !config["pad_token"].is_null()) {
    const std::string pad = qwen_token_text(config["pad_token"]);
    const std::int64_t id = impl->added_id(pad) >= 0 ? impl->added_id(pad) : impl->bpe.id(pad);
    if (id < 0) throw Error(ErrorKind::config, config_path.string() + ": pad_token \"" + pad + "\" is not a token of this tokenizer");
    impl->pad = id;
  }
  impl->size = impl->bpe.vocab_size();
  for (const auto& a : impl->added) impl->size = std::max(impl->size, static_cast<std::size_t>(a.id + 1));

  UErrorCode status = U_ZERO_ERROR;
  UParseError parse{};
  impl->pattern.reset(icu::RegexPattern::compile(icu::UnicodeString::fromUTF8(kQwen2Pattern), 0, parse, status));
  if (U_FAILURE(status)) throw Error(ErrorKind::config, "Qwen tokenizer: ICU cannot compile Qwen2's pattern");
  QwenTokenizer t;
  t.impl_ = std::move(impl);
  return t;
}

std::vector<std::int64_t> QwenTokenizer::encode(const std::string& text) const {
  std::vector<std::int64_t> ids;
  std::size_t start = 0, i = 0;
  while (i < text.size()) {
    const QwenAddedToken* hit = nullptr;
    for (const auto& a : impl_->added)
      if (text.compare(i, a.content.size(), a.content) == 0) {
        hit = &a;  // the longest: the list is longest first
        break;
      }
    if (!hit) {
      ++i;
      continue;
    }
    impl_->encode_plain(text.substr(start, i - start), ids);
    ids.push_back(hit->id);
    i += hit->content.size();
    start = i;
  }
  impl_->encode_plain(text.substr(start), ids);
  return ids;
}

std::int64_t QwenTokenizer::pad_id() const { return impl_->pad; }

std::size_t QwenTokenizer::vocab_size() const { return impl_->size; }

std::int64_t QwenTokenizer::token_id(const std::string& token) const {
  const std::int64_t id = impl_->added_id(token);
  return id >= 0 ? id : impl_->bpe.id(token);
}

}  // namespace zs::models
