// Qwen-Image's VAE against the pinned diffusers: tests/fixtures/qwen_vae.safetensors, written by
// tests/fixtures/gen/qwen_vae.py from diffusers' src/diffusers/models/autoencoders/
// autoencoder_kl_qwenimage.py (AutoencoderKLQwenImage, a tiny seeded one with Qwen-Image's level
// pattern) used on one frame as pipelines/qwenimage/pipeline_qwenimage.py and
// pipeline_qwenimage_edit.py use it (encode(image.unsqueeze(2)), decode(...)[:, :, 0], latents
// normalised by latents_mean/latents_std); and the full-size VAE's parameter count from its default
// config (../shared/REFERENCE.md "Qwen-Image VAE"), built on the meta device.
// LibTorch's module headers before Qt's (Qt's `slots` keyword is a macro).
#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <fstream>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/meta_tensors.h"
#include "io/safetensors.h"
#include "models/attention.h"
#include "models/qwen_image/qwen_vae.h"
#include "models/weights.h"

#include <QtTest>

#include "test_support.h"

using namespace zs::models;

namespace {

/// Qwen/Qwen-Image's vae/config.json.
nlohmann::json qwen_image_vae_json() {
  return {{"_class_name", "AutoencoderKLQwenImage"},
          {"_diffusers_version", "0.34.0.dev0"},
          {"attn_scales", nlohmann::json::array()},
          {"base_dim", 96},
          {"dim_mult", {1, 2, 4, 4}},
          {"dropout", 0.0},
          {"latents_mean", {-0.7571, -0.7089, -0.9113, 0.1075, -0.1745, 0.9653, -0.1517, 1.5508, 0.4134, -0.0715,
                            0.5517, -0.3632, -0.1922, -0.9497, 0.2503, -0.2921}},
          {"latents_std", {2.8184, 1.4541, 2.3275, 2.6558, 1.2196, 1.7708, 2.6052, 2.0743, 3.2687, 2.1526, 2.8652,
                           1.5579, 1.6382, 1.1253, 2.8251, 1.9160}},
          {"num_res_blocks", 2},
          {"temperal_downsample", {false, true, true}},
          {"z_dim", 16}};
}

/// The error text of `f`, or "" when it throws none.
template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const zs::Error& e) {
    return e.what();
  }
  return {};
}

double vae_diff(const at::Tensor& a, const at::Tensor& b) {
  return (a.to(at::kDouble) - b.to(at::kDouble)).abs().max().item<double>();
}

/// The generator's config, from the fixture's metadata ("..., config {json}").
QwenVaeConfig fixture_config(const zs::io::SafetensorsReader& ref) {
  const std::string about = ref.metadata().at("about");
  return QwenVaeConfig::from_json(nlohmann::json::parse(about.substr(about.find(", config ") + 9)), "qwen_vae.safetensors");
}

}  // namespace

class TestQwenVae : public QObject {
  Q_OBJECT

  /// tests/fixtures/qwen_vae.safetensors; skips (fails under CI) when absent.
  static std::string fixturePath() { return zs::test::peerFixture("qwen_vae.safetensors").toStdString(); }

 private slots:
  void configReadsQwenImagesVaeJson() {
    const QwenVaeConfig c = QwenVaeConfig::from_json(qwen_image_vae_json(), "vae/config.json");
    QCOMPARE(c.base_dim, std::int64_t{96});
    QCOMPARE(c.z_dim, std::int64_t{16});
    QCOMPARE(c.dim_mult, (std::vector<std::int64_t>{1, 2, 4, 4}));
    QCOMPARE(c.num_res_blocks, std::int64_t{2});
    QVERIFY(c.attn_scales.empty());
    QCOMPARE(c.temperal_downsample, (std::vector<bool>{false, true, true}));
    QCOMPARE(c.latents_mean.size(), std::size_t{16});
    QCOMPARE(c.latents_mean[0], -0.7571);
    QCOMPARE(c.latents_mean[15], -0.2921);
    QCOMPARE(c.latents_std[8], 3.2687);
    QCOMPARE(c.latents_std[15], 1.9160);
    QCOMPARE(c.downsample_factor(), std::int64_t{8});
    // diffusers' defaults are Qwen-Image's VAE, so an empty config and a default one are it too.
    const QwenVaeConfig defaults = QwenVaeConfig::from_json(nlohmann::json::object(), "vae/config.json");
    QCOMPARE(QwenVaeConfig{}.to_json(), c.to_json());
    QCOMPARE(defaults.to_json(), c.to_json());
    // to_json is diffusers' config (keys as diffusers writes them) and reads back the same.
    nlohmann::json expected = qwen_image_vae_json();
    expected.erase("_diffusers_version");
    expected["input_channels"] = 3;
    QCOMPARE(c.to_json(), expected);
    QCOMPARE(QwenVaeConfig::from_json(c.to_json(), "round trip").to_json(), expected);
  }

