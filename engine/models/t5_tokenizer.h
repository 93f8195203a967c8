#pragma once
// T5's tokenizer as FluxPipeline runs it (transformers' T5TokenizerFast on tokenizer_2/), built on
// the SentencePiece library (Debian's libsentencepiece, reached through the libzs_sentencepiece
// module: models/sentencepiece_shim.cpp says why) and the model's own spiece.model: the text
// is split at the added tokens' strings (<pad>, </s>, <unk>, <extra_id_N>), which become their
// ids, each piece between them is encoded by SentencePiece (its normalizer: NFKC, whitespace runs
// folded, a leading ▁), the ids are truncated to max_length − 1, </s> is appended and <pad>
// fills up to max_length.

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace zs::models {

class T5Tokenizer {
 public:
  /// Loads `spiece_model` (tokenizer_2/spiece.model) with `extra_ids` sentinel tokens
  /// (tokenizer_config.json's extra_ids; T5's 100). Throws zs::Error(config) naming the file
  /// when it is missing or not a SentencePiece model, or when its special ids are not T5's
  /// (pad 0, eos 1, unk 2).
  static T5Tokenizer load(const std::string& spiece_model, std::int64_t extra_ids = 100);
  /// The most sentinel tokens load accepts (each is a string made up front; T5's tokenizers have 100).
  static constexpr std::int64_t kMaxExtraIds = 10'000;
  /// As load, reading extra_ids from tokenizer_config.json beside it when there is one.
  static T5Tokenizer load_folder(const std::string& dir);

  T5Tokenizer();
  ~T5Tokenizer();
  T5Tokenizer(T5Tokenizer&&) noexcept;
  T5Tokenizer& operator=(T5Tokenizer&&) noexcept;

  /// FluxPipeline's ids for `text`: exactly `max_length` ids, </s> last among the text's.
  std::vector<std::int64_t> encode(const std::string& text, std::int64_t max_length) const;
  /// Where the SentencePiece module is looked for, in order: $ZEROSTUDIO_SENTENCEPIECE, beside
  /// the program (../lib/zerostudio/ of its folder), the install prefix, this build's folder.
  static std::vector<std::string> module_candidates();
  /// SentencePiece's pieces plus the sentinels.
  std::int64_t vocab_size() const;
  static constexpr std::int64_t kPad = 0, kEos = 1, kUnk = 2;

 private:
  struct Processor;  // the loaded model behind the module's C interface
  std::unique_ptr<Processor> sp_;
  std::int64_t extra_ids_ = 0;
  std::string path_;
  /// T5TokenizerFast's added tokens (<pad>, </s>, <unk>, the sentinels) and their ids, matched
  /// as whole strings anywhere in a prompt; made once by load().
  std::vector<std::pair<std::string, std::int64_t>> added_;
};

}  // namespace zs::models
