#include "core/parallel.h"

#include <algorithm>
#include <vector>

#include <ATen/Parallel.h>

#ifndef _OPENMP
#error "core/parallel.cpp must be compiled with OpenMP (engine/CMakeLists.txt gives it -fopenmp)"
#endif

namespace zs {

void parallel_for(std::int64_t begin, std::int64_t end, std::int64_t grain,
                  const std::function<void(std::int64_t, std::int64_t)>& f) {
  at::parallel_for(begin, end, grain, f);
}

double blocked_sum(std::int64_t n, std::int64_t block, const std::function<double(std::int64_t, std::int64_t)>& f) {
  if (n <= 0) return 0;
  const std::int64_t blocks = (n + block - 1) / block;
  std::vector<double> part(static_cast<std::size_t>(blocks));
  at::parallel_for(0, blocks, 1, [&](std::int64_t lo, std::int64_t hi) {
    for (std::int64_t b = lo; b < hi; ++b) part[static_cast<std::size_t>(b)] = f(b * block, std::min(n, (b + 1) * block));
  });
  double sum = 0;
  for (const double v : part) sum += v;
  return sum;
}

}  // namespace zs
