// The CUDA paths against their CPU twins: the UNet's forward and backward on the fixtures (fp32
// with TF32 off, bf16 and fp16 within their rounding), the fused attention against the plain
// path, and the caching allocator's figures. Every test skips without a usable CUDA device
// (and fails then under ZS_REQUIRE_CUDA=1, as on the GPU machine).
#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <cmath>
#include <map>
#include <string>

#include "core/memory.h"
#include "core/torch_compat.h"
#include "io/safetensors.h"
#include "models/attention.h"
#include "models/sd/unet_2d_condition.h"

// Qt's `slots` macro would break LibTorch's headers: Qt comes after them.
#include <QtTest>

#include "cuda_support.h"
#include "model_support.h"
#include "test_support.h"

using namespace zs::models;
using zs::test::fixture;

namespace {

/// ‖a − b‖ / ‖b‖, computed in float64 on the CPU.
double rel_l2(const at::Tensor& a, const at::Tensor& b) {
  const at::Tensor x = a.detach().cpu().to(at::kDouble), y = b.detach().cpu().to(at::kDouble);
  return (x - y).norm().item<double>() / std::max(y.norm().item<double>(), 1e-30);
}

/// max |a − b| / max |b|.
double rel_max(const at::Tensor& a, const at::Tensor& b) {
  const at::Tensor x = a.detach().cpu().to(at::kDouble), y = b.detach().cpu().to(at::kDouble);
  return (x - y).abs().max().item<double>() / std::max(y.abs().max().item<double>(), 1e-30);
}

/// The UNet's output and every gradient (parameters and both inputs) on the fixture's inputs,
/// with the model and inputs in `dtype` on `device`; everything returned as float32 on the CPU.
std::map<std::string, at::Tensor> unet_run(const at::Device& device, at::ScalarType dtype) {
  UNet2DConditionModel unet(zs::test::load_fixture_unet());
  unet->to(device, dtype);
  const zs::io::SafetensorsReader ref(fixture("sd15-tiny-reference/unet_grad.safetensors"));
  const at::Tensor sample = ref.tensor("sample").to(device, dtype).requires_grad_(true);
  const at::Tensor context = ref.tensor("encoder_hidden_states").to(device, dtype).requires_grad_(true);
  const at::Tensor out = unet->forward(sample, ref.tensor("timestep").to(device), context);
  (out.to(at::kFloat) - ref.tensor("target").to(device)).pow(2).mean().backward();
  std::map<std::string, at::Tensor> all;
  all["out"] = out.detach().to(at::kCPU, at::kFloat);
  for (const auto& p : unet->named_parameters()) all["grad." + p.key()] = p.value().grad().to(at::kCPU, at::kFloat);
  all["grad_input.sample"] = sample.grad().to(at::kCPU, at::kFloat);
  all["grad_input.encoder_hidden_states"] = context.grad().to(at::kCPU, at::kFloat);
  return all;
}

/// Turns TF32 off for the test's lifetime: float32 on the GPU must be float32.
struct NoTf32 {
  bool cudnn = at::globalContext().allowTF32CuDNN(), cublas = at::globalContext().allowTF32CuBLAS();
  NoTf32() {
    at::globalContext().setAllowTF32CuDNN(false);
    at::globalContext().setAllowTF32CuBLAS(false);
  }
  ~NoTf32() {
    at::globalContext().setAllowTF32CuDNN(cudnn);
    at::globalContext().setAllowTF32CuBLAS(cublas);
  }
};

}  // namespace

class TestCuda : public QObject {
  Q_OBJECT

