// bench_base_quant: the dequantize paths of the frozen-base formats (engine/quant/base_quant.h,
// issue 53) against the floor a bf16 base sets — its bytes read and widened to float32 (what a
// bf16 base costs before its matmul) — in the same run, one thread and all cores.
//
//   bench_base_quant [--mparams 64] [--threads 1,0] [--steps 5]
//
// --mparams: millions of weights (a [4096, N] weight); --threads: thread counts (0: all cores).
// Per row: the median of --steps timed runs after one untimed, the stored bytes read per second,
// weights per second, and the time against the bf16 row (below 1: faster than widening bf16).
// The "quantize" rows time the other way (float32 weights to codes, what loading costs; stored
// GB/s: codes and scales written).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include "quant/base_quant.h"

namespace {

double median_seconds(int steps, const std::function<void()>& run) {
  run();
  std::vector<double> t;
  for (int i = 0; i < steps; ++i) {
    const auto start = std::chrono::steady_clock::now();
    run();
    t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

std::vector<int> parse_list(const std::string& text) {
  std::vector<int> out;
  std::stringstream in(text);
  for (std::string part; std::getline(in, part, ',');) out.push_back(std::atoi(part.c_str()));
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  std::int64_t mparams = 64;
  std::string threads_text = "1,0";
  int steps = 5;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--mparams") mparams = std::atoll(v.c_str());
    else if (k == "--threads") threads_text = v;
    else if (k == "--steps") steps = std::max(1, std::atoi(v.c_str()));
    else {
      std::fprintf(stderr, "usage: bench_base_quant [--mparams 64] [--threads 1,0] [--steps 5]\n");
      return 2;
    }
  }
  const std::int64_t rows = 4096, cols = std::max<std::int64_t>(64, mparams * 1'000'000 / rows / 64 * 64);
  at::manual_seed(0);
  const at::Tensor weight = at::randn({rows, cols}) * 0.02;
  const at::Tensor bf16 = weight.to(at::kBFloat16);
  struct Format {
    const char* name;
    zs::quant::BaseFormat format;
  };
  const std::vector<Format> formats = {{"fp8 (E4M3, bf16 scales)", zs::quant::BaseFormat::fp8},
                                       {"int8 (bf16 scales)", zs::quant::BaseFormat::int8},
                                       {"nf4 (bitsandbytes)", zs::quant::BaseFormat::nf4}};
  std::vector<zs::quant::QuantizedWeight> stored;
  for (const auto& f : formats) stored.push_back(zs::quant::quantize(weight, f.format));
  const double n = static_cast<double>(rows * cols);
  std::printf("bench_base_quant: a [%lld, %lld] weight (%.1f M), median of %d, %u cores\n", static_cast<long long>(rows),
              static_cast<long long>(cols), n / 1e6, steps, std::max(1u, std::thread::hardware_concurrency()));
  std::printf("%-9s %-26s %10s %12s %12s %8s\n", "threads", "path", "ms", "stored GB/s", "G weights/s", "vs bf16");
  for (int t : parse_list(threads_text)) {
    const int used = t > 0 ? t : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    at::set_num_threads(used);
    const double floor = median_seconds(steps, [&] { (void)bf16.to(at::kFloat); });
    std::printf("%-9d %-26s %10.2f %12.2f %12.2f %8.2f\n", used, "bf16 -> f32 (floor)", floor * 1e3,
                n * 2 / floor / 1e9, n / floor / 1e9, 1.0);
    for (std::size_t i = 0; i < formats.size(); ++i) {
      const double s = median_seconds(steps, [&] { (void)zs::quant::dequantize(stored[i]); });
      std::printf("%-9d %-26s %10.2f %12.2f %12.2f %8.2f\n", used, formats[i].name, s * 1e3,
                  static_cast<double>(stored[i].bytes()) / s / 1e9, n / s / 1e9, s / floor);
    }
    // Quantizing (what loading a base costs, once per unit): float32 weights in, codes out.
    for (std::size_t i = 0; i < formats.size(); ++i) {
      const double s = median_seconds(steps, [&] { (void)zs::quant::quantize(weight, formats[i].format); });
      const std::string name = std::string("quantize ") + zs::quant::to_string(formats[i].format);
      std::printf("%-9d %-26s %10.2f %12.2f %12.2f %8.2f\n", used, name.c_str(), s * 1e3,
                  static_cast<double>(stored[i].bytes()) / s / 1e9, n / s / 1e9, s / floor);
    }
  }
  return 0;
}
