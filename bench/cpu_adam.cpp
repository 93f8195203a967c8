// bench_cpu_adam: the fused CPU AdamW (engine/zero/cpu_adam) on 64 M and 256 M float32
// parameters, against torch::optim::AdamW from C++ and torch.optim.AdamW(foreach=True) from
// Debian's python3-torch (bench/adamw_baseline.py), all measured in the same run, and against the
// machine's memory bandwidth (a STREAM-triad kernel, also measured here).
//
//   bench_cpu_adam [--sizes 64,256] [--threads 2] [--steps 5] [--python /usr/bin/python3]
//
// Every figure is the median of --steps timed steps after untimed warm-up steps.
//
// Bytes per parameter of one step: read p, g, m, v and write p, m, v = 28 (the STREAM
// convention: no write-allocate traffic counted, as for the triad's 24 bytes per element).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/optim/adamw.h>

#include "core/parallel.h"
#include "source_dir.h"
#include "timing.h"
#include "zero/cpu_adam.h"

using namespace zs;

namespace {

using bench::median_ms;

/// STREAM triad a = b + s·c over 64 Mi floats per array, split over the intra-op threads: GB/s.
double triad_gbs() {
  const std::int64_t n = std::int64_t{64} << 20;
  at::Tensor a = at::zeros({n}), b = at::ones({n}), c = at::full({n}, 2.0f);
  float* pa = a.data_ptr<float>();
  const float* pb = b.data_ptr<float>();
  const float* pc = c.data_ptr<float>();
  const float s = 3.0f;
  auto run = [&] {
    zs::parallel_for(0, n, 1 << 16, [&](std::int64_t lo, std::int64_t hi) {
      for (std::int64_t i = lo; i < hi; ++i) pa[i] = pb[i] + s * pc[i];
    });
  };
  run();
  const double ms = median_ms(5, run);
  return 24.0 * static_cast<double>(n) / (ms * 1e6);
}

/// The same traffic as one AdamW step with no arithmetic worth the name (read p, g, m, v; write
/// p, m, v): the fastest any AdamW can be on this machine. Milliseconds for n elements.
double adam_traffic_ms(std::int64_t n, int steps) {
  at::Tensor p = at::ones({n}), g = at::ones({n}), m = at::ones({n}), v = at::ones({n});
  float *pp = p.data_ptr<float>(), *pm = m.data_ptr<float>(), *pv = v.data_ptr<float>();
  const float* pg = g.data_ptr<float>();
  auto run = [&] {
    zs::parallel_for(0, n, 1 << 16, [&](std::int64_t lo, std::int64_t hi) {
      for (std::int64_t i = lo; i < hi; ++i) {
        pp[i] = (pp[i] + pg[i]) * 0.5f;
        pm[i] = pm[i] * 0.9f + pg[i];
        pv[i] = pv[i] * 0.99f + pg[i] * pg[i];
      }
    });
  };
  run();
  return median_ms(steps, run);
}

double fused_ms(std::int64_t n, int steps, zero::SimdLevel level) {
  at::Tensor p = at::randn({n}), g = at::randn({n}), m = at::zeros({n}), v = at::zeros({n});
  std::int64_t step = 0;
  zero::AdamHyper h{1e-3, 0.9, 0.999, 1e-8, 0.01, 0};
  auto run = [&] {
    h.step = ++step;
    zero::cpu_adamw(p, g, m, v, h, at::Tensor(), level);
  };
  run();
  return median_ms(steps, run);
}

double torch_cpp_ms(std::int64_t n, int steps) {
  const std::int64_t chunk = 1 << 20;
  std::vector<at::Tensor> params;
  for (std::int64_t off = 0; off < n; off += chunk) {
    at::Tensor p = at::randn({std::min(chunk, n - off)}).set_requires_grad(true);
    p.mutable_grad() = at::randn({p.numel()});
    params.push_back(p);
  }
  torch::optim::AdamW opt(params, torch::optim::AdamWOptions(1e-3).weight_decay(0.01));
  opt.step();
  opt.step();
  return median_ms(steps, [&] { opt.step(); });
}

double python_ms(const std::string& python, std::int64_t n, int steps, int threads) {
  std::ostringstream cmd;
  cmd << python << " " << zs_bench_source_dir() << "/bench/adamw_baseline.py --params " << n << " --steps " << steps
      << " --threads " << threads << " 2>/dev/null";
  std::string out;
  if (FILE* f = popen(cmd.str().c_str(), "r")) {
    char buf[512];
    while (fgets(buf, sizeof buf, f)) out += buf;
    pclose(f);
  }
  const auto at = out.find("step_ms ");
  return at == std::string::npos ? -1 : std::atof(out.c_str() + at + 8);
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::int64_t> sizes = {64, 256};
  int threads = 2, steps = 5;
  std::string python = "/usr/bin/python3";
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    if (k == "--sizes") {
      sizes.clear();
      std::stringstream ss(argv[i + 1]);
      for (std::string x; std::getline(ss, x, ',');) sizes.push_back(std::stoll(x));
    } else if (k == "--threads") {
      threads = std::atoi(argv[i + 1]);
    } else if (k == "--steps") {
      steps = std::atoi(argv[i + 1]);
    } else if (k == "--python") {
      python = argv[i + 1];
    } else {
      std::fprintf(stderr, "bench_cpu_adam: unknown flag %s\n", k.c_str());
      return 2;
    }
  }
  at::set_num_threads(threads);
  const auto best = zero::detected_simd();
  const double triad = triad_gbs();
  std::printf("threads %d, best SIMD path %s, STREAM triad %.1f GB/s\n", threads, zero::simd_name(best).c_str(), triad);
  for (const std::int64_t mi : sizes) {
    const std::int64_t n = mi * 1'000'000;
    std::printf("\n%lld M parameters (float32)\n", static_cast<long long>(mi));
    const double floor_ms = adam_traffic_ms(n, steps);
    std::printf("  same traffic, no AdamW math      %8.1f ms  %6.2f G params/s  %6.1f GB/s  (the floor for any AdamW)\n",
                floor_ms, static_cast<double>(n) / (floor_ms * 1e6), 28.0 * static_cast<double>(n) / (floor_ms * 1e6));
    double fused = 0;
    for (auto level : {zero::SimdLevel::scalar, zero::SimdLevel::avx2, zero::SimdLevel::avx512}) {
      if (level > best) continue;
      const double ms = fused_ms(n, steps, level);
      if (level == best) fused = ms;
      const double gps = 28.0 * static_cast<double>(n) / (ms * 1e6);
      std::printf("  zerostudio cpu_adamw %-7s %8.1f ms  %6.2f G params/s  %6.1f GB/s  %3.0f %% of triad\n",
                  zero::simd_name(level).c_str(), ms, static_cast<double>(n) / (ms * 1e6), gps, 100.0 * gps / triad);
    }
    const double cpp = torch_cpp_ms(n, steps);
    std::printf("  torch::optim::AdamW (C++)      %8.1f ms  %6.2f G params/s   -> fused is %.1fx faster\n", cpp,
                static_cast<double>(n) / (cpp * 1e6), cpp / fused);
    std::printf("  fused runs at %.0f %% of the traffic floor; an AdamW at the floor would be %.1fx torch::optim::AdamW\n",
                100.0 * floor_ms / fused, cpp / floor_ms);
    const double py = python_ms(python, n, steps, threads);
    if (py > 0)
      std::printf("  torch.optim.AdamW(foreach=True) %7.1f ms  %6.2f G params/s   -> fused is %.1fx faster\n", py,
                  static_cast<double>(n) / (py * 1e6), py / fused);
    else
      std::printf("  torch.optim.AdamW(foreach=True): %s did not run (install python3-torch)\n", python.c_str());
  }
  return 0;
}
