#pragma once
// Qwen2's tokenizer (transformers' models/qwen2/tokenization_qwen2.py and tokenizer.json's
// pipeline): NFC, the added/special tokens (<|im_start|>, <|im_end|>, <|endoftext|>, …) matched
// first and kept whole, Qwen2's pre-tokenizer pattern on the rest, each piece's UTF-8 bytes
// through the byte-to-unicode table and byte-level BPE (no word-end marker), from a diffusers
// `tokenizer/` folder (vocab.json + merges.txt + tokenizer_config.json's added tokens, or
// tokenizer.json alone).

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace zs::models {

class QwenTokenizer {
 public:
  /// Throws zs::Error naming the file and key when a file or a required special token is missing.
  static QwenTokenizer load(const std::string& dir);
  /// Token ids of `text`, special tokens in the text recognised; no bos/eos added (Qwen2 adds none).
  std::vector<std::int64_t> encode(const std::string& text) const;
  std::int64_t pad_id() const;
  std::size_t vocab_size() const;

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

}  // namespace zs::models