 private slots:
  // fp32 on CUDA equals the CPU: output and every gradient within 1e-4 of the largest value.
  void unetFp32OnCudaEqualsTheCpu() {
    ZS_REQUIRE_SHARED();
    ZS_REQUIRE_CUDA();
    NoTf32 exact;
    const auto cpu = unet_run(at::kCPU, at::kFloat), gpu = unet_run(at::Device(at::kCUDA, 0), at::kFloat);
    QCOMPARE(gpu.size(), cpu.size());
    double worst = 0;
    std::string worst_name;
    for (const auto& [name, t] : cpu) {
      const double e = rel_max(gpu.at(name), t);
      if (e > worst) {
        worst = e;
        worst_name = name;
      }
    }
    qInfo("fp32 CUDA vs CPU: worst max|Δ|/max|ref| %.3g (%s) over %zu tensors", worst, worst_name.c_str(), cpu.size());
    QVERIFY2(worst <= 1e-4, worst_name.c_str());
  }

  // bf16 and fp16 on CUDA follow the fp32 reference within their rounding: the relative L2 error
  // of the output and of all gradients together at most 8 units of rounding (bf16 2⁻⁸, fp16 2⁻¹¹).
  void unetHalfPrecisionOnCudaFollowsFp32_data() {
    QTest::addColumn<QString>("precision");
    QTest::newRow("bf16") << "bf16";
    QTest::newRow("fp16") << "fp16";
  }

  void unetHalfPrecisionOnCudaFollowsFp32() {
    ZS_REQUIRE_SHARED();
    ZS_REQUIRE_CUDA();
    QFETCH(QString, precision);
    NoTf32 exact;
    const bool bf16 = precision == "bf16";
    const double unit = bf16 ? std::ldexp(1.0, -8) : std::ldexp(1.0, -11);
    const auto ref = unet_run(at::kCPU, at::kFloat);
    const auto half = unet_run(at::Device(at::kCUDA, 0), bf16 ? at::kBFloat16 : at::kHalf);
    const double out_err = rel_l2(half.at("out"), ref.at("out"));
    std::vector<at::Tensor> gh, gr;
    for (const auto& [name, t] : ref)
      if (name != "out") {
        gh.push_back(half.at(name).reshape({-1}));
        gr.push_back(t.reshape({-1}));
      }
    const double grad_err = rel_l2(at::cat(gh), at::cat(gr));
    qInfo("%s CUDA vs fp32: output %.3g, gradients %.3g (unit of rounding %.3g)", qPrintable(precision), out_err,
          grad_err, unit);
    QVERIFY2(out_err <= 8 * unit, qPrintable(QString::number(out_err)));
    QVERIFY2(grad_err <= 8 * unit, qPrintable(QString::number(grad_err)));
  }

  // The fused attention (LibTorch 2.x on CUDA) against the plain path in float64 on the CPU:
  // self- and cross-attention, CLIP's causal mask, token counts off any block size, 1 to 20
  // heads; output and the gradients of q, k and v.
  void fusedAttentionEqualsThePlainPath_data() {
    QTest::addColumn<int>("nq");
    QTest::addColumn<int>("nk");
    QTest::addColumn<int>("heads");
    QTest::addColumn<bool>("causal");
    QTest::newRow("self, 1 head") << 64 << 64 << 1 << false;
    QTest::newRow("self, 8 heads, 77 tokens") << 77 << 77 << 8 << false;
    QTest::newRow("cross, 20 heads, 333 x 77") << 333 << 77 << 20 << false;
    QTest::newRow("causal, 12 heads, 77 tokens") << 77 << 77 << 12 << true;
    QTest::newRow("self, 5 heads, 1000 tokens") << 1000 << 1000 << 5 << false;
  }

