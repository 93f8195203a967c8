#include "core/parallel.h"

#include <ATen/Parallel.h>

#ifndef _OPENMP
#error "core/parallel.cpp must be compiled with OpenMP (engine/CMakeLists.txt gives it -fopenmp)"
#endif

namespace zs {

void parallel_for(std::int64_t begin, std::int64_t end, std::int64_t grain,
                  const std::function<void(std::int64_t, std::int64_t)>& f) {
  at::parallel_for(begin, end, grain, f);
}

}  // namespace zs
