// Fuzz target: prompt text (any bytes: broken UTF-8, control characters, special-token spellings)
// through the three tokenizers of the fixture folders: CLIP's BPE (ICU classes, NFC), T5's
// SentencePiece with its extra ids, Qwen2's byte-level BPE with its pre-tokenizer.
#include <string>

#include "fuzz_support.h"
#include "models/clip_tokenizer.h"
#include "models/qwen_text/qwen_tokenizer.h"
#include "models/t5_tokenizer.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  zs::fuzz::initialize([] {
    return zs::fuzz::Seeds{{"plain", "a photo of a cat"},
                           {"unicode", "Ein Foto 東京 café ﬁ \xe2\x80\x8b <extra_id_3> <|im_start|>user\n"},
                           {"broken", std::string("\xff\xfe a \xc3", 6) + std::string(1, '\0') + "  \t\r\n x"}};
  });
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const auto clip = zs::models::ClipTokenizer::load(zs::fuzz::fixture("flux-tiny/tokenizer"));
  static const auto t5 = zs::models::T5Tokenizer::load_folder(zs::fuzz::fixture("flux-tiny/tokenizer_2"));
  static const auto qwen = zs::models::QwenTokenizer::load(zs::fuzz::fixture("qwen-image-tiny/tokenizer"));
  const std::string text(reinterpret_cast<const char*>(data), size);
  zs::fuzz::expect_accept_or_refuse([&] { (void)clip.encode(text); });
  zs::fuzz::expect_accept_or_refuse([&] { (void)t5.encode(text, 64); });
  zs::fuzz::expect_accept_or_refuse([&] { (void)qwen.encode(text); });
  return 0;
}
