// bench_offload_host: the host side of an offloaded optimizer step (ZeRO-Offload, issue 38), unit by
// unit as the device would drive it: each unit's gradients arrive as bf16 in a buffer (pinned where
// CUDA is present, as the device would send them), the CPU optimizer steps the unit's float32
// masters and moments, and the updated parameters leave as bf16 for the copy back. Measured in the
// same run against the floor: a loop over the same arrays that does the same reads and writes with
// no arithmetic worth the name (read g16, p, m, v; write p, m, v, out16 — 28 bytes a parameter).
//
//   bench_offload_host [--params 256] [--units 16] [--threads 1,0] [--steps 5] [--lean 1] [--zero 1]
//
// --params: millions of parameters in all; --threads: thread counts to run (0: all cores);
// --lean 0 skips AdamW8bit and Adafactor (ATen operations, slower). Rows per thread count:
//   floor                 the traffic alone
//   AdamW, bf16 into f32  what ZeroOptimizer's offload did before issue 38: the bf16 gradients added
//                         into a zeroed float32 copy, then the fused AdamW on the copy
//   AdamW, bf16 fused     the bf16 gradients read straight into the fused AdamW (cpu_adamw_bf16_grad)
//   AdamW8bit / Adafactor the lean optimizers' CPU steps on the same units (their own traffic);
//   "AdamW8bit, kernel alone" without the bf16 conversions around it (adamw8bit_update only),
//   and the same with the AVX2 paths off ("kernel, scalar")
// Each figure is the median of --steps timed steps after one untimed. --zero 1 then times whole
// ZeroOptimizer steps (a 54 M-parameter UNet, bf16, stage 2, optimizer in CPU memory, one rank)
// with the host pipeline against the float32 copy, two models in one process alternating A B B A.
// The last line is "all cores: R× the floor" for the fused AdamW (floor time / its time; the goal
// is ≥ 0.8).
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include "bench_models.h"
#include "timing.h"
#include "comm/communicator.h"
#include "core/build_info.h"
#include "core/parallel.h"
#include "models/sd/unet_2d_condition.h"
#include "zero/zero_optimizer.h"
#include "zero/adafactor.h"
#include "zero/blockwise_quant.h"
#include "zero/cpu_adam.h"

using namespace zs;