  void configRefusals_data() {
    QTest::addColumn<QByteArray>("patch");     // merged into Qwen-Image's vae/config.json
    QTest::addColumn<QString>("expected");      // a line of the error
    QTest::newRow("z_dim without its latents_mean")
        << QByteArray(R"({"z_dim": 4})") << "vae/config.json: latents_mean: has 16 values, z_dim is 4 (one per latent channel)";
    QTest::newRow("z_dim without its latents_std")
        << QByteArray(R"({"z_dim": 4})") << "vae/config.json: latents_std: has 16 values, z_dim is 4";
    QTest::newRow("short latents_std")
        << QByteArray(R"({"latents_std": [1.0, 2.0]})") << "vae/config.json: latents_std: has 2 values, z_dim is 16";
    QTest::newRow("a zero std")
        << QByteArray(R"({"latents_std": [1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,0]})")
        << "vae/config.json: latents_std: every value must be positive";
    QTest::newRow("latents_mean not numbers")
        << QByteArray(R"({"latents_mean": "zero"})") << "vae/config.json: latents_mean: expected a list of numbers, got \"zero\"";
    QTest::newRow("four input channels")
        << QByteArray(R"({"input_channels": 4})") << "vae/config.json: input_channels: only 3 (RGB) is supported, got 4";
    QTest::newRow("temperal_downsample too short")
        << QByteArray(R"({"temperal_downsample": [false, true]})")
        << "vae/config.json: temperal_downsample: needs len(dim_mult) - 1 = 3 entries, has 2";
    QTest::newRow("attention in the down blocks")
        << QByteArray(R"({"attn_scales": [0.5]})") << "vae/config.json: attn_scales: only [] is supported";
    QTest::newRow("base_dim as text")
        << QByteArray(R"({"base_dim": "96"})") << "vae/config.json: base_dim: expected an integer, got \"96\"";
    QTest::newRow("no residual blocks")
        << QByteArray(R"({"num_res_blocks": 0})") << "vae/config.json: num_res_blocks: must be at least 1, got 0";
    QTest::newRow("a zero multiplier")
        << QByteArray(R"({"dim_mult": [1, 0, 4, 4]})")
        << "vae/config.json: dim_mult: expected a list of positive integers, got [1,0,4,4]";
    QTest::newRow("Wan's class")
        << QByteArray(R"({"_class_name": "AutoencoderKLWan"})")
        << "vae/config.json: _class_name: expected \"AutoencoderKLQwenImage\", got \"AutoencoderKLWan\"";
  }

  void configRefusals() {
    QFETCH(QByteArray, patch);
    QFETCH(QString, expected);
    nlohmann::json j = qwen_image_vae_json();
    j.merge_patch(nlohmann::json::parse(patch.toStdString()));
    const QString what = QString::fromStdString(error_of([&] { QwenVaeConfig::from_json(j, "vae/config.json"); }));
    QVERIFY2(!what.split('\n').filter(QRegularExpression("^" + QRegularExpression::escape(expected))).isEmpty(),
             qPrintable(what));
  }

  // Every problem at once, a line each naming the file; from_file names the path.
  void everyProblemIsListedWithTheFile() {
    nlohmann::json j = qwen_image_vae_json();
    j["z_dim"] = 4;
    j["input_channels"] = 1;
    const QStringList lines =
        QString::fromStdString(error_of([&] { QwenVaeConfig::from_json(j, "vae/config.json"); })).split('\n');
    QCOMPARE(lines.size(), 3);
    for (const QString& l : lines) QVERIFY2(l.startsWith("vae/config.json: "), qPrintable(l));
    QVERIFY(lines[0].startsWith("vae/config.json: input_channels: "));

    QTemporaryDir dir;
    const std::string path = (dir.path() + "/config.json").toStdString();
    std::ofstream(path) << j.dump();
    const std::string what = error_of([&] { QwenVaeConfig::from_file(path); });
    QVERIFY2(what.starts_with(path + ": input_channels: "), what.c_str());
    QVERIFY(error_of([] { QwenVaeConfig::from_json(nlohmann::json::array(), "x.json"); }).starts_with("x.json: expected a JSON object"));
  }

