// Noise schedules, targets and DDIM against diffusers' values in the fixtures.
#include <ATen/ATen.h>

#include <QFile>
#include <QtTest>

#include <fstream>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "diffusion/noise_schedule.h"
#include "io/safetensors.h"
#include "test_support.h"

using namespace zs::diffusion;
using zs::test::fixture;

namespace {
double max_abs_diff_f32(const at::Tensor& a, const at::Tensor& b) { return (a.to(at::kFloat) - b.to(at::kFloat)).abs().max().item<double>(); }
}  // namespace

class TestDiffusion : public QObject {
  Q_OBJECT

 private slots:
  void scaledLinearMatchesDiffusers() {
    ZS_REQUIRE_SHARED();
    const NoiseSchedule s(ScheduleConfig::from_file(fixture("sd15-tiny/scheduler/scheduler_config.json")));
    const zs::io::SafetensorsReader ref(fixture("sd15-tiny-reference/scheduler_io.safetensors"));
    QVERIFY(max_abs_diff_f32(s.betas(), ref.tensor("betas")) <= 1e-7);
    QVERIFY(max_abs_diff_f32(s.alphas_cumprod(), ref.tensor("alphas_cumprod")) <= 1e-6);
  }

  void addNoiseAndVelocity() {
    ZS_REQUIRE_SHARED();
    const NoiseSchedule s(ScheduleConfig::from_file(fixture("sd15-tiny/scheduler/scheduler_config.json")));
    const zs::io::SafetensorsReader ref(fixture("sd15-tiny-reference/scheduler_io.safetensors"));
    const at::Tensor x0 = ref.tensor("x0"), noise = ref.tensor("noise"), t = ref.tensor("noise_timesteps");
    QVERIFY(max_abs_diff_f32(s.add_noise(x0, noise, t), ref.tensor("noisy")) <= 1e-5);
    QVERIFY(max_abs_diff_f32(s.velocity(x0, noise, t), ref.tensor("velocity")) <= 1e-5);
    QVERIFY(at::equal(s.target(x0, noise, t), noise));
  }

  void ddimTimestepsAndSteps() {
    ZS_REQUIRE_SHARED();
    const NoiseSchedule s(ScheduleConfig::from_file(fixture("sd15-tiny/scheduler/scheduler_config.json")));
    const DdimSampler ddim(s, 10);
    const zs::io::SafetensorsReader ref(fixture("sd15-tiny-reference/scheduler_io.safetensors"));
    const at::Tensor want = ref.tensor("ddim_timesteps");
    QCOMPARE(ddim.timesteps().size(), std::size_t{10});
    for (std::size_t i = 0; i < 10; ++i) QCOMPARE(ddim.timesteps()[i], want[static_cast<long>(i)].item<std::int64_t>());
    for (const int t : {901, 401, 1}) {
      const std::string k = "ddim_step_t" + std::to_string(t) + ".";
      const auto r = ddim.step(ref.tensor(k + "model_output"), t, ref.tensor(k + "sample"));
      QVERIFY2(max_abs_diff_f32(r.prev_sample, ref.tensor(k + "prev_sample")) <= 1e-4, k.c_str());
      QVERIFY2(max_abs_diff_f32(r.pred_original_sample, ref.tensor(k + "pred_original_sample")) <= 1e-4, k.c_str());
    }
  }

  void cosineScheduleAndVPrediction() {
    ScheduleConfig c;
    c.beta_schedule = "squaredcos_cap_v2";
    c.prediction_type = "v_prediction";
    const NoiseSchedule s(c);
    const at::Tensor ac = s.alphas_cumprod();
    // ᾱ falls monotonically from ~1 to ~0; betas are capped at 0.999.
    QVERIFY(ac[0].item<double>() > 0.9999);
    QVERIFY(ac[999].item<double>() < 1e-4);
    QVERIFY((ac.slice(0, 1) < ac.slice(0, 0, -1)).all().item<bool>());
    QVERIFY(s.betas().max().item<double>() <= 0.999 + 1e-6);
    // A v prediction made from the true x0 and noise gives back x0 exactly in one DDIM step.
    const at::Tensor x0 = at::randn({2, 3, 4, 4}), noise = at::randn({2, 3, 4, 4});
    const at::Tensor t = at::full({2}, 500, at::kLong);
    const at::Tensor xt = s.add_noise(x0, noise, t);
    const DdimSampler ddim(s, 20);
    const auto r = ddim.step(s.velocity(x0, noise, t), 500, xt);
    QVERIFY(max_abs_diff_f32(r.pred_original_sample, x0) < 1e-4);
  }

  void clipSampleClampsX0() {
    ScheduleConfig c;
    c.beta_schedule = "squaredcos_cap_v2";
    c.timestep_spacing = "trailing";
    c.clip_sample = true;
    const NoiseSchedule s(c);
    const DdimSampler ddim(s, 10);
    QCOMPARE(ddim.timesteps().front(), std::int64_t{999});
    // At t = 999 ᾱ is ~0: an epsilon x0 estimate explodes unless clamped.
    const at::Tensor x = at::randn({1, 3, 4, 4});
    const auto r = ddim.step(at::randn({1, 3, 4, 4}), 999, x);
    QVERIFY(r.pred_original_sample.abs().max().item<double>() <= 1.0);
    c.clip_sample = false;
    const NoiseSchedule loose(c);
    QVERIFY(DdimSampler(loose, 10).step(at::randn({1, 3, 4, 4}), 999, x).pred_original_sample.abs().max().item<double>() > 1.0);
  }

