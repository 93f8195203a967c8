// AutoencoderKL against diffusers' outputs on the sd15-tiny fixture: posterior mean and log-variance,
// decode; weights under the older attention names (and 1x1-conv shapes) load the same.
#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/safetensors.h"
#include "models/autoencoder_kl.h"

#include <QTemporaryDir>
#include <QtTest>

#include "model_support.h"
#include "test_support.h"

using namespace zs::models;
using zs::test::fixture;
using zs::test::max_abs_diff;


namespace {

AutoencoderKL fixture_vae() {
  AutoencoderKL vae(AutoencoderKLConfig::from_file(fixture("sd15-tiny/vae/config.json")));
  const zs::io::SafetensorsReader weights(fixture("sd15-tiny/vae/diffusion_pytorch_model.safetensors"));
  load_vae_weights(*vae, {&weights});
  return vae;
}
}  // namespace

class TestVae : public QObject {
  Q_OBJECT

 private slots:
  void encodeAndDecodeMatchDiffusers() {
    ZS_REQUIRE_SHARED();
    AutoencoderKL vae = fixture_vae();
    QCOMPARE(vae->config().downsample_factor(), std::int64_t{2});
    QCOMPARE(vae->config().scaling_factor, 0.18215);
    const zs::io::SafetensorsReader ref(fixture("sd15-tiny-reference/vae_io.safetensors"));
    c10::NoGradGuard no_grad;
    const DiagonalGaussian posterior = vae->encode(ref.tensor("image"));
    const double mean = max_abs_diff(posterior.mean, ref.tensor("posterior_mean"));
    const double logvar = max_abs_diff(posterior.logvar, ref.tensor("posterior_logvar"));
    const double decoded = max_abs_diff(vae->decode(ref.tensor("latent")), ref.tensor("decoded"));
    qInfo("max abs error: mean %.2e, logvar %.2e, decoded %.2e", mean, logvar, decoded);
    QVERIFY(mean <= 1e-4);
    QVERIFY(logvar <= 1e-4);
    QVERIFY(decoded <= 1e-4);
    const at::Tensor z = posterior.sample(at::make_generator<at::CPUGeneratorImpl>(1));
    QCOMPARE(z.sizes().vec(), (std::vector<std::int64_t>{1, 4, 16, 16}));
  }

  // Many SD 1.x files still name the mid-block attention query/key/value/proj_attn, some as 1x1 convs.
  void olderAttentionNamesLoad() {
    ZS_REQUIRE_SHARED();
    const zs::io::SafetensorsReader src(fixture("sd15-tiny/vae/diffusion_pytorch_model.safetensors"));
    std::vector<std::pair<std::string, at::Tensor>> renamed;
    for (const auto& e : src.entries()) {
      std::string name = e.name;
      at::Tensor t = src.tensor(name);
      for (const auto& [now, old] : {std::pair{".to_q.", ".query."}, {".to_k.", ".key."}, {".to_v.", ".value."},
                                     {".to_out.0.", ".proj_attn."}})
        if (const auto at = name.find(now); at != std::string::npos) {
          name = name.substr(0, at) + old + name.substr(at + std::string(now).size());
          if (t.dim() == 2) t = t.reshape({t.size(0), t.size(1), 1, 1});
        }
      renamed.emplace_back(name, t);
    }
    QTemporaryDir dir;
    const std::string path = (dir.path() + "/old.safetensors").toStdString();
    zs::io::write_safetensors(path, renamed);
    AutoencoderKL vae(AutoencoderKLConfig::from_file(fixture("sd15-tiny/vae/config.json")));
    const zs::io::SafetensorsReader old(path);
    load_vae_weights(*vae, {&old});
    AutoencoderKL ref = fixture_vae();
    const zs::io::SafetensorsReader io(fixture("sd15-tiny-reference/vae_io.safetensors"));
    c10::NoGradGuard no_grad;
    QCOMPARE(max_abs_diff(vae->decode(io.tensor("latent")), ref->decode(io.tensor("latent"))), 0.0);
  }

  void badFilesNameTheProblem() {
    ZS_REQUIRE_SHARED();
    try {
      const nlohmann::json j = {{"block_out_channels", {32, 64}}, {"down_block_types", {"DownEncoderBlock2D", "X"}}};
      AutoencoderKLConfig::from_json(j, "vae/config.json");
      QFAIL("accepted an unknown block");
    } catch (const zs::Error& e) {
      QVERIFY2(QString(e.what()).contains("vae/config.json: down_block_types: only DownEncoderBlock2D"), e.what());
    }
    AutoencoderKLConfig small = AutoencoderKLConfig::from_file(fixture("sd15-tiny/vae/config.json"));
    small.block_out_channels = {32, 32};
    AutoencoderKL vae(small);
    try {
      const zs::io::SafetensorsReader weights(fixture("sd15-tiny/vae/diffusion_pytorch_model.safetensors"));
      load_vae_weights(*vae, {&weights});
      QFAIL("loaded weights of another shape");
    } catch (const zs::Error& e) {
      QVERIFY2(QString(e.what()).contains("does not fit the model"), e.what());
      QVERIFY2(QString(e.what()).contains("encoder.mid_block.resnets.0.conv1.weight has shape [64, 64, 3, 3]"), e.what());
    }
  }
};

ZS_TEST_MAIN(TestVae);
#include "tst_vae.moc"