  // The per-channel (z − mean) / std of Qwen-Image's pipelines, and back.
  void latentNormalisationIsPerChannel() {
    const QwenVaeConfig c;  // Qwen-Image's statistics
    const at::Tensor mean = at::tensor(c.latents_mean, at::kDouble).to(at::kFloat).view({1, 16, 1, 1});
    const at::Tensor std = at::tensor(c.latents_std, at::kDouble).to(at::kFloat).view({1, 16, 1, 1});
    const at::Tensor at_mean = mean.expand({2, 16, 3, 5}).contiguous();
    QVERIFY(vae_diff(c.to_model_latents(at_mean), at::zeros({2, 16, 3, 5})) <= 1e-7);
    QVERIFY(vae_diff(c.to_model_latents(at_mean + std), at::ones({2, 16, 3, 5})) <= 1e-6);
    QVERIFY(vae_diff(c.from_model_latents(at::ones({2, 16, 3, 5})), at_mean + std) <= 1e-6);
    QVERIFY(vae_diff(c.from_model_latents(at::zeros({1, 16, 2, 2})), mean.expand({1, 16, 2, 2})) == 0.0);
    // Channel 8 (std 3.2687, mean 0.4134): a value of 1.0 is (1 − 0.4134) / 3.2687 = 0.17946…
    at::Tensor one = at::zeros({1, 16, 1, 1});
    one[0][8][0][0] = 1.0;
    QVERIFY(std::abs(c.to_model_latents(one)[0][8][0][0].item<double>() - (1.0 - 0.4134) / 3.2687) <= 1e-7);
    const at::Tensor z = at::randn({2, 16, 4, 6}) * 3;
    QVERIFY(vae_diff(c.from_model_latents(c.to_model_latents(z)), z) <= 1e-5);
    QVERIFY(vae_diff(c.to_model_latents(c.from_model_latents(z)), z) <= 1e-5);
    QVERIFY(c.to_model_latents(z.to(at::kDouble)).scalar_type() == at::kDouble);
    const std::string what = error_of([&] { c.to_model_latents(at::zeros({1, 4, 2, 2})); });
    QVERIFY2(what.starts_with("to_model_latents: expected latents [B, 16, h, w]"), what.c_str());
  }

  // Encode (posterior mean and the clamped log-variance), the normalised latents and a decode
  // (clamped to [−1, 1]) of a 24×32 batch of 2, within 1e-5 of diffusers' 3-D path in float32.
  void encodeAndDecodeMatchDiffusers() {
    if (!QFile::exists(QString::fromStdString(fixturePath())))
      ZS_SKIP_UNLESS_CI("tests/fixtures/qwen_vae.safetensors not found: run tests/fixtures/gen/qwen_vae.py");
    const zs::io::SafetensorsReader ref(fixturePath());
    const QwenVaeConfig c = fixture_config(ref);
    QCOMPARE(c.z_dim, std::int64_t{4});
    QCOMPARE(c.temperal_downsample, (std::vector<bool>{false, true, true}));
    QwenVae vae(c);
    load_qwen_vae_weights(*vae, {&ref}, "weight.");
    // Parameter names are diffusers': every stored one is used, the time_convs' 5-D kernels too.
    std::size_t stored = 0;
    for (const auto& e : ref.entries()) stored += e.name.starts_with("weight.") ? 1 : 0;
    QCOMPARE(vae->named_parameters().size(), stored);
    QCOMPARE(vae->named_parameters()["decoder.up_blocks.0.upsamplers.0.time_conv.weight"].dim(), std::int64_t{5});
    QCOMPARE(set_attention_options(*vae, {}), std::size_t{2});  // the two mid-block attentions

    c10::NoGradGuard no_grad;
    const at::Tensor image = ref.tensor("image");  // [2, 3, 24, 32]
    const DiagonalGaussian posterior = vae->encode(image);
    QCOMPARE(posterior.mean.sizes(), (at::IntArrayRef{2, 4, 3, 4}));
    QVERIFY(vae_diff(posterior.mean, ref.tensor("mean")) <= 1e-5);
    QVERIFY(vae_diff(posterior.logvar, ref.tensor("logvar")) <= 1e-5);
    // The generator pushed log-variance channels 0 and 1 out of range: the clamp decided them.
    QVERIFY(at::equal(posterior.logvar.select(1, 0), at::full({2, 3, 4}, 20.0f)));
    QVERIFY(at::equal(posterior.logvar.select(1, 1), at::full({2, 3, 4}, -30.0f)));
    const at::Tensor model_latents = c.to_model_latents(posterior.mean);
    QVERIFY(vae_diff(model_latents, ref.tensor("model_latents")) <= 1e-5);

    const at::Tensor decoded = vae->decode(c.from_model_latents(ref.tensor("latents")));  // [2, 3, 24, 32]
    QCOMPARE(decoded.sizes(), (at::IntArrayRef{2, 3, 24, 32}));
    // The decoder's float32 sums run in another order than diffusers' conv3d: a few 1e-6 apart here
    // (diffusers' own float32 decode is 2e-6 from its float64 one; gen/qwen_vae.py keeps every RMS
    // norm at 8 channels or more, which keeps that rounding small).
    QVERIFY(vae_diff(decoded, ref.tensor("decoded")) <= 1e-5);
    qInfo("max |ours - diffusers|: mean %.2g, logvar %.2g, model latents %.2g, decoded %.2g",
          vae_diff(posterior.mean, ref.tensor("mean")), vae_diff(posterior.logvar, ref.tensor("logvar")),
          vae_diff(model_latents, ref.tensor("model_latents")), vae_diff(decoded, ref.tensor("decoded")));
    // Both sides of diffusers' clamp occur: some pixels at ±1, most inside.
    const double at_edge = (decoded.abs() >= 1.0f).to(at::kFloat).mean().item<double>();
    QVERIFY2(at_edge > 0.0 && at_edge < 0.2, qPrintable(QString::number(at_edge)));

    // Wrong shapes are refused with what is needed.
    std::string what = error_of([&] { vae->encode(at::zeros({1, 3, 20, 32})); });
    QVERIFY2(what.starts_with("Qwen-Image VAE: an image must be [B, 3, H, W] with H and W divisible by 8, got 4 "
                              "dimensions [1, 3, 20, 32]"),
             what.c_str());
    what = error_of([&] { vae->decode(at::zeros({1, 16, 3, 4})); });
    QVERIFY2(what == "Qwen-Image VAE: latents must be [B, 4, h, w], got 4 dimensions with 16 channels", what.c_str());
  }

