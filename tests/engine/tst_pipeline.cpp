// Diffusers pipeline folders: components from model_index.json, weights from one file, from
// shards named by an index, or from the fp16 variant; clear errors for what is missing.
#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/atomic_file.h"
#include "io/safetensors.h"
#include "models/diffusers_pipeline.h"

#include <QDir>
#include <QFile>
#include <QTemporaryDir>
#include <QtTest>

#include "test_support.h"

using namespace zs::models;

namespace {
QString fixtureDir() { return zs::test::sharedDir() + "/fixtures/sd15-tiny"; }

/// Copies the fixture folder to `dir`, leaving out `skip` (a relative path).
void copy_fixture(const QString& dir, const QString& skip = {}) {
  for (const QString& comp : QDir(fixtureDir()).entryList(QDir::Dirs | QDir::NoDotAndDotDot)) {
    QDir().mkpath(dir + "/" + comp);
    for (const QString& f : QDir(fixtureDir() + "/" + comp).entryList(QDir::Files))
      if (comp + "/" + f != skip) QFile::copy(fixtureDir() + "/" + comp + "/" + f, dir + "/" + comp + "/" + f);
  }
  QFile::copy(fixtureDir() + "/model_index.json", dir + "/model_index.json");
}

at::Tensor unet_out(const DiffusersPipeline& p) {
  const zs::io::SafetensorsReader ref((zs::test::sharedDir() + "/fixtures/sd15-tiny-reference/unet_io.safetensors").toStdString());
  auto unet = p.load_unet();
  c10::NoGradGuard no_grad;
  return unet->forward(ref.tensor("sample"), ref.tensor("timestep"), ref.tensor("encoder_hidden_states"));
}
}  // namespace

class TestPipeline : public QObject {
  Q_OBJECT

 private slots:
  void componentsOfTheFixture() {
    ZS_REQUIRE_SHARED();
    const auto p = DiffusersPipeline::open(fixtureDir().toStdString());
    QCOMPARE(QString::fromStdString(p.class_name()), QString("StableDiffusionPipeline"));
    QCOMPARE(p.components().size(), std::size_t{5});  // safety_checker and feature_extractor are [null, null]
    QVERIFY(p.has("vae") && p.has("tokenizer") && !p.has("safety_checker"));
    QCOMPARE(p.load_tokenizer().vocab_size(), std::size_t{49408});
    QCOMPARE(p.load_scheduler().beta_schedule, std::string("scaled_linear"));
  }

  // The same UNet from shards listed in an index, and from an fp16 variant (to fp16 precision).
  void shardedAndFp16WeightsLoad() {
    ZS_REQUIRE_SHARED();
    const auto plain = DiffusersPipeline::open(fixtureDir().toStdString());
    const at::Tensor want = unet_out(plain);
    QTemporaryDir dir;
    copy_fixture(dir.path(), "unet/diffusion_pytorch_model.safetensors");
    const zs::io::SafetensorsReader src(plain.weight_files("unet")[0]);
    std::vector<std::pair<std::string, at::Tensor>> a, b;
    nlohmann::json map = nlohmann::json::object();
    for (std::size_t i = 0; i < src.entries().size(); ++i) {
      const std::string& name = src.entries()[i].name;
      const bool first = i % 2 == 0;
      (first ? a : b).emplace_back(name, src.tensor(name));
      map[name] = first ? "diffusion_pytorch_model-00001-of-00002.safetensors" : "diffusion_pytorch_model-00002-of-00002.safetensors";
    }
    const std::string unet_dir = (dir.path() + "/unet/").toStdString();
    zs::io::write_safetensors(unet_dir + "diffusion_pytorch_model-00001-of-00002.safetensors", a);
    zs::io::write_safetensors(unet_dir + "diffusion_pytorch_model-00002-of-00002.safetensors", b);
    zs::io::write_file_atomic(unet_dir + "diffusion_pytorch_model.safetensors.index.json",
                              nlohmann::json{{"metadata", nlohmann::json::object()}, {"weight_map", map}}.dump());
    const auto sharded = DiffusersPipeline::open(dir.path().toStdString());
    QCOMPARE(sharded.weight_files("unet").size(), std::size_t{2});
    QCOMPARE((unet_out(sharded) - want).abs().max().item<double>(), 0.0);

    QTemporaryDir half;
    copy_fixture(half.path(), "unet/diffusion_pytorch_model.safetensors");
    std::vector<std::pair<std::string, at::Tensor>> h;
    for (const auto& e : src.entries()) h.emplace_back(e.name, src.tensor(e.name).to(at::kHalf));
    zs::io::write_safetensors((half.path() + "/unet/diffusion_pytorch_model.fp16.safetensors").toStdString(), h);
    const auto fp16 = DiffusersPipeline::open(half.path().toStdString());
    QVERIFY(QString::fromStdString(fp16.weight_files("unet")[0]).endsWith("diffusion_pytorch_model.fp16.safetensors"));
    const double err = (unet_out(fp16) - want).abs().max().item<double>();
    QVERIFY2(err < 5e-3, qPrintable(QString::number(err)));
  }

  void missingPiecesAreNamed() {
    ZS_REQUIRE_SHARED();
    QTemporaryDir dir;
    try {
      DiffusersPipeline::open(dir.path().toStdString());
      QFAIL("opened a folder without model_index.json");
    } catch (const zs::Error& e) {
      QVERIFY2(QString(e.what()).contains("model_index.json: not found"), e.what());
    }
    copy_fixture(dir.path(), "vae/diffusion_pytorch_model.safetensors");
    QFile bin(dir.path() + "/vae/diffusion_pytorch_model.bin");
    QVERIFY(bin.open(QIODevice::WriteOnly));
    bin.close();
    const auto p = DiffusersPipeline::open(dir.path().toStdString());
    try {
      p.load_vae();
      QFAIL("loaded a VAE without safetensors");
    } catch (const zs::Error& e) {
      QVERIFY2(QString(e.what()).contains("only PyTorch .bin weights found"), e.what());
    }
  }
};

QTEST_MAIN(TestPipeline)
#include "tst_pipeline.moc"
