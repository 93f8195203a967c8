#pragma once
// Qwen2's tokenizer (transformers' models/qwen2/tokenization_qwen2.py and tokenizer.json's
// pipeline): NFC, the added/special tokens (<|im_start|>, <|im_end|>, <|endoftext|>, …) matched
// first and kept whole, Qwen2's pre-tokenizer pattern on the rest, each piece's UTF-8 bytes
// through the byte-to-unicode table and byte-level BPE (no word-end marker), from a diffusers
// `tokenizer/` folder (vocab.json + merges.txt + tokenizer_config.json's added tokens, or
// tokenizer.json alone; tokenizer.json wins when both are there, as in transformers). The BPE
// core is models/byte_level_bpe.h, shared with CLIP's tokenizer; the pattern runs on ICU's regex
// engine, whose \p{L}, \p{N} and \s are the Unicode classes the tokenizers library's Oniguruma
// pattern uses.
//
// Added tokens are matched on the raw text, leftmost and longest first, and kept whole; their
// lstrip/rstrip/single_word flags are not applied (every Qwen2/2.5-VL added token has them off).

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace zs::models {

class QwenTokenizer {
 public:
  /// Throws zs::Error naming the file and key when a file or a required special token is missing
  /// (<|endoftext|>, <|im_start|>, <|im_end|>: Qwen-Image's prompt template needs them).
  static QwenTokenizer load(const std::string& dir);
  /// Token ids of `text`, special tokens in the text recognised; no bos/eos added (Qwen2 adds none).
  std::vector<std::int64_t> encode(const std::string& text) const;
  /// tokenizer_config.json's pad_token (Qwen2.5-VL: <|endoftext|>), else <|endoftext|>.
  std::int64_t pad_id() const;
  /// Ids in use: the BPE vocabulary and the added tokens (transformers' len(tokenizer)).
  std::size_t vocab_size() const;
  /// The id of an added token or vocabulary entry, −1 when there is none.
  std::int64_t token_id(const std::string& token) const;

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

}  // namespace zs::models