  // Weights of another config are refused naming the file and the tensor, before anything is copied.
  void weightsOfAnotherConfigAreRefused() {
    if (!QFile::exists(QString::fromStdString(fixturePath())))
      ZS_SKIP_UNLESS_CI("tests/fixtures/qwen_vae.safetensors not found: run tests/fixtures/gen/qwen_vae.py");
    const zs::io::SafetensorsReader ref(fixturePath());
    const QwenVaeConfig tiny = fixture_config(ref);

    QwenVaeConfig wider = tiny;
    wider.base_dim = 16;
    QwenVae a(wider);
    const at::Tensor before = a->named_parameters()["encoder.conv_out.bias"].clone();
    std::string what = error_of([&] { load_qwen_vae_weights(*a, {&ref}, "weight."); });
    QVERIFY2(what.starts_with(fixturePath() + ": does not fit the model"), what.c_str());
    QVERIFY2(what.find("\n  weight.encoder.conv_in.weight has shape [8, 3, 3, 3, 3], the model needs [16, 3, 3, 3, 3]") !=
                 std::string::npos,
             what.c_str());
    QVERIFY(at::equal(a->named_parameters()["encoder.conv_out.bias"], before));

    QwenVaeConfig more_latents = tiny;
    more_latents.z_dim = 8;
    QwenVae b(more_latents);
    what = error_of([&] { load_qwen_vae_weights(*b, {&ref}, "weight."); });
    QVERIFY2(what.find("\n  weight.quant_conv.weight has shape [8, 8, 1, 1, 1], the model needs [16, 16, 1, 1, 1]") !=
                 std::string::npos,
             what.c_str());

    QwenVaeConfig fewer_blocks = tiny;
    fewer_blocks.num_res_blocks = 1;
    QwenVae d(fewer_blocks);
    what = error_of([&] { load_qwen_vae_weights(*d, {&ref}, "weight."); });
    QVERIFY2(what.starts_with(fixturePath() + ": "), what.c_str());
    QVERIFY2(what.find("that this VAE config does not make") != std::string::npos, what.c_str());
    QVERIFY2(what.find("\n  weight.decoder.up_blocks.0.resnets.2.conv1.weight") != std::string::npos, what.c_str());
  }

  // The full-size VAE (diffusers' default config = Qwen-Image's), built as meta tensors, has
  // diffusers' parameter count (gen/qwen_vae.py counts AutoencoderKLQwenImage() on the meta device).
  void fullSizeParameterCountIsDiffusers() {
    const std::int64_t diffusers_count = 126'892'531;
    if (QFile::exists(QString::fromStdString(fixturePath()))) {
      const zs::io::SafetensorsReader ref(fixturePath());
      QCOMPARE(ref.tensor("full_size_parameters").item<std::int64_t>(), diffusers_count);
    }
    const zs::MetaTensorScope meta;
    QwenVae full(QwenVaeConfig::from_json(qwen_image_vae_json(), "vae/config.json"));
    QCOMPARE(parameter_count(*full), diffusers_count);
    QCOMPARE(full->named_parameters()["encoder.conv_in.weight"].sizes(), (at::IntArrayRef{96, 3, 3, 3, 3}));
    QCOMPARE(full->named_parameters()["decoder.up_blocks.2.upsamplers.0.resample.1.weight"].sizes(),
             (at::IntArrayRef{96, 192, 3, 3}));
  }
};

ZS_TEST_MAIN(TestQwenVae);
#include "tst_qwen_vae.moc"
