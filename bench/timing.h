#pragma once
// Timing for the benchmarks: the median of repeated runs.

#include <algorithm>
#include <chrono>
#include <vector>

namespace zs::bench {

/// Milliseconds of the median of `reps` calls of f.
template <class F>
double median_ms(int reps, F&& f) {
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    t.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

}  // namespace zs::bench
