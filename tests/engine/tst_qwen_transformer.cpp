// Qwen-Image's transformer against the pinned diffusers: tests/fixtures/qwen_transformer.safetensors,
// written by tests/fixtures/gen/qwen_transformer.py from diffusers'
// src/diffusers/models/transformers/transformer_qwenimage.py (QwenImageTransformer2DModel,
// QwenEmbedRope) and pipelines/qwenimage/pipeline_qwenimage.py (_pack_latents, img_shapes).
#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <torch/nn/modules/linear.h>  // before Qt's `slots` macro

#include <QtTest>

#include <fstream>
#include <set>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/meta_tensors.h"
#include "io/safetensors.h"
#include "models/qwen_image/qwen_transformer.h"
#include "models/weights.h"
#include "model_support.h"
#include "test_support.h"

using namespace zs::models;

namespace {

nlohmann::json tiny_json() {
  return nlohmann::json{{"_class_name", "QwenImageTransformer2DModel"},
                        {"patch_size", 2},
                        {"in_channels", 16},
                        {"out_channels", 4},
                        {"num_layers", 2},
                        {"attention_head_dim", 16},
                        {"num_attention_heads", 2},
                        {"joint_attention_dim", 24},
                        {"guidance_embeds", false},
                        {"axes_dims_rope", {4, 6, 6}},
                        {"zero_cond_t", false},
                        {"use_additional_t_cond", false},
                        {"use_layer3d_rope", false}};
}

QwenImageConfig tiny_config() { return QwenImageConfig::from_json(tiny_json(), "tiny"); }

/// The fixture, or a skip (a failure under CI) when it is absent.
std::unique_ptr<zs::io::SafetensorsReader> open_fixture() {
  const QString path = zs::test::peerFixture("qwen_transformer.safetensors");
  if (!QFileInfo::exists(path)) return nullptr;
  return std::make_unique<zs::io::SafetensorsReader>(path.toStdString());
}
#define QWEN_FIXTURE(ref)                                                                                        \
  const auto ref = open_fixture();                                                                               \
  if (!ref)                                                                                                      \
    ZS_SKIP_UNLESS_CI("tests/fixtures/qwen_transformer.safetensors is absent; run tests/fixtures/gen/qwen_transformer.py")

void load_fixture_weights(QwenImageTransformer2DModelImpl& model, const zs::io::SafetensorsReader& ref) {
  load_weights(model, [&](const std::string& name) {
    const std::string key = "weight." + name;
    return ref.contains(key) ? ref.tensor(key) : at::Tensor();
  }, "qwen_transformer.safetensors");
}

double max_diff(const at::Tensor& a, const at::Tensor& b) {
  return (a.to(at::kDouble) - b.to(at::kDouble)).abs().max().item<double>();
}

at::Tensor run(QwenImageTransformer2DModel& model, const zs::io::SafetensorsReader& ref, const at::Tensor& context,
               const at::Tensor& mask, const at::Tensor& timestep) {
  return model->forward(ref.tensor("hidden"), context, mask, timestep, 4, 6);
}

/// The error text of from_json on `j`, or "" when it parses.
std::string refusal(const nlohmann::json& j) {
  try {
    QwenImageConfig::from_json(j, "transformer/config.json");
  } catch (const zs::Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

class TestQwenTransformer : public QObject {
  Q_OBJECT

 private slots:
  void configParsesAndRefusesVariants() {
    const QwenImageConfig c = tiny_config();
    QCOMPARE(c.num_layers, std::int64_t{2});
    QCOMPARE(c.inner_dim(), std::int64_t{32});
    QCOMPARE(c.out_channels, std::int64_t{4});
    QCOMPARE(c.axes_dims_rope, (std::vector<std::int64_t>{4, 6, 6}));
    const QwenImageConfig back = QwenImageConfig::from_json(c.to_json(), "round trip");
    QCOMPARE(back.to_json(), c.to_json());
    // Absent keys take diffusers' defaults, unknown ones are ignored; out_channels null means
    // in_channels (diffusers' `out_channels or in_channels`).
    const QwenImageConfig full = QwenImageConfig::from_json(
        nlohmann::json{{"_class_name", "QwenImageTransformer2DModel"}, {"_diffusers_version", "0.34.0.dev0"},
                       {"pooled_projection_dim", 768}},
        "config.json");
    QCOMPARE(full.out_channels, std::int64_t{16});
    QCOMPARE(full.inner_dim(), std::int64_t{3072});
    QCOMPARE(full.to_json(), QwenImageConfig{}.to_json());
    QCOMPARE(QwenImageConfig::from_json(nlohmann::json{{"out_channels", nullptr}, {"in_channels", 32}}, "c").out_channels,
             std::int64_t{32});

    for (const char* key : {"zero_cond_t", "use_additional_t_cond", "use_layer3d_rope", "guidance_embeds"}) {
      nlohmann::json j = tiny_json();
      j[key] = true;
      const std::string e = refusal(j);
      QVERIFY2(e.starts_with(std::string("transformer/config.json: ") + key + ": true is not supported"), e.c_str());
    }
    auto with = [](const char* key, nlohmann::json v) {
      nlohmann::json j = tiny_json();
      j[key] = std::move(v);
      return j;
    };
    const std::vector<std::pair<nlohmann::json, std::string>> bad = {
        {with("_class_name", "FluxTransformer2DModel"), "transformer/config.json: _class_name: \"FluxTransformer2DModel\" is not"},
        {with("zero_cond_t", "yes"), "transformer/config.json: zero_cond_t: expected true or false"},
        {with("axes_dims_rope", {4, 6, 8}), "transformer/config.json: axes_dims_rope: sums to 18 but attention_head_dim is 16"},
        {with("axes_dims_rope", {8, 8}), "transformer/config.json: axes_dims_rope: expected three axes"},
        {with("patch_size", 1), "transformer/config.json: patch_size: only 2 is supported"},
        {with("num_layers", 2.5), "transformer/config.json: num_layers: expected an integer"},
        {with("in_channels", 0), "transformer/config.json: in_channels: must be at least 1"},
    };
    for (const auto& [j, want] : bad) {
      const std::string e = refusal(j);
      QVERIFY2(e.starts_with(want), ("got: " + e + "\nwant: " + want).c_str());
    }
    // From a file: its path in the error.
    const QTemporaryDir dir;
    const std::string path = dir.filePath("config.json").toStdString();
    std::ofstream(path) << with("use_layer3d_rope", true).dump();
    try {
      QwenImageConfig::from_file(path);
      QFAIL("loaded a layered config");
    } catch (const zs::Error& e) {
      QVERIFY2(std::string(e.what()).starts_with(path + ": use_layer3d_rope:"), e.what());
    }
    std::ofstream(path) << tiny_json().dump();
    QCOMPARE(QwenImageConfig::from_file(path).num_layers, std::int64_t{2});
  }

  // _pack_latents is Flux's; QwenEmbedRope's positions (scale_rope: a centred grid, text after
  // its largest index) and rotations for a 4 × 6 grid and 7 text tokens.
  void packingAndRopeAreThePipelines() {
    QWEN_FIXTURE(ref);
    QVERIFY(at::equal(pack_latents_2x2(ref->tensor("latents").squeeze(1)), ref->tensor("hidden")));
    const at::Tensor ids = qwen_rope_ids(4, 6, 7, at::kCPU);
    QCOMPARE(ids.size(0), std::int64_t{7 + 24});
    QVERIFY(at::equal(ids[0], at::full({3}, 3, at::kLong)));   // text starts at max(4/2, 6/2)
    QVERIFY(at::equal(ids[6], at::full({3}, 9, at::kLong)));
    QVERIFY(at::equal(ids[7], at::tensor({0, -2, -3}, at::kLong)));   // first image token: row −2, column −3
    QVERIFY(at::equal(ids[30], at::tensor({0, 1, 2}, at::kLong)));    // last: row 1, column 2
    const auto [cos, sin] = qwen_rope(ids, {4, 6, 6});
    const at::Tensor want = at::cat({ref->tensor("rope.text"), ref->tensor("rope.image")}, 0);  // [31, 8, 2]
    const at::Tensor pairs = at::stack({cos.slice(1, 0, 16, 2), sin.slice(1, 0, 16, 2)}, -1);
    QVERIFY(at::equal(cos.slice(1, 0, 16, 2), cos.slice(1, 1, 16, 2)));
    QVERIFY2(max_diff(pairs, want) <= 2e-7, qPrintable(QString("rope differs by %1").arg(max_diff(pairs, want))));
  }

  // The golden values are diffusers' module run with its timestep sinusoid in float64 ("exact.*"),
  // as tst_flux's: diffusers' float32 sinusoid is 5e-5 (relative 1e-5) off it at σ·1000 = 900.
  // Against "exact.*": 1e-5 relative to the output's size, 1e-4 on gradients. Against diffusers
  // as it runs: 1e-4. Both attention paths; the second sample has padded text tokens.
  void forwardAndGradientsMatchDiffusers() {
    QWEN_FIXTURE(ref);
    for (const AttentionMode mode : {AttentionMode::plain, AttentionMode::blocked}) {
      QwenImageTransformer2DModel model(tiny_config());
      load_fixture_weights(*model, *ref);
      AttentionOptions o;
      o.mode = mode;
      QCOMPARE(set_attention_options(*model, o), std::size_t{2});
      {
        c10::NoGradGuard no_grad;
        const at::Tensor out2 = run(model, *ref, ref->tensor("context"), ref->tensor("context_mask"),
                                    ref->tensor("timestep_2"));
        const double scale = std::max(1.0, ref->tensor("exact.output_2").abs().max().item<double>());
        QVERIFY2(max_diff(out2, ref->tensor("exact.output_2")) <= 1e-5 * scale,
                 qPrintable(QString("output at σ (1, 0.02) differs by %1").arg(max_diff(out2, ref->tensor("exact.output_2")))));
        QVERIFY(max_diff(out2, ref->tensor("output_2")) <= 1e-4 * scale);
      }
      const at::Tensor out = run(model, *ref, ref->tensor("context"), ref->tensor("context_mask"), ref->tensor("timestep"));
      QCOMPARE(out.sizes(), ref->tensor("output").sizes());
      const double scale = std::max(1.0, ref->tensor("exact.output").abs().max().item<double>());
      const double d = max_diff(out, ref->tensor("exact.output"));
      QVERIFY2(d <= 1e-5 * scale, qPrintable(QString("output differs by %1 (scale %2)").arg(d).arg(scale)));
      QVERIFY(max_diff(out, ref->tensor("output")) <= 1e-4 * scale);
      (out * ref->tensor("w")).sum().backward();
      // The last block's text-only layers: no gradient in diffusers (stored as zeros).
      std::size_t checked = 0;
      const std::string differs = zs::test::gradients_differ(*model, *ref, "exact.grad.", 1e-4, checked);
      QVERIFY2(differs.empty(), differs.c_str());
      // Parameter names are diffusers': every one of the fixture's.
      std::size_t weights = 0;
      for (const auto& e : ref->entries()) weights += e.name.starts_with("weight.") ? 1 : 0;
      QCOMPARE(checked, weights);
    }
  }

  // Padded text tokens are no keys: whatever they hold, the image output stays the same; an
  // undefined mask is an all-valid one; and the mask matters (the padded sample changes without it).
  void paddingTokensDoNotReachTheImage() {
    QWEN_FIXTURE(ref);
    QwenImageTransformer2DModel model(tiny_config());
    load_fixture_weights(*model, *ref);
    c10::NoGradGuard no_grad;
    const at::Tensor context = ref->tensor("context"), mask = ref->tensor("context_mask"), t = ref->tensor("timestep");
    QCOMPARE(mask[1].sum().item<double>(), 4.0);
    const at::Tensor out = run(model, *ref, context, mask, t);
    at::Tensor other = context.clone();
    other[1].narrow(0, 4, 3).normal_().mul_(10);
    QVERIFY(at::equal(run(model, *ref, other, mask, t), out));
    // The mask as booleans and as integers reads the same.
    QVERIFY(at::equal(run(model, *ref, other, mask.to(at::kBool), t), out));
    const at::Tensor unmasked = run(model, *ref, context, at::Tensor(), t);
    QVERIFY(at::equal(run(model, *ref, context, at::ones_like(mask), t), unmasked));
    QVERIFY(at::allclose(unmasked[0], out[0], 1e-6, 1e-6));  // sample 0 has no padding
    QVERIFY(max_diff(unmasked[1], out[1]) > 1e-3);
    // Shapes are checked.
    QVERIFY_THROWS_EXCEPTION(std::invalid_argument, model->forward(ref->tensor("hidden"), context, mask, t, 6, 4 + 1));
    QVERIFY_THROWS_EXCEPTION(std::invalid_argument,
                             model->forward(ref->tensor("hidden"), context, mask.narrow(1, 0, 6), t, 4, 6));
  }

  // The ZeRO units: io, then one per block; every parameter in exactly one, in forward order;
  // hooks around each block in forward order with the joint sequence as its tensor; checkpointed
  // blocks (kept inputs on the device or in CPU memory) give the same gradients.
  void unitsHooksAndCheckpointing() {
    QWEN_FIXTURE(ref);
    QwenImageTransformer2DModel model(tiny_config());
    load_fixture_weights(*model, *ref);
    const auto units = model->units();
    QCOMPARE(units.size(), std::size_t{3});
    QCOMPARE(units[0].name, std::string("io"));
    QCOMPARE(units[2].name, std::string("transformer_blocks.1"));
    std::vector<std::string> listed;
    for (const auto& u : units)
      for (const auto& [name, t] : u.parameters) {
        listed.push_back(name);
        const bool in_block = name.starts_with(u.name + ".");
        QVERIFY2(u.name == "io" ? name.find("transformer_blocks.") == std::string::npos : in_block, name.c_str());
      }
    std::vector<std::string> names;
    for (const auto& p : model->named_parameters()) names.push_back(p.key());
    QCOMPARE(std::set<std::string>(listed.begin(), listed.end()).size(), listed.size());
    QCOMPARE(std::set<std::string>(listed.begin(), listed.end()), std::set<std::string>(names.begin(), names.end()));
    // Forward order within io: the embedders before the output layers.
    QCOMPARE(units[0].parameters.front().first, std::string("time_text_embed.timestep_embedder.linear_1.weight"));
    QCOMPARE(units[0].parameters.back().first, std::string("proj_out.bias"));
    // Every Linear is an AdaptedLinear (LoRA can adapt it).
    std::size_t linears = 0;
    for (const auto& m : model->modules()) {
      if (dynamic_cast<torch::nn::LinearImpl*>(m.get()) == nullptr) continue;
      QVERIFY(dynamic_cast<AdaptedLinearImpl*>(m.get()) != nullptr);
      ++linears;
    }
    QCOMPARE(linears, std::size_t{6 + 2 * 14});

    auto train = [&](bool checkpointing, bool to_cpu, std::shared_ptr<UnitHooks> hooks) {
      model->set_gradient_checkpointing(checkpointing);
      model->set_cpu_checkpointing(to_cpu);
      model->set_unit_hooks(std::move(hooks));
      model->zero_grad();
      const at::Tensor out = run(model, *ref, ref->tensor("context"), ref->tensor("context_mask"), ref->tensor("timestep"));
      (out * ref->tensor("w")).sum().backward();
      std::vector<at::Tensor> grads;
      for (const auto& p : model->parameters())
        grads.push_back(p.grad().defined() ? p.grad().clone() : at::zeros_like(p));
      return std::make_pair(out.detach(), grads);
    };
    auto recorder = std::make_shared<zs::test::RecordingHooks>();
    const auto plain = train(false, false, recorder);
    // 24 image tokens; the blocks see 7 text + 24 image tokens.
    const std::vector<std::string> want = {"before 0 24", "before 1 31", "after 1", "before 2 31", "after 2", "after 0"};
    QCOMPARE(recorder->calls, want);
    for (const bool to_cpu : {false, true}) {
      const auto again = train(true, to_cpu, nullptr);
      QVERIFY(at::allclose(again.first, plain.first, 1e-6, 1e-6));
      for (std::size_t i = 0; i < plain.second.size(); ++i)
        QVERIFY2(at::allclose(again.second[i], plain.second[i], 1e-5, 1e-6), qPrintable(QString::number(i)));
    }
  }

  // The full-size shapes (../shared/REFERENCE.md, "Qwen-Image transformer"), built as meta tensors.
  void fullSizeParameterCountIsTheReference() {
    auto count = [](const torch::nn::Module& m) {
      std::int64_t n = 0;
      for (const auto& p : m.parameters()) n += p.numel();
      return n;
    };
    const zs::MetaTensorScope meta;
    QwenImageTransformer2DModel qwen(QwenImageConfig{});
    QCOMPARE(count(*qwen), std::int64_t{20'430'401'088});
    QCOMPARE(count(*qwen->transformer_blocks[0]), std::int64_t{339'831'296});  // 339.8 M
    QCOMPARE(qwen->units().size(), std::size_t{61});
  }
};

ZS_TEST_MAIN(TestQwenTransformer);
#include "tst_qwen_transformer.moc"
