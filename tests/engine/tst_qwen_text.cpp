// Qwen-Image's text encoder and tokenizer against the pinned peers: tests/fixtures/qwen_text_tokenizer/
// (a tiny byte-level BPE vocabulary trained by tests/fixtures/gen/qwen_text.py with Qwen2's
// pre-tokenizer and Qwen2.5-VL's added tokens, in vocab.json + merges.txt + tokenizer_config.json
// and tokenizer.json), qwen_text_tokens.json (transformers' models/qwen2/tokenization_qwen2.py
// Qwen2Tokenizer ids for a table of prompts), qwen_text_encoder/ (a tiny seeded
// Qwen2_5_VLForConditionalGeneration, models/qwen2_5_vl/modeling_qwen2_5_vl.py, as save_pretrained
// shards it) and qwen_text.safetensors (the states diffusers' pipelines/qwenimage/pipeline_qwenimage.py
// QwenImagePipeline._get_qwen_prompt_embeds / encode_prompt keep, the language model's last hidden
// state, and the same with the multimodal RoPE positions get_rope_index gives text).
#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <QtTest>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/meta_tensors.h"
#include "io/safetensors.h"
#include "models/byte_level_bpe.h"
#include "models/qwen_image/qwen_text_encoder.h"
#include "models/qwen_text/qwen_tokenizer.h"
#include "models/weights.h"
#include "test_support.h"

using namespace zs::models;
namespace fs = std::filesystem;

namespace {

std::string qwen_fixture(const char* rel) { return zs::test::peerFixture(rel).toStdString(); }

nlohmann::json qwen_tokens_json() {
  std::ifstream in(qwen_fixture("qwen_text_tokens.json"));
  return nlohmann::json::parse(in);
}

/// The encoder folder's shards, from its index.
std::vector<std::string> qwen_encoder_files() {
  const fs::path dir = qwen_fixture("qwen_text_encoder");
  std::ifstream in(dir / "model.safetensors.index.json");
  const nlohmann::json index = nlohmann::json::parse(in);
  std::set<std::string> files;
  for (const auto& [name, file] : index.at("weight_map").items())
    files.insert((dir / file.get<std::string>()).string());
  return {files.begin(), files.end()};
}

QwenTextModel qwen_load_encoder() {
  QwenTextModel model(QwenTextConfig::from_file(qwen_fixture("qwen_text_encoder/config.json")));
  load_qwen_text_weights(*model, qwen_encoder_files());
  return model;
}

double qwen_max_diff(const at::Tensor& a, const at::Tensor& b) {
  return (a.to(at::kDouble) - b.to(at::kDouble)).abs().max().item<double>();
}

#define QWEN_CLOSE(got, want, what)                                                                                  \
  do {                                                                                                          \
    const at::Tensor g_ = (got), w_ = (want);                                                                   \
    QVERIFY2(g_.sizes() == w_.sizes(), qPrintable(QString("%1: shape differs").arg(what)));                    \
    /* relative to the largest value: BLAS sums in another order with another thread count */                  \
    const double s_ = std::max(1.0, w_.abs().max().item<double>());                                            \
    QVERIFY2(qwen_max_diff(g_, w_) <= 1e-5 * s_,                                                                \
             qPrintable(QString("%1 differs by %2 (scale %3)").arg(what).arg(qwen_max_diff(g_, w_)).arg(s_)));   \
  } while (0)

/// Copies `names` from the tokenizer fixture into `dir`.
void qwen_copy_tokenizer_files(const QString& dir, std::initializer_list<const char*> names) {
  for (const char* n : names) fs::copy_file(fs::path(qwen_fixture("qwen_text_tokenizer")) / n, fs::path(dir.toStdString()) / n);
}

}  // namespace

class TestQwenText : public QObject {
  Q_OBJECT

 private slots:
  void initTestCase() {
    if (!fs::exists(qwen_fixture("qwen_text.safetensors")))
      ZS_SKIP_UNLESS_CI("tests/fixtures/qwen_text.safetensors is missing; run tests/fixtures/gen/qwen_text.py");
  }

