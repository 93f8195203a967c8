// Noise schedules, targets and DDIM, and flow matching with FlowMatch Euler, against diffusers'
// values in the fixtures.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <QFile>
#include <QtTest>

#include <fstream>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "diffusion/flow_matching.h"
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

  // Against the pinned diffusers (tests/fixtures/flow_match_scheduler.json, written by
  // tests/fixtures/gen/flow_match_scheduler.py with diffusers'
  // schedulers/scheduling_flow_match_euler_discrete.py FlowMatchEulerDiscreteScheduler and
  // pipelines/flux/pipeline_flux.py calculate_shift): mu and the sampling sigmas/timesteps for
  // Flux [dev] (dynamic), [schnell], Qwen-Image (shift_terminal), a static shift and a linear time
  // shift at five image sizes and 1, 4 and 28 steps, then one Euler trajectory. diffusers computes
  // in float32, we in float64: 1e-6 on sigmas in [0, 1].
  void flowMatchSigmasMatchThePinnedDiffusers() {
    QFile f(zs::test::peerFixture("flow_match_scheduler.json"));
    QVERIFY2(f.open(QIODevice::ReadOnly), qPrintable(f.fileName()));
    const auto doc = nlohmann::json::parse(f.readAll().toStdString());
    QCOMPARE(doc.at("cases").size(), std::size_t{5});
    std::size_t schedules = 0;
    for (const auto& c : doc.at("cases")) {
      const std::string name = c.at("name").get<std::string>();
      const FlowScheduleConfig cfg = FlowScheduleConfig::from_json(c.at("config"), name);
      for (const auto& s : c.at("schedules")) {
        const auto seq = s.at("image_seq_len").get<std::int64_t>(), steps = s.at("steps").get<std::int64_t>();
        const std::string what = name + ", " + std::to_string(seq) + " tokens, " + std::to_string(steps) + " steps";
        QVERIFY2(std::abs(calculate_shift(cfg, seq) - s.at("mu").get<double>()) <= 1e-12, what.c_str());
        const FlowMatchEulerSampler sampler(cfg, steps, seq);
        const auto want = s.at("sigmas").get<std::vector<double>>();
        const auto ts = s.at("timesteps").get<std::vector<double>>();
        QCOMPARE(sampler.sigmas().size(), want.size());
        QCOMPARE(sampler.steps(), ts.size());
        for (std::size_t i = 0; i < want.size(); ++i)
          QVERIFY2(std::abs(sampler.sigmas()[i] - want[i]) <= 1e-6, (what + ", sigma " + std::to_string(i)).c_str());
        // The denoiser takes σ; diffusers' timesteps are σ·1000 (the pipelines divide by 1000).
        for (std::size_t i = 0; i < ts.size(); ++i)
          QVERIFY2(std::abs(sampler.timestep(i, 1, at::kCPU).item<double>() * 1000 - ts[i]) <= 1e-3, what.c_str());
        ++schedules;
      }
    }
    QCOMPARE(schedules, std::size_t{5 * 5 * 3 - 5});  // Qwen-Image's 1-step schedules are refused
    const auto& tr = doc.at("trajectory");
    const auto shape = tr.at("shape").get<std::vector<std::int64_t>>();
    auto tensor = [&](const nlohmann::json& v) { return at::tensor(v.get<std::vector<float>>()).reshape(shape); };
    const FlowScheduleConfig dev = FlowScheduleConfig::from_json(doc.at("cases")[0].at("config"), "flux-dev");
    const FlowMatchEulerSampler sampler(dev, tr.at("steps").get<std::int64_t>(), tr.at("image_seq_len").get<std::int64_t>());
    at::Tensor x = tensor(tr.at("sample"));
    for (std::size_t i = 0; i < sampler.steps(); ++i) x = sampler.step(i, tensor(tr.at("model_outputs")[i]), x);
    QVERIFY(max_abs_diff_f32(x, tensor(tr.at("final"))) <= 1e-5);
    // FLUX.2's pipelines: compute_empirical_mu (the tokens and the step count) with Flux.1 [dev]'s
    // scheduler configuration, at five sizes (one above 4300 tokens) and 1, 4, 28, 50 steps.
    FlowScheduleConfig flux2 = dev;
    flux2.empirical_mu = true;
    std::size_t flux2_schedules = 0;
    for (const auto& s : doc.at("flux2").at("schedules")) {
      const auto seq = s.at("image_seq_len").get<std::int64_t>(), steps = s.at("steps").get<std::int64_t>();
      const std::string what = "FLUX.2, " + std::to_string(seq) + " tokens, " + std::to_string(steps) + " steps";
      QVERIFY2(std::abs(flux2_empirical_mu(seq, steps) - s.at("mu").get<double>()) <= 1e-12, what.c_str());
      const FlowMatchEulerSampler flux2_sampler(flux2, steps, seq);
      const auto want = s.at("sigmas").get<std::vector<double>>();
      QCOMPARE(flux2_sampler.sigmas().size(), want.size());
      for (std::size_t i = 0; i < want.size(); ++i)
        QVERIFY2(std::abs(flux2_sampler.sigmas()[i] - want[i]) <= 1e-6, (what + ", sigma " + std::to_string(i)).c_str());
      ++flux2_schedules;
    }
    QCOMPARE(flux2_schedules, std::size_t{20});
  }

  void flowMatchingObjective() {
    FlowScheduleConfig dev;
    dev.use_dynamic_shifting = true;
    const at::Tensor x0 = at::randn({3, 16, 8, 8}, at::kDouble), noise = at::randn({3, 16, 8, 8}, at::kDouble);
    const at::Tensor sigma = at::tensor({0.0, 0.25, 1.0}, at::kDouble);
    const FlowMatching fm(dev, TimestepSampling{"uniform"}, 2);
    // x_σ = (1 − σ)·x0 + σ·ε; the target is ε − x0 (diffusers' examples/dreambooth/train_dreambooth_flux.py).
    const at::Tensor noisy = fm.add_noise(x0, noise, sigma);
    QVERIFY(at::allclose(noisy[0], x0[0]) && at::allclose(noisy[2], noise[2]));
    QVERIFY(at::allclose(noisy[1], 0.75 * x0[1] + 0.25 * noise[1]));
    const at::Tensor per = fm.loss(noise - x0, x0, noise, sigma);
    QCOMPARE(per.scalar_type(), at::kFloat);
    QVERIFY(per.abs().max().item<double>() <= 1e-6);
    QVERIFY(at::allclose(fm.loss(at::zeros_like(x0), x0, noise, sigma).to(at::kDouble),
                         (noise - x0).pow(2).flatten(1).mean(1), 1e-5, 1e-6));
    QVERIFY(at::equal(fm.weights(sigma, 5.0), at::ones({3})));
    // Validation: the middles of equal slices of [0, 1], shifted as training shifts.
    QCOMPARE(fm.validation_timestep(1, 4, x0.sizes(), at::kCPU)[0].item<double>(), 0.375);
    const FlowMatching shifted(dev, TimestepSampling{"shift"}, 2);
    const std::int64_t tokens = shifted.tokens(x0.sizes());  // (8/2)·(8/2)
    QCOMPARE(tokens, std::int64_t{16});
    const double mu = calculate_shift(dev, tokens);
    QVERIFY(std::abs(shifted.validation_timestep(1, 4, x0.sizes(), at::kCPU)[0].item<double>() -
                     shift_sigma(dev, 0.375, mu)) <= 1e-7);
    // shift: sigmoid(N(0, 1)) shifted for the sample's size, from the trainer's generator.
    at::Generator a = at::detail::createCPUGenerator(7), b = at::detail::createCPUGenerator(7);
    const at::Tensor drawn = shifted.sample_timesteps({64, 16, 128, 128}, a);
    const at::Tensor base = at::sigmoid(at::randn({64}, b));
    const double mu_big = calculate_shift(dev, 64 * 64);
    for (std::int64_t i = 0; i < 64; ++i)
      QVERIFY(std::abs(drawn[i].item<double>() - shift_sigma(dev, base[i].item<double>(), mu_big)) <= 1e-6);
    QVERIFY(drawn.mean().item<double>() > base.mean().item<double>());  // larger images: noisier steps
    QVERIFY(drawn.min().item<double>() > 0 && drawn.max().item<double>() < 1);
  }

  void flowMatchRefusals() {
    for (const char* key : {"use_karras_sigmas", "invert_sigmas", "stochastic_sampling"}) {
      try {
        FlowScheduleConfig::from_json(nlohmann::json{{key, true}}, "scheduler/scheduler_config.json");
        QFAIL(key);
      } catch (const zs::Error& e) {
        QVERIFY2(QString(e.what()).contains(QString("scheduler/scheduler_config.json: '") + key + "'"), e.what());
      }
    }
    FlowScheduleConfig qwen;
    qwen.use_dynamic_shifting = true;
    qwen.shift_terminal = 0.02;
    QVERIFY_THROWS_EXCEPTION(zs::Error, sampling_sigmas(qwen, 1, 1024));
    try {
      FlowMatching(qwen, TimestepSampling{"cosine"}, 2);
      QFAIL("accepted cosine");
    } catch (const zs::Error& e) {
      QVERIFY2(QString(e.what()).contains("training.timestep_sampling"), e.what());
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
