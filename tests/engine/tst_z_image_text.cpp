// Z-Image's text encoder (Qwen3) and prompt encoding against the pinned peers:
// tests/fixtures/z_image_text_tokenizer/ (gen/qwen_text.py's tiny byte-level BPE vocabulary with
// Qwen3's added tokens and chat template's thinking toggle), z_image_text_encoder/ (a tiny seeded
// transformers Qwen3ForCausalLM, models/qwen3/modeling_qwen3.py, as save_pretrained shards it),
// z_image_text.json (the chat texts and Qwen2Tokenizer's ids) and z_image_text.safetensors (what
// diffusers' pipelines/z_image/pipeline_z_image.py ZImagePipeline._encode_prompt returns, and the
// model's hidden states), all written by tests/fixtures/gen/z_image_text.py.
#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <QtTest>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/meta_tensors.h"
#include "io/safetensors.h"
#include "models/diffusers_folder.h"
#include "models/qwen_text/qwen_text_model.h"
#include "models/qwen_text/qwen_tokenizer.h"
#include "models/z_image/z_image_text.h"
#include "model_support.h"
#include "test_support.h"

using namespace zs::models;
namespace fs = std::filesystem;

namespace {

std::string z_fixture(const char* rel) { return zs::test::peerFixture(rel).toStdString(); }

QwenTextModel z_load_encoder() {
  return load_qwen_text_model(z_fixture("z_image_text_encoder"), component_weight_files(z_fixture("z_image_text_encoder")));
}

#define Z_CLOSE(got, want, what)                                                                                   \
  do {                                                                                                             \
    const at::Tensor g_ = (got), w_ = (want);                                                                      \
    QVERIFY2(g_.sizes() == w_.sizes(), qPrintable(QString("%1: shape differs").arg(what)));                        \
    const double s_ = std::max(1.0, w_.abs().max().item<double>());                                                \
    const double d_ = zs::test::max_abs_diff(g_, w_);                                                              \
    QVERIFY2(d_ <= 1e-5 * s_, qPrintable(QString("%1 differs by %2 (scale %3)").arg(what).arg(d_).arg(s_)));       \
  } while (0)

}  // namespace

class TestZImageText : public QObject {
  Q_OBJECT

  nlohmann::json cases_;
  std::unique_ptr<zs::io::SafetensorsReader> ref_;

 private slots:
  void initTestCase() {
    if (!fs::exists(z_fixture("z_image_text.json")))
      ZS_SKIP_UNLESS_CI("tests/fixtures/z_image_text.json is absent; run tests/fixtures/gen/z_image_text.py");
    std::ifstream in(z_fixture("z_image_text.json"));
    cases_ = nlohmann::json::parse(in);
    ref_ = std::make_unique<zs::io::SafetensorsReader>(z_fixture("z_image_text.safetensors"));
  }

  // Qwen3's config.json: its own head size (16 beside a width of 32 over 4 heads), q/k norms, no
  // bias; round trip; a sliding-window layer refused naming the key.
  void qwen3ConfigReads() {
    const QwenTextConfig c = QwenTextConfig::from_file(z_fixture("z_image_text_encoder/config.json"));
    QVERIFY(c.kind == QwenTextConfig::Kind::qwen3);
    QCOMPARE(c.head_dim(), std::int64_t{16});
    QCOMPARE(c.num_key_value_heads, std::int64_t{2});
    QVERIFY(c.qk_norm && !c.qkv_bias && !c.o_bias);
    QCOMPARE(c.rope_theta, 1000000.0);
    QCOMPARE(QwenTextConfig::from_json(c.to_json(), "round trip").to_json(), c.to_json());
    std::ifstream in(z_fixture("z_image_text_encoder/config.json"));
    nlohmann::json j = nlohmann::json::parse(in);
    j["layer_types"] = {"full_attention", "sliding_attention", "full_attention"};
    try {
      QwenTextConfig::from_json(j, "text_encoder/config.json");
      QFAIL("a sliding-window layer was accepted");
    } catch (const zs::Error& e) {
      QVERIFY2(std::string(e.what()).find("text_encoder/config.json: layer_types: \"sliding_attention\" is not supported") !=
                   std::string::npos,
               e.what());
    }
  }

  // The chat text is the template's (thinking on: nothing after the assistant header; off would
  // add an empty think block) and its ids are Qwen2Tokenizer's.
  void chatTextAndIdsAreThePipelines() {
    const QwenTokenizer tok = QwenTokenizer::load(z_fixture("z_image_text_tokenizer"));
    for (const auto& c : cases_["cases"]) {
      const std::string prompt = c["prompt"];
      QCOMPARE(z_image_chat_text(prompt), c["chat"].get<std::string>());
      QCOMPARE(tok.encode(z_image_chat_text(prompt)), c["ids"].get<std::vector<std::int64_t>>());
    }
    QVERIFY(z_image_chat_text("a dog") != cases_["no_thinking"].get<std::string>());
  }