  // transformers' Qwen2Tokenizer ids for every prompt of the table (English, Chinese, mixed,
  // digits, punctuation runs, newlines, contractions in any case, edge and Unicode white space,
  // NFC, 4-byte characters, special tokens inside text and near misses, the template applied),
  // from the folder as Qwen-Image ships it, from vocab.json + merges.txt + tokenizer_config.json
  // alone and from tokenizer.json alone.
  void tokenizerMatchesTransformers() {
    const auto doc = qwen_tokens_json();
    const QTemporaryDir files, json_only;
    qwen_copy_tokenizer_files(files.path(), {"vocab.json", "merges.txt", "tokenizer_config.json"});
    qwen_copy_tokenizer_files(json_only.path(), {"tokenizer.json"});
    const QwenTokenizer tokenizers[] = {QwenTokenizer::load(qwen_fixture("qwen_text_tokenizer")),
                                        QwenTokenizer::load(files.path().toStdString()),
                                        QwenTokenizer::load(json_only.path().toStdString())};
    QVERIFY(doc.at("cases").size() >= 16);
    for (const auto& tok : tokenizers) {
      QCOMPARE(tok.vocab_size(), doc.at("vocab_size").get<std::size_t>());
      QCOMPARE(tok.pad_id(), doc.at("pad_id").get<std::int64_t>());
      for (const auto& c : doc.at("cases")) {
        const std::string prompt = c.at("prompt").get<std::string>();
        const auto ids = tok.encode(prompt);
        QVERIFY2(ids == c.at("ids").get<std::vector<std::int64_t>>(),
                 qPrintable(QString::fromStdString("'" + prompt + "': got " + nlohmann::json(ids).dump() + ", want " +
                                                   c.at("ids").dump())));
      }
    }
    // The pipeline's template and drop count are the pinned diffusers'; its system part is 34
    // tokens where each word is one (Qwen2.5-VL's vocabulary, and the fixture's).
    QCOMPARE(std::string(kQwenImagePromptTemplate), doc.at("template").get<std::string>());
    QCOMPARE(kQwenImagePromptDrop, doc.at("drop").get<std::int64_t>());
    QCOMPARE(kQwenImageTokenizerMaxLength, doc.at("tokenizer_max_length").get<std::int64_t>());
    std::string prefix = kQwenImagePromptTemplate;
    prefix.resize(prefix.find("{}"));
    QCOMPARE(static_cast<std::int64_t>(tokenizers[0].encode(prefix).size()), kQwenImagePromptDrop);
  }

  // CLIP and Qwen2 share the byte-level BPE core: GPT-2's byte table, and merges in rank order.
  void byteLevelBpeCore() {
    const auto& table = byte_to_unicode();
    QCOMPARE(table.size(), std::size_t{256});
    QCOMPARE(table[' '], std::string("\xC4\xA0"));   // Ġ
    QCOMPARE(table['\n'], std::string("\xC4\x8A"));  // Ċ
    QCOMPARE(table['a'], std::string("a"));
    QCOMPARE(std::set<std::string>(table.begin(), table.end()).size(), std::size_t{256});
    QCOMPARE(byte_level_text(" é"), std::string("\xC4\xA0\xC3\x83\xC2\xA9"));  // Ġ Ã ©
  }

  // A folder without the chat's tokens is refused, naming the file and the token.
  void tokenizerRefusesAFolderWithoutTheChatTokens() {
    {
      const QTemporaryDir dir;
      qwen_copy_tokenizer_files(dir.path(), {"vocab.json", "merges.txt"});
      std::ifstream in(qwen_fixture("qwen_text_tokenizer/tokenizer_config.json"));
      auto config = nlohmann::json::parse(in);
      auto& dec = config.at("added_tokens_decoder");
      for (auto it = dec.begin(); it != dec.end(); ++it)
        if (it.value().at("content") == "<|im_start|>") {
          dec.erase(it);
          break;
        }
      std::ofstream(dir.filePath("tokenizer_config.json").toStdString()) << config.dump();
      try {
        QwenTokenizer::load(dir.path().toStdString());
        QFAIL("loaded");
      } catch (const zs::Error& e) {
        QVERIFY2(QString(e.what()).contains("tokenizer_config.json: added_tokens_decoder") &&
                     QString(e.what()).contains("\"<|im_start|>\""),
                 e.what());
      }
    }
    {
      const QTemporaryDir dir;
      std::ifstream in(qwen_fixture("qwen_text_tokenizer/tokenizer.json"));
      auto j = nlohmann::json::parse(in);
      auto& added = j.at("added_tokens");
      added.erase(std::remove_if(added.begin(), added.end(), [](const nlohmann::json& a) { return a.at("content") == "<|im_end|>"; }),
                  added.end());
      std::ofstream(dir.filePath("tokenizer.json").toStdString()) << j.dump();
      try {
        QwenTokenizer::load(dir.path().toStdString());
        QFAIL("loaded");
      } catch (const zs::Error& e) {
        QVERIFY2(QString(e.what()).contains("tokenizer.json: added_tokens") && QString(e.what()).contains("\"<|im_end|>\""),
                 e.what());
      }
    }
  }

