// CLIP text encoder against OpenAI CLIP's outputs, and the word tokenizer.
// Engine headers first: Qt's `slots` macro would break LibTorch's.
#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/atomic_file.h"
#include "io/safetensors.h"
#include "models/clip_text_model.h"
#include "models/clip_tokenizer.h"
#include "models/weights.h"
#include "models/word_tokenizer.h"

#include <fstream>

#include <QFile>
#include <QTemporaryDir>
#include <QtTest>

#include "model_support.h"
#include "test_support.h"

using namespace zs::models;
using zs::test::fixture;
using zs::test::max_abs_diff;


namespace {
}  // namespace

class TestTextEncoder : public QObject {
  Q_OBJECT

 private slots:
  void clipMatchesReference() {
    ZS_REQUIRE_SHARED();
    ClipTextModel model(ClipTextConfig::from_file(fixture("sd15-tiny/text_encoder/config.json")));
    const zs::io::SafetensorsReader weights(fixture("sd15-tiny/text_encoder/model.safetensors"));
    QVERIFY(load_weights(*model, weights).unexpected.empty());
    const zs::io::SafetensorsReader ref(fixture("sd15-tiny-reference/text_io.safetensors"));
    c10::NoGradGuard no_grad;
    const ClipTextOutput out = model->forward(ref.tensor("input_ids"));
    QVERIFY(max_abs_diff(out.last_hidden_state, ref.tensor("last_hidden_state")) <= 1e-4);
    QVERIFY(max_abs_diff(out.penultimate_hidden_state, ref.tensor("penultimate_hidden_state")) <= 1e-4);
    QVERIFY(max_abs_diff(out.pooled, ref.tensor("pooler_output")) <= 1e-4);
  }

  // The CLIP BPE tokenizer reproduces openai's SimpleTokenizer on every fixture case (punctuation,
  // case, contractions, digits, accents, ß, Cyrillic, Greek, CJK, emoji with ZWJ, whitespace runs,
  // empty, 75/76/84 tokens): ids, BPE strings and the 77-id frame, exactly.
  void clipTokenizerMatchesOpenAi() {
    ZS_REQUIRE_SHARED();
    const ClipTokenizer tok = ClipTokenizer::load(fixture("sd15-tiny/tokenizer"));
    QCOMPARE(tok.vocab_size(), std::size_t{49408});
    QCOMPARE(tok.bos_id(), std::int64_t{49406});
    QCOMPARE(tok.eos_id(), std::int64_t{49407});
    QCOMPARE(tok.pad_id(), std::int64_t{49407});
    std::ifstream in(fixture("sd15-tiny-reference/tokenizer_cases.json"));
    const auto cases = nlohmann::json::parse(in)["cases"];
    QCOMPARE(cases.size(), std::size_t{31});
    for (const auto& c : cases) {
      const std::string prompt = c["prompt"].get<std::string>();
      const auto ids = tok.encode(prompt);
      QVERIFY2(ids == c["ids"].get<std::vector<std::int64_t>>(), prompt.c_str());
      QVERIFY2(tok.tokens(prompt) == c["tokens"].get<std::vector<std::string>>(), prompt.c_str());
      QVERIFY2(tok.frame(prompt) == c["input_ids"].get<std::vector<std::int64_t>>(), prompt.c_str());
    }
    // The text encoder fixture's ids come from the same tokenizer.
    const zs::io::SafetensorsReader ref(fixture("sd15-tiny-reference/text_io.safetensors"));
    const at::Tensor ids = ref.tensor("input_ids");
    for (int b = 0; b < 2; ++b) {
      const std::string prompt = b == 0 ? "a photo of an astronaut riding a horse on mars" : "A Caf\u00e9 at 3pm: two CATS & one dog \U0001F431!!";
      const auto framed = tok.frame(prompt);
      for (int i = 0; i < 77; ++i) QCOMPARE(framed[static_cast<std::size_t>(i)], ids[b][i].item<std::int64_t>());
    }
    QCOMPARE(tok.encode("caf&eacute; &amp; cr&#232;me"), tok.encode("caf&eacute; & crème"));
  }

  // SDXL's second tokenizer pads with "!" (id 0) where special_tokens_map.json says so; the
  // file may hold each token as a string or as an object with "content".
  void clipTokenizerPadsAsTheMapSays() {
    ZS_REQUIRE_SHARED();
    QTemporaryDir dir;
    for (const char* f : {"vocab.json", "merges.txt", "tokenizer_config.json"})
      QVERIFY(QFile::copy(QString::fromStdString(fixture(QString("sd15-tiny/tokenizer/") + f)), dir.path() + "/" + f));
    zs::io::write_file_atomic((dir.path() + "/special_tokens_map.json").toStdString(),
                              "{\"pad_token\": {\"content\": \"!\", \"lstrip\": false}, \"eos_token\": \"<|endoftext|>\"}");
    const ClipTokenizer tok = ClipTokenizer::load(dir.path().toStdString());
    QCOMPARE(tok.pad_id(), std::int64_t{0});
    const auto framed = tok.frame("a cat");
    QCOMPARE(framed[3], std::int64_t{49407});  // eos after the two ids
    QCOMPARE(framed[4], std::int64_t{0});
    QCOMPARE(framed[76], std::int64_t{0});
    QFile::remove(dir.path() + "/merges.txt");
    try {
      ClipTokenizer::load(dir.path().toStdString());
      QFAIL("loaded without merges.txt");
    } catch (const zs::Error& e) {
      QVERIFY2(QString(e.what()).contains("merges.txt: cannot be read"), e.what());
    }
  }

