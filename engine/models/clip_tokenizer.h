#pragma once
// CLIP's byte-level BPE tokenizer (openai/CLIP simple_tokenizer.py, transformers CLIPTokenizer)
// from a diffusers `tokenizer/` folder: vocab.json + merges.txt (+ special_tokens_map.json for
// the padding token). Text is NFC-normalised, whitespace collapsed, lower-cased and split by
// CLIP's pattern (ICU for Unicode letter/number classes); each piece's UTF-8 bytes go through the
// byte-to-unicode table and BPE with `</w>` word ends (models/byte_level_bpe.h).

#include <cstdint>
#include <string>
#include <vector>

#include "models/byte_level_bpe.h"

namespace zs::models {

class ClipTokenizer {
 public:
  /// Reads `dir`/vocab.json, merges.txt and (optional) special_tokens_map.json. Throws
  /// zs::Error(io/config) naming the file when one is missing or malformed.
  static ClipTokenizer load(const std::string& dir);

  /// BPE ids of `text`, without bos/eos.
  std::vector<std::int64_t> encode(const std::string& text) const;
  /// The BPE strings of encode(text) ("photo</w>", …).
  std::vector<std::string> tokens(const std::string& text) const;
  /// bos + ids[:max_length-2] + eos, padded to max_length with the padding token: [max_length].
  std::vector<std::int64_t> frame(const std::string& text) const;

  std::int64_t bos_id() const { return bos_; }
  std::int64_t eos_id() const { return eos_; }
  std::int64_t pad_id() const { return pad_; }
  /// Pads with another token (SDXL's second tokenizer pads with "!", id 0, where no
  /// special_tokens_map.json says so).
  void set_pad_id(std::int64_t id) { pad_ = id; }
  int max_length() const { return max_length_; }
  std::size_t vocab_size() const { return bpe_.vocab_size(); }

 private:
  std::vector<std::string> pieces(const std::string& text) const;

  ByteLevelBpe bpe_;
  std::int64_t bos_ = 49406, eos_ = 49407, pad_ = 49407;
  int max_length_ = 77;
};

}  // namespace zs::models
