// Helper process for tst_dist: joins the world described by torchrun's environment variables
// and runs one scenario. Prints "ok" and exits 0 on success; prints the error and exits 3 on a
// zs::Error (so the test can read the message), 1 on a wrong result.
#include <ATen/ATen.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <string>
#include <thread>

#include "core/error.h"
#include "dist/communicator.h"

using namespace zs;

namespace {

bool check(bool ok, const char* what) {
  if (!ok) std::fprintf(stderr, "wrong result: %s\n", what);
  return ok;
}

int collectives(dist::Communicator& c) {
  const int r = c.rank(), n = c.world_size();
  bool ok = true;
  at::Tensor t = at::full({5}, r + 1.0);
  c.all_reduce(t);
  ok &= check(at::allclose(t, at::full({5}, n * (n + 1) / 2.0)), "all_reduce");
  // all_gather: shard of 3 values [r, r, r] -> flat [0,0,0,1,1,1,...]
  at::Tensor flat = at::zeros({3 * n});
  c.all_gather(at::full({3}, static_cast<double>(r)), flat);
  ok &= check(at::equal(flat, at::arange(n, at::kFloat).repeat_interleave(3)), "all_gather");
  // reduce_scatter: each rank contributes arange(2n) * (r + 1); chunk r summed.
  at::Tensor shard = at::zeros({2});
  c.reduce_scatter(at::arange(2 * n, at::kFloat) * (r + 1), shard);
  ok &= check(at::allclose(shard, at::arange(2 * r, 2 * r + 2, at::kFloat) * (n * (n + 1) / 2.0)), "reduce_scatter");
  at::Tensor b = at::full({4}, static_cast<double>(r * 10));
  c.broadcast(b, n - 1);
  ok &= check(at::equal(b, at::full({4}, (n - 1) * 10.0)), "broadcast");
  c.barrier();
  return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string scenario = argc > 1 ? argv[1] : "collectives";
  const double timeout_s = argc > 2 ? std::stod(argv[2]) : 20;
  try {
    const auto info = dist::rendezvous_from_env();
    if (!info) {
      std::fprintf(stderr, "RANK/WORLD_SIZE not set\n");
      return 2;
    }
    auto comm = dist::Communicator::connect(*info, std::chrono::milliseconds(static_cast<long>(timeout_s * 1000)));
    int rc = 0;
    if (scenario == "collectives") {
      rc = collectives(*comm);
    } else if (scenario == "die" || scenario == "stall") {
      at::Tensor t = at::ones({1});
      comm->all_reduce(t);  // everyone is up
      if (comm->rank() == 1) {
        if (scenario == "die") std::raise(SIGKILL);
        std::this_thread::sleep_for(std::chrono::hours(1));
      }
      const auto t0 = std::chrono::steady_clock::now();
      try {
        comm->all_reduce(t);
      } catch (const Error& e) {
        const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        std::printf("%s\nwaited %.1f s\n", e.what(), waited);
        std::fflush(stdout);
        return 3;
      }
      std::printf("the collective did not fail\n");
      return 1;
    }
    if (rc == 0) std::printf("ok %s rank %d of %d (%s, native reduce_scatter %d)\n", scenario.c_str(), comm->rank(),
                             comm->world_size(), comm->backend().c_str(), comm->native_reduce_scatter());
    std::fflush(stdout);
    return rc;
  } catch (const Error& e) {
    std::printf("%s\n", e.what());
    std::fflush(stdout);
    return 3;
  }
}
