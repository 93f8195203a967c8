#pragma once
// A word-level tokenizer for the quickstart's tiny text encoder: lower-cased words and
// punctuation marks, a vocabulary built from the dataset's captions, saved with the run.

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include <ATen/core/Tensor.h>

namespace zs::models {

class WordTokenizer {
 public:
  static constexpr const char* kBos = "<|startoftext|>";
  static constexpr const char* kEos = "<|endoftext|>";  ///< also the padding token
  static constexpr const char* kUnknown = "<|unknown|>";

  /// Builds the vocabulary: the three special tokens, then every word of `captions` in sorted order.
  static WordTokenizer build(const std::vector<std::string>& captions, std::int64_t max_length);
  /// Reads a tokenizer written by save(); throws zs::Error naming the file.
  static WordTokenizer load(const std::string& path);
  /// Writes JSON {"format": "zerostudio-word-tokenizer", "version": 1, "max_length", "vocab"} atomically.
  void save(const std::string& path) const;

  /// Lower-cased words and punctuation of `text`, in order.
  static std::vector<std::string> split(const std::string& text);
  /// [bos] + ids (truncated) + [eos], padded with eos to max_length(). Unknown words map to <|unknown|>.
  std::vector<std::int64_t> encode(const std::string& text) const;
  /// encode() for each text, stacked: [N, max_length] int64.
  at::Tensor encode_batch(const std::vector<std::string>& texts) const;

  std::int64_t vocab_size() const { return static_cast<std::int64_t>(vocab_.size()); }
  std::int64_t max_length() const { return max_length_; }
  std::int64_t bos_id() const { return 0; }
  std::int64_t eos_id() const { return 1; }
  std::int64_t unknown_id() const { return 2; }
  const std::vector<std::string>& vocab() const { return vocab_; }

 private:
  std::vector<std::string> vocab_;
  std::unordered_map<std::string, std::int64_t> ids_;
  std::int64_t max_length_ = 16;
};

}  // namespace zs::models
