// engine/zero in one process: the fused CPU AdamW against the reference arithmetic and
// LibTorch's own AdamW, and the offload stores.
#include <ATen/ATen.h>
#include <torch/optim/adamw.h>

#include "core/error.h"
#include "train/optimizer.h"
#include "zero/cpu_adam.h"

#include <QtTest>

#include "test_support.h"

using namespace zs;

namespace {

// |a - b| <= tol * (|b| + scale) element-wise: relative, with `scale` guarding values near zero
// (for parameters one update, lr; for moments one step's contribution, (1-β)·g).
double worst_relative(const at::Tensor& a, const at::Tensor& b, double scale) {
  return ((a.to(at::kDouble) - b.to(at::kDouble)).abs() / (b.to(at::kDouble).abs() + scale)).max().item<double>();
}

std::vector<zero::SimdLevel> levels() {
  std::vector<zero::SimdLevel> out = {zero::SimdLevel::scalar};
  if (zero::detected_simd() >= zero::SimdLevel::avx2) out.push_back(zero::SimdLevel::avx2);
  if (zero::detected_simd() >= zero::SimdLevel::avx512) out.push_back(zero::SimdLevel::avx512);
  return out;
}

}  // namespace

class TestZero : public QObject {
  Q_OBJECT

 private slots:
  void cpuAdamMatchesReferenceOnEveryPath() {
    // An odd length exercises the vector loops' scalar tails and the thread chunking.
    const std::int64_t n = (1 << 17) + 37;
    const double lr = 1e-3, wd = 0.01;
    qInfo("this CPU: %s", zero::simd_name(zero::detected_simd()).c_str());
    for (auto level : levels()) {
      at::manual_seed(3);
      const at::Tensor p0 = at::randn({n});
      // Reference: train::AdamW (the arithmetic every ZeRO path is tested against).
      at::Tensor ref = p0.clone();
      train::AdamW reference({{"p", ref}}, 0.9, 0.999, 1e-8, wd);
      at::Tensor p = p0.clone(), m = at::zeros({n}), v = at::zeros({n});
      for (int step = 1; step <= 4; ++step) {
        at::Tensor g = at::randn({n}) * (step == 2 ? 1e-6 : 1.0);  // tiny gradients too
        ref.mutable_grad() = g.clone();
        reference.step(lr);
        zero::cpu_adamw(p, g, m, v, {lr, 0.9, 0.999, 1e-8, wd, step}, at::Tensor(), level);
      }
      const auto st = reference.state();
      const double dp = worst_relative(p, ref, lr), dm = worst_relative(m, st[0].second, 0.1),
                   dv = worst_relative(v, st[1].second, 1e-3);
      qInfo("%s: worst relative difference: parameters %.2e, exp_avg %.2e, exp_avg_sq %.2e",
            zero::simd_name(level).c_str(), dp, dm, dv);
      QVERIFY2(dp <= 1e-6, zero::simd_name(level).c_str());
      QVERIFY2(dm <= 1e-6, zero::simd_name(level).c_str());
      QVERIFY2(dv <= 1e-6, zero::simd_name(level).c_str());
    }
  }

  void cpuAdamMatchesLibTorchAdamW() {
    const std::int64_t n = 50'001;
    at::manual_seed(5);
    const at::Tensor p0 = at::randn({n});
    at::Tensor tp = p0.clone().set_requires_grad(true);
    torch::optim::AdamW torch_opt({tp}, torch::optim::AdamWOptions(2e-3).betas({0.8, 0.99}).eps(1e-7).weight_decay(0.1));
    at::Tensor p = p0.clone(), m = at::zeros({n}), v = at::zeros({n});
    for (int step = 1; step <= 5; ++step) {
      const at::Tensor g = at::randn({n});
      tp.mutable_grad() = g.clone();
      torch_opt.step();
      zero::cpu_adamw(p, g, m, v, {2e-3, 0.8, 0.99, 1e-7, 0.1, step});
    }
    const double d = worst_relative(p, tp.detach(), 2e-3);
    qInfo("against torch::optim::AdamW after 5 steps: %.2e", d);
    QVERIFY(d <= 1e-6);
  }

  void cpuAdamHalfOutputIsTheRoundedParameter() {
    const std::int64_t n = 10'007;
    for (auto level : levels()) {
      for (auto dtype : {at::kBFloat16, at::kHalf}) {
        at::manual_seed(7);
        at::Tensor p = at::randn({n}) * 10, m = at::zeros({n}), v = at::zeros({n});
        at::Tensor out = at::empty({n}, at::TensorOptions().dtype(dtype));
        zero::cpu_adamw(p, at::randn({n}), m, v, {1e-2, 0.9, 0.999, 1e-8, 0.0, 1}, out, level);
        // Bit-equal to LibTorch's round-to-nearest-even conversion of the fp32 result.
        QVERIFY2(at::equal(out, p.to(dtype)), (zero::simd_name(level) + " " + c10::toString(dtype)).c_str());
      }
    }
  }

  void cpuAdamRejectsBadTensors() {
    at::Tensor p = at::zeros({8}), g = at::zeros({8}), m = at::zeros({8}), v = at::zeros({8});
    try {
      zero::cpu_adamw(p, at::zeros({8}, at::kDouble), m, v, {});
      QFAIL("a float64 gradient was accepted");
    } catch (const Error& e) {
      QVERIFY(std::string(e.what()).find("grad must be a contiguous float32 CPU tensor") != std::string::npos);
    }
    try {
      zero::cpu_adamw(p, g, m, at::zeros({7}), {});
      QFAIL("a short exp_avg_sq was accepted");
    } catch (const Error& e) {
      QVERIFY(std::string(e.what()).find("exp_avg_sq") != std::string::npos);
    }
  }
};

QTEST_GUILESS_MAIN(TestZero)
#include "tst_zero.moc"
