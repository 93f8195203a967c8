#include "models/clip_tokenizer.h"

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include <nlohmann/json.hpp>
#include <unicode/locid.h>
#include <unicode/normalizer2.h>
#include <unicode/regex.h>
#include <unicode/uchar.h>
#include <unicode/unistr.h>

#include "core/error.h"
#include "models/byte_level_bpe.h"

namespace zs::models {
namespace {

namespace fs = std::filesystem;

std::string utf8(UChar32 c) {
  std::string out;
  icu::UnicodeString(c).toUTF8String(out);
  return out;
}

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) throw Error(ErrorKind::io, p.string() + ": cannot be read (a CLIP tokenizer folder needs vocab.json and merges.txt)");
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

/// A token in special_tokens_map.json: a string, or an object with "content".
std::string token_text(const nlohmann::json& j) {
  if (j.is_string()) return j.get<std::string>();
  if (j.is_object() && j.contains("content") && j["content"].is_string()) return j["content"].get<std::string>();
  return {};
}

/// Python's html.unescape for what prompts carry: &amp; &lt; &gt; &quot; &apos; &#N; &#xH;.
std::string unescape_html(const std::string& s) {
  std::string out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '&') {
      out += s[i];
      continue;
    }
    const std::size_t semi = s.find(';', i);
    if (semi == std::string::npos || semi - i > 10) {
      out += s[i];
      continue;
    }
    const std::string name = s.substr(i + 1, semi - i - 1);
    static const std::map<std::string, std::string> named = {
        {"amp", "&"}, {"lt", "<"}, {"gt", ">"}, {"quot", "\""}, {"apos", "'"}, {"nbsp", "\xC2\xA0"}};
    std::string rep;
    if (const auto it = named.find(name); it != named.end()) {
      rep = it->second;
    } else if (name.size() > 1 && name[0] == '#') {
      try {
        const bool hex = name[1] == 'x' || name[1] == 'X';
        const long cp = std::stol(name.substr(hex ? 2 : 1), nullptr, hex ? 16 : 10);
        if (cp > 0 && cp <= 0x10FFFF) rep = utf8(static_cast<UChar32>(cp));
      } catch (const std::exception&) {
      }
    }
    if (rep.empty()) {
      out += s[i];
      continue;
    }
    out += rep;
    i = semi;
  }
  return out;
}

}  // namespace

ClipTokenizer ClipTokenizer::load(const std::string& dir) {
  ClipTokenizer t;
  const fs::path root(dir);
  t.bpe_ = ByteLevelBpe::from_files((root / "vocab.json").string(), (root / "merges.txt").string(),
                                    "a CLIP tokenizer folder");
  auto id_of = [&](const std::string& token, std::int64_t fallback) {
    const std::int64_t id = t.bpe_.id(token);
    return id < 0 ? fallback : id;
  };
  t.bos_ = id_of("<|startoftext|>", t.bos_);
  t.eos_ = id_of("<|endoftext|>", t.eos_);
  t.pad_ = t.eos_;
  const fs::path special = root / "special_tokens_map.json";
  if (fs::exists(special)) {
    const auto j = nlohmann::json::parse(read_file(special), nullptr, false);
    if (j.is_object() && j.contains("pad_token")) {
      const std::string pad = token_text(j["pad_token"]);
      if (!pad.empty()) {
        if (t.bpe_.id(pad) < 0)
          throw Error(ErrorKind::config, special.string() + ": pad_token \"" + pad + "\" is not in vocab.json");
        t.pad_ = t.bpe_.id(pad);
      }
    }
  }
  const fs::path config = root / "tokenizer_config.json";
  if (fs::exists(config)) {
    const auto j = nlohmann::json::parse(read_file(config), nullptr, false);
    if (j.is_object() && j.contains("model_max_length") && j["model_max_length"].is_number_integer() &&
        j["model_max_length"].get<std::int64_t>() < 100000)
      t.max_length_ = static_cast<int>(j["model_max_length"].get<std::int64_t>());
  }
  return t;
}

std::vector<std::string> ClipTokenizer::pieces(const std::string& text) const {
  UErrorCode status = U_ZERO_ERROR;
  icu::UnicodeString s = icu::UnicodeString::fromUTF8(unescape_html(unescape_html(text)));
  const icu::Normalizer2* nfc = icu::Normalizer2::getNFCInstance(status);
  if (U_SUCCESS(status)) s = nfc->normalize(s, status);
  // Collapse whitespace runs to one space and strip, then lower-case (Python's str.lower()).
  icu::UnicodeString collapsed;
  bool space = false;
  for (int32_t i = 0; i < s.length();) {
    const UChar32 c = s.char32At(i);
    i += U16_LENGTH(c);
    if (u_isUWhiteSpace(c) || c == 0x1C || c == 0x1D || c == 0x1E || c == 0x1F || c == 0x85) {
      space = !collapsed.isEmpty();
      continue;
    }
    if (space) collapsed.append(static_cast<UChar>(' '));
    space = false;
    collapsed.append(c);
  }
  collapsed.toLower(icu::Locale::getRoot());
  static const icu::UnicodeString pattern = icu::UnicodeString::fromUTF8(
      "<\\|startoftext\\|>|<\\|endoftext\\|>|'s|'t|'re|'ve|'m|'ll|'d|[\\p{L}]+|[\\p{N}]|[^\\s\\p{L}\\p{N}]+");
  status = U_ZERO_ERROR;
  icu::RegexMatcher matcher(pattern, collapsed, UREGEX_CASE_INSENSITIVE, status);
  std::vector<std::string> out;
  if (U_FAILURE(status)) throw Error(ErrorKind::config, "CLIP tokenizer: ICU regex failed to compile");
  while (matcher.find(status) && U_SUCCESS(status)) {
    std::string piece;
    matcher.group(status).toUTF8String(piece);
    out.push_back(std::move(piece));
  }
  return out;
}

std::vector<std::string> ClipTokenizer::tokens(const std::string& text) const {
  std::vector<std::string> out;
  for (const std::string& piece : pieces(text)) {
    for (auto& t : bpe_.merge(byte_level_text(piece), "</w>")) out.push_back(std::move(t));
  }
  return out;
}

std::vector<std::int64_t> ClipTokenizer::encode(const std::string& text) const {
  std::vector<std::int64_t> ids;
  for (const std::string& t : tokens(text)) {
    const std::int64_t id = bpe_.id(t);
    if (id < 0) throw Error(ErrorKind::config, "CLIP tokenizer: \"" + t + "\" is not in the vocabulary");
    ids.push_back(id);
  }
  return ids;
}

std::vector<std::int64_t> ClipTokenizer::frame(const std::string& text) const {
  const std::vector<std::int64_t> ids = encode(text);
  std::vector<std::int64_t> out{bos_};
  const std::size_t keep = std::min<std::size_t>(ids.size(), static_cast<std::size_t>(max_length_ - 2));
  out.insert(out.end(), ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(keep));
  out.push_back(eos_);
  out.resize(static_cast<std::size_t>(max_length_), pad_);
  return out;
}

}  // namespace zs::models