  // text_encoder/config.json as transformers 5.24 writes it (the fixture: keys under text_config,
  // rope_parameters), as Qwen-Image's was written by 4.53 (top level and text_config, rope_scaling
  // beside rope_theta), and as 4.49 wrote Qwen2.5-VL's (top level only, rope_scaling type mrope).
  void configReadsEveryLayout() {
    const QwenTextConfig tiny = QwenTextConfig::from_file(qwen_fixture("qwen_text_encoder/config.json"));
    QCOMPARE(tiny.vocab_size, qwen_tokens_json().at("model_vocab_size").get<std::int64_t>());
    QCOMPARE(tiny.hidden_size, std::int64_t{32});
    QCOMPARE(tiny.intermediate_size, std::int64_t{64});
    QCOMPARE(tiny.num_hidden_layers, std::int64_t{2});
    QCOMPARE(tiny.num_attention_heads, std::int64_t{4});
    QCOMPARE(tiny.num_key_value_heads, std::int64_t{2});
    QCOMPARE(tiny.rope_theta, 10000.0);
    QCOMPARE(tiny.mrope_section, (std::vector<std::int64_t>{2, 1, 1}));
    const nlohmann::json rope_4x = {{"mrope_section", {16, 24, 24}}, {"rope_type", "default"}, {"type", "default"}};
    const nlohmann::json text_4x = {{"hidden_size", 3584}, {"intermediate_size", 18944}, {"num_hidden_layers", 28},
                                    {"num_attention_heads", 28}, {"num_key_value_heads", 4}, {"rms_norm_eps", 1e-6},
                                    {"rope_theta", 1000000.0}, {"rope_scaling", rope_4x}, {"vocab_size", 152064},
                                    {"hidden_act", "silu"}, {"use_sliding_window", false}, {"sliding_window", 32768},
                                    {"model_type", "qwen2_5_vl_text"}};
    nlohmann::json qwen_image = text_4x;  // 4.53: the keys at the top level and again under text_config
    qwen_image["model_type"] = "qwen2_5_vl";
    qwen_image["text_config"] = text_4x;
    qwen_image["transformers_version"] = "4.53.1";
    nlohmann::json flat = text_4x;  // 4.49
    flat["model_type"] = "qwen2_5_vl";
    flat["rope_scaling"] = {{"type", "mrope"}, {"mrope_section", {16, 24, 24}}};
    for (const auto& j : {qwen_image, flat}) {
      const QwenTextConfig c = QwenTextConfig::from_json(j, "text_encoder/config.json");
      const QwenTextConfig d;
      QCOMPARE(c.to_json(), d.to_json());
    }
    // Its own file reads back.
    QCOMPARE(QwenTextConfig::from_json(tiny.to_json(), "x").to_json(), tiny.to_json());
    // Refused, every problem named with its key.
    nlohmann::json bad = qwen_image;
    bad["text_config"]["rope_scaling"]["rope_type"] = "yarn";
    bad["text_config"]["rope_scaling"].erase("type");
    bad["text_config"]["use_sliding_window"] = true;
    bad["hidden_act"] = "gelu";
    bad["text_config"].erase("hidden_act");
    try {
      QwenTextConfig::from_json(bad, "te/config.json");
      QFAIL("accepted");
    } catch (const zs::Error& e) {
      const QString m = e.what();
      QVERIFY2(m.contains("te/config.json: text_config.rope_scaling.rope_type") &&
                   m.contains("te/config.json: text_config.use_sliding_window") && m.contains("te/config.json: hidden_act"),
               e.what());
    }
    nlohmann::json heads = qwen_image;
    heads["text_config"]["num_key_value_heads"] = 3;
    QVERIFY_THROWS_EXCEPTION(zs::Error, QwenTextConfig::from_json(heads, "te/config.json"));
  }