namespace {

/// The median of `reps` timed calls after one untimed (first touch, caches).
template <class F>
double median_ms(int reps, F&& f) {
  f();
  return bench::median_ms(reps, f);
}

struct Args {
  std::int64_t params = 256;  // millions
  int units = 16, steps = 5;
  std::string threads = "1,0";
  bool lean = true, zero = true;
};

/// The host's arrays for all units: float32 masters and moments, bf16 gradients in and bf16
/// parameters out (pinned where CUDA is present), and the float32 gradient copy the old path used.
struct Host {
  std::int64_t n = 0, unit = 0;
  at::Tensor p, m, v, g16, out16, g32;
  Host(std::int64_t total, int units) : n(total), unit((total + units - 1) / units) {
    const bool pin = build_info().cuda_available;
    const auto f32 = at::TensorOptions().dtype(at::kFloat);
    const auto b16 = at::TensorOptions().dtype(at::kBFloat16).pinned_memory(pin);
    at::manual_seed(0);
    p = at::randn({n}, f32);
    m = at::zeros({n}, f32);
    v = at::zeros({n}, f32);
    g16 = at::randn({n}, f32).to(at::kBFloat16);
    if (pin) g16 = g16.pin_memory();
    out16 = at::empty({n}, b16);
    g32 = at::empty({n}, f32);
  }
  /// Calls f(offset, count) for each unit in order, as their gradients would arrive.
  template <class F>
  void each_unit(F&& f) const {
    for (std::int64_t off = 0; off < n; off += unit) f(off, std::min(unit, n - off));
  }
};

/// The same traffic as the fused step, without its arithmetic: p ← m, m ← v, v ← p + g, out ← g.
double floor_ms(Host& h, int steps) {
  float *p = h.p.data_ptr<float>(), *m = h.m.data_ptr<float>(), *v = h.v.data_ptr<float>();
  const auto* g = reinterpret_cast<const std::uint16_t*>(h.g16.data_ptr());
  auto* out = reinterpret_cast<std::uint16_t*>(h.out16.data_ptr());
  return median_ms(steps, [&] {
    h.each_unit([&](std::int64_t off, std::int64_t cnt) {
      zs::parallel_for(off, off + cnt, std::int64_t{1} << 16, [&](std::int64_t lo, std::int64_t hi) {
        for (std::int64_t i = lo; i < hi; ++i) {
          const float pi = p[i], mi = m[i], vi = v[i];
          std::uint32_t bits = static_cast<std::uint32_t>(g[i]) << 16;
          float gi;
          std::memcpy(&gi, &bits, sizeof gi);
          p[i] = mi;
          m[i] = vi;
          v[i] = pi + gi;
          out[i] = g[i];
        }
      });
    });
  });
}

double adamw_ms(Host& h, int steps, bool fused) {
  std::int64_t step = 0;
  return median_ms(steps, [&] {
    zero::AdamHyper hyper{1e-4, 0.9, 0.999, 1e-8, 0.01, ++step, 0.5};  // 0.5: the mean over 2 ranks
    h.each_unit([&](std::int64_t off, std::int64_t cnt) {
      const at::Tensor p = h.p.narrow(0, off, cnt), m = h.m.narrow(0, off, cnt), v = h.v.narrow(0, off, cnt);
      const at::Tensor g16 = h.g16.narrow(0, off, cnt), out = h.out16.narrow(0, off, cnt);
      if (fused) {
        zero::cpu_adamw(p, g16, m, v, hyper, out);
      } else {
        // Before: the arriving bf16 gradients were added into a zeroed float32 copy (scaled by 1/N
        // there), which the fused AdamW then read.
        at::Tensor g32 = h.g32.narrow(0, off, cnt);
        g32.zero_();
        g32.add_(g16, hyper.grad_scale);
        zero::AdamHyper plain = hyper;
        plain.grad_scale = 1.0;
        zero::cpu_adamw(p, g32, m, v, plain, out);
      }
    });
  });
}

double adamw8bit_ms(Host& h, int steps, bool kernel_only = false) {
  const at::Tensor smap = zero::dynamic_map(true), umap = zero::dynamic_map(false);
  const std::int64_t blocks = (h.n + zero::kQuantBlock - 1) / zero::kQuantBlock;
  at::Tensor mc = at::zeros({h.n}, at::kByte), vc = at::zeros({h.n}, at::kByte);
  at::Tensor ma = at::zeros({blocks}), va = at::zeros({blocks});
  // Codes of zero: the maps' nearest value to 0 (the moments start at zero).
  zero::quantize_into(at::zeros({h.n}), smap, mc, ma);
  zero::quantize_into(at::zeros({h.n}), umap, vc, va);
  // kernel_only: float32 gradients made before the clock starts and no bf16 copy of the weights
  // after it — adamw8bit_update alone.
  const at::Tensor g32 = kernel_only ? h.g16.to(at::kFloat) : at::Tensor();
  std::int64_t step = 0;
  return median_ms(steps, [&] {
    zero::AdamHyper hyper{1e-4, 0.9, 0.999, 1e-8, 0.01, ++step};
    h.each_unit([&](std::int64_t off, std::int64_t cnt) {
      // Units start on block boundaries (as ZeroOptimizer cuts 8-bit shards).
      const std::int64_t b0 = off / zero::kQuantBlock, nb = (cnt + zero::kQuantBlock - 1) / zero::kQuantBlock;
      zero::adamw8bit_update(h.p.narrow(0, off, cnt),
                             kernel_only ? g32.narrow(0, off, cnt) : h.g16.narrow(0, off, cnt).to(at::kFloat),
                             mc.narrow(0, off, cnt), ma.narrow(0, b0, nb), vc.narrow(0, off, cnt),
                             va.narrow(0, b0, nb), smap, umap, hyper);
      if (!kernel_only) h.out16.narrow(0, off, cnt).copy_(h.p.narrow(0, off, cnt));
    });
  });
}

double adafactor_ms(Host& h, int steps) {
  // Each unit as square-ish matrices of 3072 columns (a transformer block's linears), factored.
  zero::AdafactorOptions o;
  std::vector<zero::AdafactorUnit> units;
  std::vector<std::pair<std::int64_t, std::int64_t>> spans;
  h.each_unit([&](std::int64_t off, std::int64_t cnt) {
    const std::int64_t cols = 3072, rows = cnt / cols, rest = cnt - rows * cols;
    std::vector<std::int64_t> offsets{0};
    std::vector<std::vector<std::int64_t>> shapes{{rows, cols}};
    if (rest > 0) {
      offsets.push_back(rows * cols);
      shapes.push_back({rest});
    }
    units.emplace_back(offsets, shapes, 0, cnt, o, at::TensorOptions().dtype(at::kFloat));
    spans.emplace_back(off, cnt);
  });
  std::int64_t step = 0;
  const zero::AdafactorUnit::Reduce none = [](at::Tensor&) {};
  return median_ms(steps, [&] {
    ++step;
    for (std::size_t k = 0; k < units.size(); ++k) {
      const auto [off, cnt] = spans[k];
      units[k].step(h.p.narrow(0, off, cnt), h.g16.narrow(0, off, cnt), 1e-4, step, none);
      h.out16.narrow(0, off, cnt).copy_(h.p.narrow(0, off, cnt));
    }
  });
}

/// Whole ZeroOptimizer steps (forward, backward, reduction, step) of a 54 M-parameter UNet in bf16
/// at stage 2 with the optimizer in CPU memory: the host pipeline's time over the float32 copy's,
/// two models in this process stepped in alternating blocks (A B B A) so the machine's drift hits
/// both alike. Prints the medians and their ratio.
void zero_steps(int steps) {
  const models::UNetConfig c = bench::config_of(bench::spec_named("large"));  // bench_zero_step's
  auto comm = comm::Communicator::single();
  at::manual_seed(1);
  const at::Tensor x = at::randn({2, 4, 16, 16}, at::kBFloat16), t = at::full({2}, 500, at::kLong);
  const at::Tensor ctx = at::randn({2, 16, 256}, at::kBFloat16);
  struct Side {
    models::UNet2DConditionModel unet{nullptr};
    std::unique_ptr<zero::ZeroOptimizer> opt;
    std::vector<double> ms;
  };
  Side sides[2];
  for (int k = 0; k < 2; ++k) {
    at::manual_seed(7);
    sides[k].unet = models::UNet2DConditionModel(c);
    zero::ZeroOptions o;
    o.stage = 2;
    o.compute_dtype = at::kBFloat16;
    o.offload_optimizer = zero::ZeroOptions::Offload::cpu;
    o.host_bf16_grads = k == 1;
    sides[k].opt = std::make_unique<zero::ZeroOptimizer>(sides[k].unet->units(), *comm, o);
    sides[k].unet->set_unit_hooks(sides[k].opt->unit_hooks());
  }
  auto step = [&](Side& s) {
    const auto t0 = std::chrono::steady_clock::now();
    s.opt->zero_grad();
    s.unet->forward(x, t, ctx).to(at::kFloat).pow(2).mean().backward();
    s.opt->reduce_gradients();
    s.opt->clip_grad_norm(1.0);
    s.opt->step(1e-4);
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  };
  step(sides[0]);
  step(sides[1]);
  for (int r = 0; r < steps; ++r)
    for (int k : {r % 2, 1 - r % 2}) sides[k].ms.push_back(step(sides[k]));
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  const double copy = median(sides[0].ms), held = median(sides[1].ms);
  std::printf("ZeroOptimizer, %lld parameters, bf16, stage 2 + CPU optimizer, %d steps each: float32 copy %.1f ms, "
              "host pipeline %.1f ms: %.2fx the copy's time\n",
              static_cast<long long>(sides[0].opt->numel()), steps, copy, held, held / copy);
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  Args a;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], val = argv[i + 1];
    if (k == "--params") a.params = std::stoll(val);
    else if (k == "--units") a.units = std::stoi(val);
    else if (k == "--threads") a.threads = val;
    else if (k == "--steps") a.steps = std::stoi(val);
    else if (k == "--lean") a.lean = val == "1";
    else if (k == "--zero") a.zero = val == "1";
    else {
      std::fprintf(stderr, "bench_offload_host: unknown option %s\n", k.c_str());
      return 2;
    }
  }
  const int cores = static_cast<int>(std::thread::hardware_concurrency());
  const std::int64_t n = a.params * 1'000'000;
  Host h(n, a.units);
  std::printf("%lld M parameters in %d units, %d cores, %s, gradients in %s buffers, SIMD %s\n",
              static_cast<long long>(a.params), a.units, cores, build_info().cuda_available ? "CUDA" : "no CUDA",
              build_info().cuda_available ? "pinned" : "pageable", zero::simd_name(zero::detected_simd()).c_str());
  std::printf("%-8s %-26s %10s %12s %10s %10s\n", "threads", "step", "ms", "G params/s", "GB/s ¹", "vs floor");
  const double bytes = 28.0 * static_cast<double>(n);
  double last_ratio = 0;
  std::stringstream list(a.threads);
  for (std::string t; std::getline(list, t, ',');) {
    const int threads = std::stoi(t) > 0 ? std::stoi(t) : cores;
    at::set_num_threads(threads);
    const double floor = floor_ms(h, a.steps);
    auto row = [&](const char* name, double ms) {
      std::printf("%-8d %-26s %10.1f %12.2f %10.1f %9.2fx\n", threads, name, ms, n / (ms * 1e6), bytes / (ms * 1e6),
                  floor / ms);
    };
    row("floor (traffic only)", floor);
    row("AdamW, bf16 into f32", adamw_ms(h, a.steps, false));
    const double fused = adamw_ms(h, a.steps, true);
    row("AdamW, bf16 fused", fused);
    if (a.lean) {
      row("AdamW8bit", adamw8bit_ms(h, a.steps));
      row("AdamW8bit, kernel alone", adamw8bit_ms(h, a.steps, true));
      zero::set_blockwise_simd(false);  // the scalar loops, for the ratio
      row("AdamW8bit, kernel, scalar", adamw8bit_ms(h, a.steps, true));
      zero::set_blockwise_simd(true);
      row("Adafactor", adafactor_ms(h, a.steps));
    }
    if (threads == cores) last_ratio = floor / fused;
  }
  if (a.zero) {
    at::set_num_threads(cores);
    zero_steps(std::max(a.steps * 2, 10));
  }
  std::printf("¹ 28 bytes a parameter for every row (the floor's traffic), so GB/s compares time, not each\n"
              "  optimizer's own traffic. vs floor: the floor's time over the row's (1 = at the floor).\n");
  if (last_ratio > 0) std::printf("all cores: %.2fx the floor\n", last_ratio);
  return 0;
}