  // The model's hidden states on a right-padded batch (valid rows): hidden_states[n] after n layers
  // without the norm, and the last one after the norm.
  void hiddenStatesMatchTransformers() {
    QwenTextModel model = z_load_encoder();
    c10::NoGradGuard no_grad;
    const at::Tensor ids = ref_->tensor("batch.input_ids"), mask = ref_->tensor("batch.attention_mask");
    const std::int64_t layers = model->config().num_hidden_layers;
    for (std::int64_t n = 0; n < layers; ++n) {
      const at::Tensor got = model->hidden_state(ids, mask, n), want = ref_->tensor("batch.hidden." + std::to_string(n));
      for (std::int64_t b = 0; b < ids.size(0); ++b) {
        const std::int64_t valid = mask[b].sum().item<std::int64_t>();
        Z_CLOSE(got[b].narrow(0, 0, valid), want[b].narrow(0, 0, valid), QString("hidden state %1, sample %2").arg(n).arg(b));
      }
    }
    const at::Tensor last = model->forward(ids, mask);
    for (std::int64_t b = 0; b < ids.size(0); ++b) {
      const std::int64_t valid = mask[b].sum().item<std::int64_t>();
      Z_CLOSE(last[b].narrow(0, 0, valid), ref_->tensor("batch.last")[b].narrow(0, 0, valid), QString("last, sample %1").arg(b));
      Z_CLOSE(last[b].narrow(0, 0, valid), ref_->tensor("batch.hidden." + std::to_string(layers))[b].narrow(0, 0, valid),
              "hidden_states[-1]");
    }
  }

  // ZImagePipeline._encode_prompt's per-prompt states at max_sequence_length 512 and 12 (cut
  // inside the template), resident and streamed.
  void promptStatesMatchThePipeline() {
    QwenTextModel model = z_load_encoder();
    const QwenTokenizer tok = QwenTokenizer::load(z_fixture("z_image_text_tokenizer"));
    c10::NoGradGuard no_grad;
    for (const std::int64_t length : {std::int64_t{512}, std::int64_t{12}})
      for (std::size_t i = 0; i < cases_["cases"].size(); ++i) {
        const std::string prompt = cases_["cases"][i]["prompt"];
        const at::Tensor want = ref_->tensor("prompt" + std::to_string(length) + "." + std::to_string(i));
        Z_CLOSE(z_image_prompt_states(*model, tok, prompt, length, at::kCPU), want, QString("prompt %1 at %2").arg(i).arg(length));
        Z_CLOSE(z_image_prompt_states(*model, tok, prompt, length, at::kCPU, /*streamed=*/true), want,
                QString("streamed prompt %1 at %2").arg(i).arg(length));
      }
  }

  // A tokenizer without Qwen3's chat tokens is refused when loaded, naming its file.
  void tokenizerWithoutChatTokensIsRefused() {
    QTemporaryDir dir;
    for (const char* n : {"vocab.json", "merges.txt"})
      fs::copy_file(fs::path(z_fixture("z_image_text_tokenizer")) / n, fs::path(dir.path().toStdString()) / n);
    std::ifstream in(z_fixture("z_image_text_tokenizer/tokenizer_config.json"));
    nlohmann::json config = nlohmann::json::parse(in);
    nlohmann::json kept = nlohmann::json::object();
    for (const auto& [id, token] : config["added_tokens_decoder"].items())
      if (token["content"] != "<|im_start|>") kept[id] = token;
    config["added_tokens_decoder"] = kept;
    std::ofstream(dir.filePath("tokenizer_config.json").toStdString()) << config.dump();
    try {
      QwenTokenizer::load(dir.path().toStdString());
      QFAIL("a tokenizer without <|im_start|> was accepted");
    } catch (const zs::Error& e) {
      QVERIFY2(std::string(e.what()).find("<|im_start|>") != std::string::npos, e.what());
    }
  }

  // Qwen3-4B's language model at full size (meta tensors, from the shape of its config.json as
  // Z-Image's text_encoder/ has it): transformers' parameter count.
  void fullSizeParameterCount() {
    const nlohmann::json qwen3_4b = {{"architectures", {"Qwen3ForCausalLM"}}, {"model_type", "qwen3"},
                                     {"vocab_size", 151936}, {"hidden_size", 2560}, {"intermediate_size", 9728},
                                     {"num_hidden_layers", 36}, {"num_attention_heads", 32}, {"num_key_value_heads", 8},
                                     {"head_dim", 128}, {"rope_theta", 1000000}, {"rms_norm_eps", 1e-6},
                                     {"attention_bias", false}, {"tie_word_embeddings", true},
                                     {"max_position_embeddings", 40960}, {"use_sliding_window", false}};
    const zs::MetaTensorScope meta;
    QwenTextModel model(QwenTextConfig::from_json(qwen3_4b, "Qwen3-4B config.json"));
    std::int64_t n = 0;
    for (const auto& p : model->parameters()) n += p.numel();
    QCOMPARE(n, cases_["full_size_parameters"].get<std::int64_t>());
  }
};

ZS_TEST_MAIN(TestZImageText);
#include "tst_z_image_text.moc"
