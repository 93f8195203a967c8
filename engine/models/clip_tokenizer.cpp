#include "models/clip_tokenizer.h"

#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

#include <nlohmann/json.hpp>
#include <unicode/locid.h>
#include <unicode/normalizer2.h>
#include <unicode/regex.h>
#include <unicode/uchar.h>
#include <unicode/unistr.h>

#include "core/error.h"

namespace zs::models {
namespace {

namespace fs = std::filesystem;

std::string utf8(UChar32 c) {
  std::string out;
  icu::UnicodeString(c).toUTF8String(out);
  return out;
}

/// GPT-2/CLIP's table: printable bytes stand for themselves, the others for 256 + n.
std::vector<std::string> make_byte_encoder() {
  std::vector<int> bs;
  for (int b = '!'; b <= '~'; ++b) bs.push_back(b);
  for (int b = 0xA1; b <= 0xAC; ++b) bs.push_back(b);
  for (int b = 0xAE; b <= 0xFF; ++b) bs.push_back(b);
  std::vector<std::string> table(256);
  std::vector<bool> direct(256, false);
  for (int b : bs) direct[static_cast<std::size_t>(b)] = true;
  int n = 0;
  for (int b = 0; b < 256; ++b) table[static_cast<std::size_t>(b)] = utf8(direct[static_cast<std::size_t>(b)] ? b : 256 + n++);
  return table;
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

/// UTF-8 code points of `s`, each as its own string.
std::vector<std::string> characters(const std::string& s) {
  std::vector<std::string> out;
  for (std::size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    const std::size_t len = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : 4;
    out.push_back(s.substr(i, len));
    i += len;
  }
  return out;
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
  const fs::path vocab_path = root / "vocab.json";
  nlohmann::json vocab;
  try {
    vocab = nlohmann::json::parse(read_file(vocab_path));
  } catch (const nlohmann::json::exception& e) {
    throw Error(ErrorKind::config, vocab_path.string() + ": not valid JSON (" + e.what() + ")");
  }
  if (!vocab.is_object() || vocab.empty())
    throw Error(ErrorKind::config, vocab_path.string() + ": expected an object of token -> id");
  t.id_to_token_.resize(vocab.size());
  for (const auto& [token, id] : vocab.items()) {
    if (!id.is_number_integer() || id.get<std::int64_t>() < 0 || id.get<std::size_t>() >= vocab.size())
      throw Error(ErrorKind::config, vocab_path.string() + ": id of \"" + token + "\" is not in 0.." +
                                         std::to_string(vocab.size() - 1));
    t.vocab_[token] = id.get<std::int64_t>();
    t.id_to_token_[id.get<std::size_t>()] = token;
  }
  std::istringstream merges(read_file(root / "merges.txt"));
  std::string line;
  int rank = 0, line_no = 0;
  while (std::getline(merges, line)) {
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty() || line.starts_with("#version")) continue;
    const auto space = line.find(' ');
    if (space == std::string::npos)
      throw Error(ErrorKind::config, (root / "merges.txt").string() + ":" + std::to_string(line_no) +
                                         ": expected two symbols separated by a space");
    t.ranks_[{line.substr(0, space), line.substr(space + 1)}] = rank++;
  }
  t.byte_encoder_ = make_byte_encoder();
  auto id_of = [&](const std::string& token, std::int64_t fallback) {
    const auto it = t.vocab_.find(token);
    return it == t.vocab_.end() ? fallback : it->second;
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
        if (!t.vocab_.count(pad)) throw Error(ErrorKind::config, special.string() + ": pad_token \"" + pad + "\" is not in vocab.json");
        t.pad_ = t.vocab_[pad];
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

std::vector<std::string> ClipTokenizer::bpe(const std::string& piece) const {
  std::vector<std::string> word = characters(piece);
  if (word.empty()) return {};
  word.back() += "</w>";
  while (word.size() > 1) {
    int best = std::numeric_limits<int>::max();
    std::size_t at = 0;
    for (std::size_t i = 0; i + 1 < word.size(); ++i) {
      const auto it = ranks_.find({word[i], word[i + 1]});
      if (it != ranks_.end() && it->second < best) {
        best = it->second;
        at = i;
      }
    }
    if (best == std::numeric_limits<int>::max()) break;
    // Merge every occurrence of that pair, left to right.
    const std::string first = word[at], second = word[at + 1];
    std::vector<std::string> merged;
    for (std::size_t i = 0; i < word.size();) {
      if (i + 1 < word.size() && word[i] == first && word[i + 1] == second) {
        merged.push_back(first + second);
        i += 2;
      } else {
        merged.push_back(word[i++]);
      }
    }
    word = std::move(merged);
  }
  return word;
}

std::vector<std::string> ClipTokenizer::tokens(const std::string& text) const {
  std::vector<std::string> out;
  for (const std::string& piece : pieces(text)) {
    std::string mapped;
    for (unsigned char b : piece) mapped += byte_encoder_[b];
    for (auto& t : bpe(mapped)) out.push_back(std::move(t));
  }
  return out;
}

std::vector<std::int64_t> ClipTokenizer::encode(const std::string& text) const {
  std::vector<std::int64_t> ids;
  for (const std::string& t : tokens(text)) {
    const auto it = vocab_.find(t);
    if (it == vocab_.end()) throw Error(ErrorKind::config, "CLIP tokenizer: \"" + t + "\" is not in the vocabulary");
    ids.push_back(it->second);
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