  // QwenImagePipeline.encode_prompt's kept states and mask for a batch of English and Chinese
  // prompts (one prompt at a time here, batched by qwen_image_pad_states), with
  // max_sequence_length 1024 and 8, and a prompt past the tokenizer's 1024 + 34 tokens.
  void promptStatesMatchThePipeline() {
    QwenTextModel model = qwen_load_encoder();
    const QwenTokenizer tok = QwenTokenizer::load(qwen_fixture("qwen_text_tokenizer"));
    const zs::io::SafetensorsReader ref(qwen_fixture("qwen_text.safetensors"));
    const auto doc = qwen_tokens_json();
    c10::NoGradGuard no_grad;
    for (const auto& [max_length, key] : {std::pair<std::int64_t, std::string>{1024, "batch"}, {8, "batch8"}}) {
      std::vector<at::Tensor> states;
      for (const auto& p : doc.at("batch"))
        states.push_back(qwen_image_prompt_states(*model, tok, p.get<std::string>(), max_length, at::kCPU));
      const auto [embeds, mask] = qwen_image_pad_states(states);
      QWEN_CLOSE(embeds, ref.tensor(key + ".embeds"), QString::fromStdString(key + ".embeds"));
      QVERIFY(at::equal(mask, ref.tensor(key + ".mask")));
    }
    const at::Tensor long_states = qwen_image_prompt_states(*model, tok, doc.at("long").get<std::string>(), 1024, at::kCPU);
    QWEN_CLOSE(long_states.unsqueeze(0), ref.tensor("long.embeds"), "the truncated prompt's states");
  }

  // The whole last hidden state of the pipeline's padded batch (padding rows too), and the same
  // with the positions transformers' get_rope_index gives text: its three sections carry one
  // position, and plain 1-D RoPE at that position is transformers' multimodal RoPE.
  void plainRopeIsMultimodalRopeForText() {
    QwenTextModel model = qwen_load_encoder();
    const zs::io::SafetensorsReader ref(qwen_fixture("qwen_text.safetensors"));
    c10::NoGradGuard no_grad;
    const at::Tensor ids = ref.tensor("batch.input_ids"), mask = ref.tensor("batch.attention_mask");
    QVERIFY(!at::equal(mask, at::ones_like(mask)));  // the batch is padded
    QWEN_CLOSE(model->forward(ids, mask), ref.tensor("batch.hidden"), "the last hidden state");
    const at::Tensor positions = ref.tensor("mrope.positions");  // [3, B, L]
    QVERIFY(at::equal(positions[0], positions[1]) && at::equal(positions[0], positions[2]));
    QVERIFY(!at::equal(positions[0], at::arange(ids.size(1)).expand_as(ids)));  // padding sits at 0 there
    QWEN_CLOSE(model->forward(ids, mask, positions[0]), ref.tensor("mrope.hidden"), "the state with get_rope_index's positions");
  }

