#include "models/word_tokenizer.h"

#include <algorithm>
#include <cctype>
#include <set>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/atomic_file.h"
#include "io/json_file.h"

namespace zs::models {

namespace {
constexpr const char* kFormat = "zerostudio-word-tokenizer";
}

std::vector<std::string> WordTokenizer::split(const std::string& text) {
  std::vector<std::string> words;
  std::string cur;
  for (const unsigned char ch : text) {
    if (std::isalnum(ch) || ch >= 0x80 || ch == '\'') {
      cur += static_cast<char>(std::tolower(ch));
      continue;
    }
    if (!cur.empty()) words.push_back(std::move(cur));
    cur.clear();
    if (!std::isspace(ch)) words.emplace_back(1, static_cast<char>(ch));
  }
  if (!cur.empty()) words.push_back(std::move(cur));
  return words;
}

WordTokenizer WordTokenizer::build(const std::vector<std::string>& captions, std::int64_t max_length) {
  if (max_length < 3) throw Error(ErrorKind::config, "tokenizer max_length must be at least 3");
  std::set<std::string> words;
  for (const auto& c : captions)
    for (auto& w : split(c)) words.insert(std::move(w));
  WordTokenizer tok;
  tok.max_length_ = max_length;
  tok.vocab_ = {kBos, kEos, kUnknown};
  tok.vocab_.insert(tok.vocab_.end(), words.begin(), words.end());
  for (std::size_t i = 0; i < tok.vocab_.size(); ++i) tok.ids_[tok.vocab_[i]] = static_cast<std::int64_t>(i);
  return tok;
}

WordTokenizer WordTokenizer::load(const std::string& path) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(io::read_file(path));
  } catch (const nlohmann::json::exception& e) {
    throw Error(ErrorKind::io, path + ": not a valid tokenizer file: " + e.what());
  }
  if (!j.is_object() || !j.contains("format") || j["format"] != kFormat)
    throw Error(ErrorKind::io, path + ": not a ZeroStudio word tokenizer (format \"" + std::string(kFormat) + "\")");
  const nlohmann::json version = j.contains("version") ? j["version"] : nlohmann::json();
  if (!version.is_number_integer() || version.get<std::int64_t>() != 1)
    throw Error(ErrorKind::io, path + ": tokenizer version " + version.dump() + " is not supported (this build reads version 1)");
  WordTokenizer tok;
  if (!j.contains("max_length")) throw Error(ErrorKind::io, path + ": max_length is missing");
  // Bounded before encode() allocates that many ids (issue 59 item 2); an integer, not a cast float.
  tok.max_length_ = io::json_int(j, "max_length", 0, 2, io::kMaxConfigCount, path);
  try {
    tok.vocab_ = j.at("vocab").get<std::vector<std::string>>();
  } catch (const nlohmann::json::exception& e) {
    throw Error(ErrorKind::io, path + ": " + e.what());
  }
  if (tok.vocab_.size() < 3 || tok.vocab_[0] != kBos || tok.vocab_[1] != kEos || tok.vocab_[2] != kUnknown)
    throw Error(ErrorKind::io, path + ": vocab must start with the special tokens");
  for (std::size_t i = 0; i < tok.vocab_.size(); ++i) tok.ids_[tok.vocab_[i]] = static_cast<std::int64_t>(i);
  return tok;
}

void WordTokenizer::save(const std::string& path) const {
  const nlohmann::json j = {{"format", kFormat}, {"version", 1}, {"max_length", max_length_}, {"vocab", vocab_}};
  io::write_file_atomic(path, j.dump(1) + "\n");
}

std::vector<std::int64_t> WordTokenizer::encode(const std::string& text) const {
  std::vector<std::int64_t> ids{bos_id()};
  for (const auto& w : split(text)) {
    if (static_cast<std::int64_t>(ids.size()) >= max_length_ - 1) break;
    const auto it = ids_.find(w);
    ids.push_back(it == ids_.end() ? unknown_id() : it->second);
  }
  ids.resize(static_cast<std::size_t>(max_length_), eos_id());
  return ids;
}

at::Tensor WordTokenizer::encode_batch(const std::vector<std::string>& texts) const {
  at::Tensor out = at::empty({static_cast<std::int64_t>(texts.size()), max_length_}, at::kLong);
  auto* p = out.data_ptr<std::int64_t>();
  for (const auto& t : texts) {
    const auto ids = encode(t);
    std::copy(ids.begin(), ids.end(), p);
    p += max_length_;
  }
  return out;
}

}  // namespace zs::models