  void wordTokenizerEncodes() {
    const WordTokenizer tok = WordTokenizer::build({"a red circle on a blue background", "A Green square, on white!"}, 8);
    QCOMPARE(WordTokenizer::split("A Green square, on white!"),
             (std::vector<std::string>{"a", "green", "square", ",", "on", "white", "!"}));
    const auto ids = tok.encode("a red circle");
    QCOMPARE(ids.size(), std::size_t{8});
    QCOMPARE(ids[0], tok.bos_id());
    QCOMPARE(tok.vocab()[static_cast<std::size_t>(ids[2])], std::string("red"));
    QCOMPARE(ids[4], tok.eos_id());
    QCOMPARE(ids[7], tok.eos_id());
    // Unknown words map to <|unknown|>; long captions are cut so the end token still fits.
    QCOMPARE(tok.encode("a purple circle")[2], tok.unknown_id());
    const auto long_ids = tok.encode("a red circle on a blue background on a red circle");
    QCOMPARE(tok.vocab()[static_cast<std::size_t>(long_ids[6])], std::string("blue"));
    QCOMPARE(long_ids[7], tok.eos_id());
    // The empty caption (classifier-free guidance) is just bos + eos padding.
    const auto empty = tok.encode("");
    QCOMPARE(empty[1], tok.eos_id());
    QCOMPARE(tok.encode_batch({"a", "red"}).sizes().vec(), (std::vector<std::int64_t>{2, 8}));
  }

  void wordTokenizerRoundTripsAndRefusesBadFiles() {
    QTemporaryDir dir;
    const std::string path = (dir.path() + "/tokenizer.json").toStdString();
    const WordTokenizer tok = WordTokenizer::build({"a red circle"}, 6);
    tok.save(path);
    const WordTokenizer back = WordTokenizer::load(path);
    QCOMPARE(back.vocab(), tok.vocab());
    QCOMPARE(back.encode("red circle"), tok.encode("red circle"));
    zs::io::write_file_atomic(path, "{\"format\": \"other\"}");
    try {
      WordTokenizer::load(path);
      QFAIL("loaded a foreign file");
    } catch (const zs::Error& e) {
      QVERIFY2(QString(e.what()).contains("tokenizer.json: not a ZeroStudio word tokenizer"), e.what());
    }
    // A format that is no string, a float version, and a max_length that encode() would allocate
    // (1e12 ids) or that is a float: each refused naming the file (issue 59 items 2 and 7).
    const std::string ok = R"("format": "zerostudio-word-tokenizer", "vocab": ["<bos>", "<eos>", "<unk>"])";
    const std::vector<std::pair<std::string, std::string>> bad = {
        {R"({"format": 5})", "not a ZeroStudio word tokenizer"},
        {"{" + ok + R"(, "version": 1.5, "max_length": 8})", "tokenizer version 1.5 is not supported"},
        {"{" + ok + R"(, "version": 1, "max_length": 1000000000000})", "max_length: expected an integer from 2 to 16777216"},
        {"{" + ok + R"(, "version": 1, "max_length": 8.5})", "max_length: expected an integer from 2 to 16777216, found 8.5"}};
    for (const auto& [text, want] : bad) {
      zs::io::write_file_atomic(path, text);
      try {
        WordTokenizer::load(path);
        QFAIL(text.c_str());
      } catch (const zs::Error& e) {
        QVERIFY2(QString(e.what()).contains(QString::fromStdString(want)), e.what());
      }
    }
  }

  void tinyEncoderPoolsAtTheEndToken() {
    const WordTokenizer tok = WordTokenizer::build({"a red circle"}, 8);
    ClipTextConfig c;
    c.vocab_size = tok.vocab_size();
    c.hidden_size = 16;
    c.intermediate_size = 32;
    c.num_attention_heads = 2;
    c.num_hidden_layers = 2;
    c.max_position_embeddings = 8;
    c.eos_token_id = tok.eos_id();
    ClipTextModel model(c);
    c10::NoGradGuard no_grad;
    const at::Tensor ids = tok.encode_batch({"a red circle"});
    const ClipTextOutput out = model->forward(ids);
    QVERIFY(at::equal(out.pooled[0], out.last_hidden_state[0][4]));
    // The config survives its JSON form.
    QCOMPARE(ClipTextConfig::from_json(c.to_json(), "x").eos_token_id, tok.eos_id());
  }
};

ZS_TEST_MAIN(TestTextEncoder);
#include "tst_text_encoder.moc"
