#pragma once
// The byte-level BPE core that CLIP's and Qwen2's tokenizers share (GPT-2's encoder.py; transformers'
// CLIPTokenizer and the `tokenizers` library's BPE model): the byte-to-unicode table that turns a
// piece's UTF-8 bytes into printable stand-in characters, a vocabulary (token → id) and ranked
// merges, and the merge loop. What comes before (normalisation, the pre-tokenizer's pattern,
// special tokens) and the word-end marker (CLIP's "</w>", none for Qwen2) are the tokenizers'.

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace zs::models {

/// GPT-2's table: printable bytes stand for themselves, the others for U+0100 + n; [256] UTF-8 strings.
const std::vector<std::string>& byte_to_unicode();
/// `raw`'s UTF-8 bytes, each as its byte_to_unicode() stand-in.
std::string byte_level_text(const std::string& raw);
/// The UTF-8 code points of `s`, each as its own string.
std::vector<std::string> utf8_characters(const std::string& s);

class ByteLevelBpe {
 public:
  /// From a vocab.json (an object of token → id, ids 0..n−1) and a merges.txt (one "a b" pair a
  /// line, best first; a "#version" line is skipped). Throws zs::Error(io/config) naming the file
  /// (and line) when one is missing or malformed; `what` names the folder's kind in the message.
  static ByteLevelBpe from_files(const std::string& vocab_path, const std::string& merges_path,
                                 const std::string& what);
  /// From tokenizer.json's "model" object (type "BPE": "vocab", "merges" as "a b" strings or
  /// [a, b] pairs); errors name `source`.
  static ByteLevelBpe from_tokenizer_json(const nlohmann::json& model, const std::string& source);

  /// The BPE symbols of `word` (byte-level text): its characters, `end_of_word` appended to the
  /// last, merged pair by pair in rank order (every occurrence of the best pair, left to right).
  std::vector<std::string> merge(const std::string& word, const std::string& end_of_word = "") const;
  /// The id of `token`, or −1 when the vocabulary lacks it.
  std::int64_t id(const std::string& token) const;
  std::size_t vocab_size() const { return vocab_.size(); }

 private:
  void add_merge(const std::string& first, const std::string& second, const std::string& where);

  std::unordered_map<std::string, std::int64_t> vocab_;
  std::unordered_map<std::string, int> ranks_;  // "first second" → rank (byte-level text has no spaces)
  int next_rank_ = 0;
};

}  // namespace zs::models
