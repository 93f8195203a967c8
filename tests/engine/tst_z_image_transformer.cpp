// Z-Image's transformer against the pinned diffusers: tests/fixtures/z_image_transformer.safetensors,
// written by tests/fixtures/gen/z_image_transformer.py from diffusers'
// src/diffusers/models/transformers/transformer_z_image.py (ZImageTransformer2DModel, its
// patchify_and_embed, _prepare_sequence, _build_unified_sequence, RopeEmbedder).
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
#include "models/weights.h"
#include "models/z_image/z_image_transformer.h"
#include "model_support.h"
#include "test_support.h"

using namespace zs::models;

namespace {

nlohmann::json tiny_json() {
  return nlohmann::json{{"_class_name", "ZImageTransformer2DModel"},
                        {"all_patch_size", {2}},
                        {"all_f_patch_size", {1}},
                        {"in_channels", 4},
                        {"dim", 32},
                        {"n_layers", 2},
                        {"n_refiner_layers", 1},
                        {"n_heads", 2},
                        {"n_kv_heads", 2},
                        {"norm_eps", 1e-5},
                        {"qk_norm", true},
                        {"cap_feat_dim", 24},
                        {"siglip_feat_dim", nullptr},
                        {"rope_theta", 256.0},
                        {"t_scale", 1000.0},
                        {"axes_dims", {4, 6, 6}},
                        {"axes_lens", {160, 16, 16}}};
}

ZImageConfig tiny_config() { return ZImageConfig::from_json(tiny_json(), "tiny"); }

std::unique_ptr<zs::io::SafetensorsReader> open_fixture() {
  const QString path = zs::test::peerFixture("z_image_transformer.safetensors");
  if (!QFileInfo::exists(path)) return nullptr;
  return std::make_unique<zs::io::SafetensorsReader>(path.toStdString());
}
#define Z_IMAGE_FIXTURE(ref)                                                                                          \
  const auto ref = open_fixture();                                                                                    \
  if (!ref)                                                                                                           \
    ZS_SKIP_UNLESS_CI("tests/fixtures/z_image_transformer.safetensors is absent; run tests/fixtures/gen/z_image_transformer.py")

void load_fixture_weights(ZImageTransformer2DModelImpl& model, const zs::io::SafetensorsReader& ref) {
  load_weights(model, [&](const std::string& name) {
    const std::string key = "weight." + name;
    return ref.contains(key) ? ref.tensor(key) : at::Tensor();
  }, "z_image_transformer.safetensors");
}

/// The model on the fixture's batch ([B, C, 1, H, W] latents: one frame, dropped here); the
/// output with the frame put back, as diffusers returns it.
at::Tensor run(ZImageTransformer2DModel& model, const zs::io::SafetensorsReader& ref, const at::Tensor& t) {
  return model->forward(ref.tensor("latents").squeeze(2), ref.tensor("context"), ref.tensor("context_mask"), t).unsqueeze(2);
}

std::string refusal(const nlohmann::json& j) {
  try {
    ZImageConfig::from_json(j, "transformer/config.json");
  } catch (const zs::Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

class TestZImageTransformer : public QObject {
  Q_OBJECT

 private slots:
  void configParsesAndRefusesVariants() {
    const ZImageConfig c = tiny_config();
    QCOMPARE(c.head_dim(), std::int64_t{16});
    QCOMPARE(c.adaln_dim(), std::int64_t{32});
    QCOMPARE(ZImageConfig::from_json(c.to_json(), "round trip").to_json(), c.to_json());
    // Absent keys take diffusers' defaults (the released model's).
    const ZImageConfig full = ZImageConfig::from_json(nlohmann::json{{"_class_name", "ZImageTransformer2DModel"}}, "c");
    QCOMPARE(full.to_json(), ZImageConfig{}.to_json());
    QCOMPARE(full.head_dim(), std::int64_t{128});
    auto with = [](const char* key, nlohmann::json v) {
      nlohmann::json j = tiny_json();
      j[key] = std::move(v);
      return j;
    };
    const std::vector<std::pair<nlohmann::json, std::string>> bad = {
        {with("_class_name", "QwenImageTransformer2DModel"), "transformer/config.json: _class_name: \"QwenImageTransformer2DModel\" is not"},
        {with("siglip_feat_dim", 1152), "transformer/config.json: siglip_feat_dim: is set (Z-Image Omni"},
        {with("all_patch_size", {2, 4}), "transformer/config.json: all_patch_size: only [2] is supported"},
        {with("all_f_patch_size", {2}), "transformer/config.json: all_f_patch_size: only [1] is supported"},
        {with("n_kv_heads", 1), "transformer/config.json: n_kv_heads: 1 differs from n_heads 2"},
        {with("axes_dims", {4, 6, 8}), "transformer/config.json: axes_dims: sums to 18 but the head size (dim / n_heads) is 16"},
        {with("axes_lens", {160, 16}), "transformer/config.json: axes_lens: expected three axes"},
        {with("qk_norm", "yes"), "transformer/config.json: qk_norm: expected true or false"},
        {with("norm_eps", "small"), "transformer/config.json: norm_eps: expected a number"},
        {with("dim", 33), "transformer/config.json: n_heads: 2 does not divide dim 33"},
    };
    for (const auto& [j, want] : bad) {
      const std::string e = refusal(j);
      QVERIFY2(e.find(want) == 0, ("got: " + e + "\nwant: " + want).c_str());
    }
    const QTemporaryDir dir;
    const std::string path = dir.filePath("config.json").toStdString();
    std::ofstream(path) << with("n_layers", -1).dump();
    try {
      ZImageConfig::from_file(path);
      QFAIL("loaded a config with -1 layers");
    } catch (const zs::Error& e) {
      QVERIFY2(std::string(e.what()).starts_with(path + ": n_layers:"), e.what());
    }
  }

  // Against "exact.*" (diffusers with its time sinusoid in float64): 1e-5 relative to the output's
  // size, 1e-4 on gradients; against diffusers as it runs, 1e-4 (its float32 sinusoid). The batch's
  // captions pad to 32 and 64 tokens, so the context refiner and the main blocks mask the first
  // sample's batch padding; both attention paths.
  void forwardAndGradientsMatchDiffusers() {
    Z_IMAGE_FIXTURE(ref);
    for (const AttentionMode mode : {AttentionMode::plain, AttentionMode::blocked}) {
      ZImageTransformer2DModel model(tiny_config());
      load_fixture_weights(*model, *ref);
      AttentionOptions o;
      o.mode = mode;
      QCOMPARE(set_attention_options(*model, o), std::size_t{4});
      {
        c10::NoGradGuard no_grad;
        const at::Tensor out2 = run(model, *ref, ref->tensor("t_2"));
        const double scale = std::max(1.0, ref->tensor("exact.output_2").abs().max().item<double>());
        QVERIFY2(zs::test::max_abs_diff(out2, ref->tensor("exact.output_2")) <= 1e-5 * scale,
                 qPrintable(QString("output at t (1, 0.02) differs by %1").arg(zs::test::max_abs_diff(out2, ref->tensor("exact.output_2")))));
        QVERIFY(zs::test::max_abs_diff(out2, ref->tensor("output_2")) <= 1e-4 * scale);
        // The first sample alone: no batch padding anywhere.
        const at::Tensor alone = model->forward(ref->tensor("latents").narrow(0, 0, 1).squeeze(2),
                                                ref->tensor("context").narrow(0, 0, 1).narrow(1, 0, 7), at::Tensor(),
                                                ref->tensor("t").narrow(0, 0, 1))[0].unsqueeze(1);
        QVERIFY2(zs::test::max_abs_diff(alone, ref->tensor("exact.alone")) <= 1e-5 * scale,
                 qPrintable(QString("alone differs by %1").arg(zs::test::max_abs_diff(alone, ref->tensor("exact.alone")))));
      }
      const at::Tensor out = run(model, *ref, ref->tensor("t"));
      QCOMPARE(out.sizes(), ref->tensor("output").sizes());
      const double scale = std::max(1.0, ref->tensor("exact.output").abs().max().item<double>());
      const double d = zs::test::max_abs_diff(out, ref->tensor("exact.output"));
      QVERIFY2(d <= 1e-5 * scale, qPrintable(QString("output differs by %1 (scale %2)").arg(d).arg(scale)));
      QVERIFY(zs::test::max_abs_diff(out, ref->tensor("output")) <= 1e-4 * scale);
      (out * ref->tensor("w")).sum().backward();
      std::size_t checked = 0;
      const std::string differs = zs::test::gradients_differ(*model, *ref, "exact.grad.", 1e-4, checked);
      QVERIFY2(differs.empty(), differs.c_str());
      std::size_t weights = 0;
      for (const auto& e : ref->entries()) weights += e.name.starts_with("weight.") ? 1 : 0;
      QCOMPARE(checked, weights);
    }
  }

  // A caption's tokens past its mask do not reach anything; shapes are checked.
  void maskedCaptionTokensDoNotMatter() {
    Z_IMAGE_FIXTURE(ref);
    ZImageTransformer2DModel model(tiny_config());
    load_fixture_weights(*model, *ref);
    c10::NoGradGuard no_grad;
    const at::Tensor latents = ref->tensor("latents").squeeze(2), context = ref->tensor("context"),
                     mask = ref->tensor("context_mask"), t = ref->tensor("t");
    const at::Tensor out = model->forward(latents, context, mask, t);
    at::Tensor other = context.clone();
    other[0].narrow(0, 7, other.size(1) - 7).normal_().mul_(10);
    QVERIFY(at::equal(model->forward(latents, other, mask, t), out));
    QVERIFY(zs::test::max_abs_diff(model->forward(latents, context, at::Tensor(), t)[0], out[0]) > 1e-3);  // the mask matters
    QVERIFY_THROWS_EXCEPTION(std::invalid_argument, model->forward(latents.narrow(3, 0, 11), context, mask, t));
    QVERIFY_THROWS_EXCEPTION(std::invalid_argument, model->forward(latents, context.narrow(2, 0, 8), mask, t));
    QVERIFY_THROWS_EXCEPTION(std::invalid_argument, model->forward(latents, context, mask, t.narrow(0, 0, 1)));
    QVERIFY_THROWS_EXCEPTION(std::invalid_argument, model->forward(latents, context, at::zeros_like(mask), t));
  }

  // The ZeRO units in forward order (io, the noise refiner, the context refiner, the main blocks),
  // every parameter in exactly one; hooks around each in that order; checkpointed units give the
  // same gradients.
  void unitsHooksAndCheckpointing() {
    Z_IMAGE_FIXTURE(ref);
    ZImageTransformer2DModel model(tiny_config());
    load_fixture_weights(*model, *ref);
    const auto units = model->units();
    std::vector<std::string> unit_names;
    for (const auto& u : units) unit_names.push_back(u.name);
    QCOMPARE(unit_names, (std::vector<std::string>{"io", "noise_refiner.0", "context_refiner.0", "layers.0", "layers.1"}));
    std::vector<std::string> listed;
    for (const auto& u : units)
      for (const auto& [name, t] : u.parameters) {
        listed.push_back(name);
        QVERIFY2(u.name == "io" ? !name.starts_with("layers.") && name.find("refiner.") == std::string::npos
                                : name.starts_with(u.name + "."),
                 name.c_str());
      }
    std::set<std::string> names;
    for (const auto& p : model->named_parameters()) names.insert(p.key());
    QCOMPARE(std::set<std::string>(listed.begin(), listed.end()).size(), listed.size());
    QCOMPARE(std::set<std::string>(listed.begin(), listed.end()), names);
    std::size_t linears = 0;
    for (const auto& m : model->modules()) {
      if (dynamic_cast<torch::nn::LinearImpl*>(m.get()) == nullptr) continue;
      QVERIFY(dynamic_cast<AdaptedLinearImpl*>(m.get()) != nullptr);
      ++linears;
    }
    QCOMPARE(linears, std::size_t{6 + 3 * 8 + 7});  // io's 6; 8 per modulated block, 7 in the context refiner

    auto train = [&](bool checkpointing, bool to_cpu, std::shared_ptr<UnitHooks> hooks) {
      model->set_gradient_checkpointing(checkpointing);
      model->set_cpu_checkpointing(to_cpu);
      model->set_unit_hooks(std::move(hooks));
      model->zero_grad();
      const at::Tensor out = run(model, *ref, ref->tensor("t"));
      (out * ref->tensor("w")).sum().backward();
      std::vector<at::Tensor> grads;
      for (const auto& p : model->parameters()) grads.push_back(p.grad().defined() ? p.grad().clone() : at::zeros_like(p));
      return std::make_pair(out.detach(), grads);
    };
    auto recorder = std::make_shared<zs::test::RecordingHooks>();
    const auto plain = train(false, false, recorder);
    // io sees the latents' channels; the noise refiner 32 image tokens, the context refiner the
    // longest caption's 64, the main blocks 32 + 64.
    const std::vector<std::string> want = {"before 0 4",  "before 1 32", "after 1", "before 2 64", "after 2",
                                           "before 3 96", "after 3",     "before 4 96", "after 4",     "after 0"};
    QCOMPARE(recorder->calls, want);
    for (const bool to_cpu : {false, true}) {
      const auto again = train(true, to_cpu, nullptr);
      QVERIFY(at::allclose(again.first, plain.first, 1e-6, 1e-6));
      for (std::size_t i = 0; i < plain.second.size(); ++i)
        QVERIFY2(at::allclose(again.second[i], plain.second[i], 1e-5, 1e-6), qPrintable(QString::number(i)));
    }
  }

  // The full-size shapes, built as meta tensors: Z-Image's 6.15 B parameters (diffusers'
  // ZImageTransformer2DModel() with its defaults: 30 + 2 + 2 blocks of width 3840).
  void fullSizeParameterCount() {
    auto count = [](const torch::nn::Module& m) {
      std::int64_t n = 0;
      for (const auto& p : m.parameters()) n += p.numel();
      return n;
    };
    const zs::MetaTensorScope meta;
    ZImageTransformer2DModel z(ZImageConfig{});
    QCOMPARE(count(*z), std::int64_t{6'154'908'736});  // sum(p.numel()) of diffusers' model on the meta device
    QCOMPARE(count(*z->layers[0]), std::int64_t{180'910'336});
    QCOMPARE(z->units().size(), std::size_t{1 + 2 + 2 + 30});
  }
};

ZS_TEST_MAIN(TestZImageTransformer);
#include "tst_z_image_transformer.moc"