  void fusedAttentionEqualsThePlainPath() {
    ZS_REQUIRE_CUDA();
    QFETCH(int, nq);
    QFETCH(int, nk);
    QFETCH(int, heads);
    QFETCH(bool, causal);
    NoTf32 exact;
    const std::int64_t d = 40, b = 2;
    at::manual_seed(nq * 31 + heads);
    const at::Tensor q = at::randn({b, nq, heads * d}, at::kDouble), k = at::randn({b, nk, heads * d}, at::kDouble);
    const at::Tensor v = at::randn({b, nk, heads * d}, at::kDouble), dout = at::randn({b, nq, heads * d}, at::kDouble);
    auto run = [&](const at::Device& device, at::ScalarType dtype, std::vector<at::Tensor>& grads) {
      std::vector<at::Tensor> in;
      for (const auto& t : {q, k, v}) in.push_back(t.to(device, dtype).detach().requires_grad_(true));  // fresh leaves
      const at::Tensor mask = causal ? causal_mask(nq, dtype, device) : at::Tensor();
      const at::Tensor out = multi_head_attention(in[0], in[1], in[2], heads, mask);
      out.backward(dout.to(device, dtype));
      grads = {in[0].grad(), in[1].grad(), in[2].grad()};
      return out.detach();
    };
    std::vector<at::Tensor> g_ref, g32, g16;
    const at::Tensor ref = run(at::kCPU, at::kDouble, g_ref);
    const at::Tensor o32 = run(at::Device(at::kCUDA, 0), at::kFloat, g32);
    double worst = rel_max(o32, ref);
    for (int i = 0; i < 3; ++i) worst = std::max(worst, rel_max(g32[i], g_ref[i]));
    const at::Tensor o16 = run(at::Device(at::kCUDA, 0), at::kBFloat16, g16);
    const double bf16_out = (o16.cpu().to(at::kDouble) - ref).abs().max().item<double>();
    qInfo("fp32: worst relative error %.3g; bf16 output max|Δ| %.3g of max|ref| %.3g", worst, bf16_out,
          ref.abs().max().item<double>());
    QVERIFY2(worst <= 1e-5, qPrintable(QString::number(worst)));
    QVERIFY2(bf16_out <= std::ldexp(1.0, -7) * ref.abs().max().item<double>(), qPrintable(QString::number(bf16_out)));
  }

  // After the first fused attention on CUDA, PyTorch's SDPA may no longer pick cuDNN's kernels
  // (core/torch_compat.h, avoid_cudnn_attention: their backward failed with an illegal memory
  // access at Flux.1's joint attention on an H200 with PyTorch 2.11, in ZeroStudio and in the
  // diffusers baseline alike), unless ZEROSTUDIO_CUDNN_ATTENTION=1 asks for PyTorch's own choice.
  void fusedAttentionStaysOffCudnn() {
    ZS_REQUIRE_CUDA();
    if (qgetenv("ZEROSTUDIO_CUDNN_ATTENTION") == "1") QSKIP("ZEROSTUDIO_CUDNN_ATTENTION=1 leaves cuDNN's attention on");
    const auto opts = at::TensorOptions().dtype(at::kBFloat16).device(at::kCUDA, 0);
    const at::Tensor q = at::randn({1, 256, 4 * 64}, opts).requires_grad_(true);
    multi_head_attention(q, q, q, 4, at::Tensor()).sum().backward();
    QVERIFY(!zs::compat::cudnn_attention_allowed());
  }

  // The caching allocator's figures reach the metrics: allocated, reserved and the peak, and a
  // new peak after reset_gpu_peak.
  void allocatorFiguresFollowAllocations() {
    ZS_REQUIRE_CUDA();
    const std::int64_t mib = 1 << 20;
    zs::reset_gpu_peak(0);
    const auto before = zs::gpu_memory(0);
    {
      const at::Tensor big = at::empty({64 * mib}, at::TensorOptions().dtype(at::kByte).device(at::kCUDA, 0));
      const auto during = zs::gpu_memory(0);
      QVERIFY(during.allocated >= before.allocated + 64 * mib);
      QVERIFY(during.reserved >= during.allocated);
      QVERIFY(during.peak >= during.allocated);
    }
    const auto after = zs::gpu_memory(0);
    QVERIFY(after.allocated < before.allocated + 64 * mib);
    QVERIFY(after.peak >= before.allocated + 64 * mib);
    zs::reset_gpu_peak(0);
    QVERIFY(zs::gpu_memory(0).peak < before.allocated + 64 * mib);
    QVERIFY(zs::gpu_total_bytes(0) > 1024 * mib);
  }
};

ZS_TEST_MAIN(TestCuda);
#include "tst_cuda.moc"
