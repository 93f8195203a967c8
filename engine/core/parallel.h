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

}  // namespace zs