  void minSnrWeights() {
    const NoiseSchedule s{ScheduleConfig{}};
    const at::Tensor t = at::tensor({0, 500, 999}, at::kLong);
    const at::Tensor w = s.min_snr_weights(t, 5.0);
    const at::Tensor a = s.alphas_cumprod().index_select(0, t);
    const at::Tensor snr = a / (1 - a);
    // Low noise (high SNR) is down-weighted to γ/SNR; high noise keeps weight 1.
    QVERIFY(std::abs(w[0].item<double>() - 5.0 / snr[0].item<double>()) < 1e-6);
    QCOMPARE(w[2].item<float>(), 1.0f);
    QVERIFY(at::equal(s.min_snr_weights(t, 0), at::ones({3})));
  }

  void trailingSpacing() {
    ScheduleConfig c;
    c.timestep_spacing = "trailing";
    const NoiseSchedule s(c);
    const DdimSampler ddim(s, 4);
    QCOMPARE(ddim.timesteps(), (std::vector<std::int64_t>{999, 749, 499, 249}));
  }

  // Against the pinned current diffusers (tests/fixtures/ddim_scheduler.json, written by
  // tests/fixtures/gen/ddim_scheduler.py with diffusers' schedulers/scheduling_ddim.py
  // DDIMScheduler): the schedule, the inference timesteps for 10 and 25 steps, three DDIM steps
  // each and the training targets, for SD 1.x's configuration, v-prediction with trailing
  // spacing, the quickstart's cosine with clip_sample and a linear schedule with linspace spacing.
  void ddimMatchesThePinnedDiffusers() {
    QFile f(zs::test::peerFixture("ddim_scheduler.json"));
    QVERIFY2(f.open(QIODevice::ReadOnly), qPrintable(f.fileName()));
    const auto doc = nlohmann::json::parse(f.readAll().toStdString());
    const auto shape = doc.at("shape").get<std::vector<std::int64_t>>();
    auto tensor = [&](const nlohmann::json& values) {
      return at::tensor(values.get<std::vector<float>>()).reshape(shape);
    };
    const at::Tensor x0 = tensor(doc.at("x0")), noise = tensor(doc.at("noise"));
    const at::Tensor model_output = tensor(doc.at("model_output")), sample = tensor(doc.at("sample"));
    const at::Tensor train_t = at::tensor(doc.at("train_timesteps").get<std::vector<std::int64_t>>());
    QCOMPARE(doc.at("cases").size(), std::size_t{4});
    for (const auto& c : doc.at("cases")) {
      const std::string name = c.at("name").get<std::string>();
      const NoiseSchedule s(ScheduleConfig::from_json(c.at("config"), name));
      const at::Tensor want = at::tensor(c.at("alphas_cumprod").get<std::vector<float>>());
      QVERIFY2(max_abs_diff_f32(s.alphas_cumprod(), want) <= 1e-6, name.c_str());
      QVERIFY2(max_abs_diff_f32(s.add_noise(x0, noise, train_t), tensor(c.at("add_noise"))) <= 1e-5, name.c_str());
      QVERIFY2(max_abs_diff_f32(s.velocity(x0, noise, train_t), tensor(c.at("velocity"))) <= 1e-5, name.c_str());
      for (const auto& inf : c.at("inference")) {
        const DdimSampler ddim(s, inf.at("num_inference_steps").get<std::int64_t>());
        const std::string what = name + ", " + std::to_string(inf.at("num_inference_steps").get<int>()) + " steps";
        QVERIFY2(ddim.timesteps() == inf.at("timesteps").get<std::vector<std::int64_t>>(), what.c_str());
        for (const auto& st : inf.at("steps")) {
          const auto r = ddim.step(model_output, st.at("t").get<std::int64_t>(), sample);
          const std::string at_t = what + ", t " + std::to_string(st.at("t").get<int>());
          // Relative to the values' size: at t = 999 of a linear schedule ᾱ is 4e-5, and x0 = (x − √(1−ᾱ)·ε)/√ᾱ
          // amplifies float32's last bits by 1/√ᾱ ≈ 160 (values up to 5e2 there).
          for (const std::string key : {"prev_sample", "pred_original_sample"}) {
            const at::Tensor ours = key == "prev_sample" ? r.prev_sample : r.pred_original_sample;
            const at::Tensor theirs = tensor(st.at(key));
            const double scale = std::max(1.0, theirs.abs().max().item<double>());
            const double diff = max_abs_diff_f32(ours, theirs);
            QVERIFY2(diff <= 1e-5 * scale, (at_t + ", " + key + ": " + std::to_string(diff) + " of " + std::to_string(scale)).c_str());
          }
        }
      }
    }
  }

  void badConfigNamesTheKey() {
    try {
      ScheduleConfig::from_json(nlohmann::json{{"beta_schedule", "sigmoid"}}, "scheduler_config.json");
      QFAIL("accepted sigmoid");
    } catch (const zs::Error& e) {
      QVERIFY2(QString(e.what()).contains("scheduler_config.json: beta_schedule"), e.what());
    }
  }
};

ZS_TEST_MAIN(TestDiffusion);
#include "tst_diffusion.moc"
