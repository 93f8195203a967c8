#pragma once
// Loops split over LibTorch's intra-op threads, for the engine's own CPU kernels.

#include <cstdint>
#include <functional>

namespace zs {

/// at::parallel_for that really runs on LibTorch's intra-op threads (at::set_num_threads). Both
/// LibTorch builds we use (Debian's 1.13, PyPI's 2.x) are OpenMP builds, and there
/// at::parallel_for is a template in the header that goes parallel only in a file compiled with
/// -fopenmp: in every other file of this project it ran on one thread (found in issue 38: the
/// fused CPU AdamW and the 8-bit quantizer did not speed up with threads). parallel.cpp is compiled
/// with OpenMP; f(lo, hi) is called for chunks of at least `grain` elements of [begin, end).
void parallel_for(std::int64_t begin, std::int64_t end, std::int64_t grain,
                  const std::function<void(std::int64_t, std::int64_t)>& f);

/// Σ over [0, n) of f(lo, hi) (each a partial sum of its range, in double), in fixed blocks of
/// `block` elements added in order: the same result for any number of threads.
double blocked_sum(std::int64_t n, std::int64_t block, const std::function<double(std::int64_t, std::int64_t)>& f);

/// Σ term(k) over [0, n) in double, in eight lanes (k mod 8) added in a fixed order at the end:
/// the additions of one lane wait on each other, eight lanes do not (and vectorize).
template <typename F>
double lanes_sum(std::int64_t n, const F& term) {
  double l[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  std::int64_t k = 0;
  for (; k + 8 <= n; k += 8)
    for (int j = 0; j < 8; ++j) l[j] += term(k + j);
  for (; k < n; ++k) l[0] += term(k);
  return ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]));
}

/// Σ x[k]² over [0, n) in double (x: float, double or bf16), in blocked_sum's fixed blocks and
/// lanes_sum's lanes: the same sum for any thread count, and for bf16 values and their float copy.
template <typename T>
double sum_of_squares(const T* x, std::int64_t n) {
  return blocked_sum(n, 1 << 15, [x](std::int64_t lo, std::int64_t hi) {
    return lanes_sum(hi - lo, [p = x + lo](std::int64_t k) { return static_cast<double>(p[k]) * static_cast<double>(p[k]); });
  });
}

}  // namespace zs
