#include "models/byte_level_bpe.h"

#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

#include <nlohmann/json.hpp>
#include <unicode/unistr.h>

#include "core/error.h"

namespace zs::models {
namespace {

std::string bpe_utf8(UChar32 c) {
  std::string out;
  icu::UnicodeString(c).toUTF8String(out);
  return out;
}

std::string read_bpe_file(const std::string& path, const std::string& what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(ErrorKind::io, path + ": cannot be read (" + what + " needs vocab.json and merges.txt)");
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

/// vocab.json's object (or tokenizer.json's model.vocab) into `vocab`; ids must be 0..n−1.
void read_bpe_vocab(const nlohmann::json& vocab, const std::string& source,
                std::unordered_map<std::string, std::int64_t>& out) {
  if (!vocab.is_object() || vocab.empty())
    throw Error(ErrorKind::config, source + ": expected an object of token -> id");
  out.reserve(vocab.size());
  for (const auto& [token, id] : vocab.items()) {
    if (!id.is_number_integer() || id.get<std::int64_t>() < 0 || id.get<std::size_t>() >= vocab.size())
      throw Error(ErrorKind::config, source + ": id of \"" + token + "\" is not in 0.." + std::to_string(vocab.size() - 1));
    out[token] = id.get<std::int64_t>();
  }
}

}  // namespace

const std::vector<std::string>& byte_to_unicode() {
  static const std::vector<std::string> table = [] {
    std::vector<bool> direct(256, false);
    for (int b = '!'; b <= '~'; ++b) direct[static_cast<std::size_t>(b)] = true;
    for (int b = 0xA1; b <= 0xAC; ++b) direct[static_cast<std::size_t>(b)] = true;
    for (int b = 0xAE; b <= 0xFF; ++b) direct[static_cast<std::size_t>(b)] = true;
    std::vector<std::string> t(256);
    int n = 0;
    for (int b = 0; b < 256; ++b) t[static_cast<std::size_t>(b)] = bpe_utf8(direct[static_cast<std::size_t>(b)] ? b : 256 + n++);
    return t;
  }();
  return table;
}

std::string byte_level_text(const std::string& raw) {
  const auto& table = byte_to_unicode();
  std::string out;
  out.reserve(raw.size() * 2);
  for (unsigned char b : raw) out += table[b];
  return out;
}

std::vector<std::string> utf8_characters(const std::string& s) {
  std::vector<std::string> out;
  for (std::size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    const std::size_t len = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : 4;
    out.push_back(s.substr(i, len));
    i += len;
  }
  return out;
}

void ByteLevelBpe::add_merge(const std::string& first, const std::string& second, const std::string& where) {
  if (first.empty() || second.empty())
    throw Error(ErrorKind::config, where + ": expected two symbols separated by a space");
  // A pair listed twice keeps its later rank, as the tokenizers library's BPE builder does.
  ranks_[first + " " + second] = next_rank_++;
}

ByteLevelBpe ByteLevelBpe::from_files(const std::string& vocab_path, const std::string& merges_path,
                                      const std::string& what) {
  ByteLevelBpe bpe;
  nlohmann::json vocab;
  try {
    vocab = nlohmann::json::parse(read_bpe_file(vocab_path, what));
  } catch (const nlohmann::json::exception& e) {
    throw Error(ErrorKind::config, vocab_path + ": not valid JSON (" + e.what() + ")");
  }
  read_bpe_vocab(vocab, vocab_path, bpe.vocab_);
  std::istringstream merges(read_bpe_file(merges_path, what));
  std::string line;
  int line_no = 0;
  while (std::getline(merges, line)) {
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty() || line.starts_with("#version")) continue;
    const auto space = line.find(' ');
    const std::string where = merges_path + ":" + std::to_string(line_no);
    if (space == std::string::npos) throw Error(ErrorKind::config, where + ": expected two symbols separated by a space");
    bpe.add_merge(line.substr(0, space), line.substr(space + 1), where);
  }
  return bpe;
}

ByteLevelBpe ByteLevelBpe::from_tokenizer_json(const nlohmann::json& model, const std::string& source) {
  if (!model.is_object() || model.value("type", std::string()) != "BPE")
    throw Error(ErrorKind::config, source + ": model.type: expected \"BPE\" (a byte-level BPE tokenizer)");
  ByteLevelBpe bpe;
  read_bpe_vocab(model.contains("vocab") ? model["vocab"] : nlohmann::json(), source + ": model.vocab", bpe.vocab_);
  if (!model.contains("merges") || !model["merges"].is_array())
    throw Error(ErrorKind::config, source + ": model.merges: expected a list of merges");
  std::size_t i = 0;
  for (const auto& m : model["merges"]) {
    const std::string where = source + ": model.merges[" + std::to_string(i++) + "]";
    if (m.is_string()) {
      const std::string s = m.get<std::string>();
      const auto space = s.find(' ');
      if (space == std::string::npos) throw Error(ErrorKind::config, where + ": expected two symbols separated by a space");
      bpe.add_merge(s.substr(0, space), s.substr(space + 1), where);
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      bpe.add_merge(m[0].get<std::string>(), m[1].get<std::string>(), where);
    } else {
      throw Error(ErrorKind::config, where + ": expected \"a b\" or [\"a\", \"b\"]");
    }
  }
  return bpe;
}

std::vector<std::string> ByteLevelBpe::merge(const std::string& word, const std::string& end_of_word) const {
  std::vector<std::string> symbols = utf8_characters(word);
  if (symbols.empty()) return {};
  symbols.back() += end_of_word;
  while (symbols.size() > 1) {
    int best = std::numeric_limits<int>::max();
    std::size_t at = 0;
    for (std::size_t i = 0; i + 1 < symbols.size(); ++i) {
      const auto it = ranks_.find(symbols[i] + " " + symbols[i + 1]);
      if (it != ranks_.end() && it->second < best) {
        best = it->second;
        at = i;
      }
    }
    if (best == std::numeric_limits<int>::max()) break;
    // Merge every occurrence of that pair, left to right.
    const std::string first = symbols[at], second = symbols[at + 1];
    std::vector<std::string> merged;
    merged.reserve(symbols.size());
    for (std::size_t i = 0; i < symbols.size();) {
      if (i + 1 < symbols.size() && symbols[i] == first && symbols[i + 1] == second) {
        merged.push_back(first + second);
        i += 2;
      } else {
        merged.push_back(symbols[i++]);
      }
    }
    symbols = std::move(merged);
  }
  return symbols;
}

std::int64_t ByteLevelBpe::id(const std::string& token) const {
  const auto it = vocab_.find(token);
  return it == vocab_.end() ? -1 : it->second;
}

}  // namespace zs::models