  // The same weights under transformers 5's module names (model.language_model.…, model.visual.…)
  // give the same model; a file of neither layout and a config of another size are refused.
  void weightsLoadFromBothLayouts() {
    QwenTextModel legacy = qwen_load_encoder();
    const QTemporaryDir dir;
    const std::string v5 = dir.filePath("model.safetensors").toStdString();
    {
      std::vector<std::pair<std::string, at::Tensor>> renamed;
      bool saw_visual = false, saw_lm_head = false;
      for (const auto& f : qwen_encoder_files()) {
        const zs::io::SafetensorsReader r(f);
        for (const auto& e : r.entries()) {
          std::string name = e.name;
          if (name.starts_with("visual.")) {
            name = "model." + name;
            saw_visual = true;
          } else if (name.starts_with("model.")) {
            name = "model.language_model." + name.substr(6);
          } else {
            saw_lm_head = saw_lm_head || name == "lm_head.weight";
          }
          renamed.emplace_back(name, r.tensor(e.name));
        }
      }
      QVERIFY(saw_visual && saw_lm_head);  // the fixture carries both parts the loader leaves
      zs::io::write_safetensors(v5, renamed);
    }
    QwenTextModel modern(QwenTextConfig::from_file(qwen_fixture("qwen_text_encoder/config.json")));
    load_qwen_text_weights(*modern, {v5});
    const auto a = legacy->named_parameters(), b = modern->named_parameters();
    QCOMPARE(a.size(), b.size());
    for (const auto& p : a) QVERIFY2(at::equal(p.value(), b[p.key()]), p.key().c_str());

    QwenTextConfig wider = QwenTextConfig::from_file(qwen_fixture("qwen_text_encoder/config.json"));
    wider.intermediate_size = 48;
    QwenTextModel wrong(wider);
    try {
      load_qwen_text_weights(*wrong, qwen_encoder_files());
      QFAIL("loaded");
    } catch (const zs::Error& e) {
      QVERIFY2(QString(e.what()).contains("qwen_text_encoder/model-0000") &&
                   QString(e.what()).contains("model.layers.0.mlp.gate_proj.weight has shape [64, 32]"),
               e.what());
    }
    const std::string other = dir.filePath("other.safetensors").toStdString();
    zs::io::write_safetensors(other, {{"text_model.embeddings.weight", at::zeros({2, 2})}});
    try {
      load_qwen_text_weights(*wrong, {other});
      QFAIL("loaded");
    } catch (const zs::Error& e) {
      QVERIFY2(QString(e.what()).contains("other.safetensors: no Qwen2.5-VL language model"), e.what());
    }
  }

  // Streamed layer by layer (on a GPU: the weights in CPU memory, one layer on the device at a
  // time) computes what the resident model computes; here both on the CPU, the CUDA case being the
  // GPU issue's to run. The pieces end where they started.
  void streamedEqualsResident() {
    QwenTextModel model = qwen_load_encoder();
    const zs::io::SafetensorsReader ref(qwen_fixture("qwen_text.safetensors"));
    c10::NoGradGuard no_grad;
    const at::Tensor ids = ref.tensor("batch.input_ids"), mask = ref.tensor("batch.attention_mask");
    QVERIFY(at::equal(model->forward_streamed(ids, mask, at::kCPU), model->forward(ids, mask)));
    for (const auto& p : model->parameters()) QVERIFY(p.device().is_cpu());
    const QwenTokenizer tok = QwenTokenizer::load(qwen_fixture("qwen_text_tokenizer"));
    QVERIFY(at::equal(qwen_image_prompt_states(*model, tok, "a dog", 1024, at::kCPU, /*streamed=*/true),
                      qwen_image_prompt_states(*model, tok, "a dog", 1024, at::kCPU)));
  }

  // Right padding only: a left-padded mask would leave rows with no key to attend to.
  void leftPaddingIsRefused() {
    const at::Tensor mask = at::tensor(std::vector<std::int64_t>{0, 1, 1, 1, 1, 0}, at::kLong).view({2, 3});
    QVERIFY_THROWS_EXCEPTION(zs::Error, qwen_text_attention_masks(mask, at::kFloat, at::kCPU));
    const auto masks = qwen_text_attention_masks(at::tensor(std::vector<std::int64_t>{1, 1, 1, 1, 1, 0}, at::kLong).view({2, 3}),
                                            at::kFloat, at::kCPU);
    QCOMPARE(masks.size(), std::size_t{2});
    QVERIFY(std::isinf(masks[1][2][2].item<float>()) && masks[1][2][1].item<float>() == 0.0f);
  }

  // Qwen2.5-VL-7B's language model without lm_head (../shared/REFERENCE.md; the generator counts
  // transformers' Qwen2_5_VLTextModel on the meta device): 7,070,619,136 parameters.
  void fullSizeParameterCountIsTheReference() {
    const std::int64_t want = qwen_tokens_json().at("full_size_parameters").get<std::int64_t>();
    QCOMPARE(want, std::int64_t{7'070'619'136});
    const zs::MetaTensorScope meta;
    QwenTextModel model(QwenTextConfig{});
    QCOMPARE(parameter_count(*model), want);
  }
};

ZS_TEST_MAIN(TestQwenText);
#include "tst_qwen_text.moc"
