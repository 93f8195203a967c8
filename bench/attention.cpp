// bench_attention: forward + backward of one multi-head attention on the CPU, the blocked path
// (online softmax, recomputed in backward) against the plain one (softmax probabilities kept),
// alternated in the same process: time and peak CPU memory (CpuAllocationCounter), as ratios.
//
//   bench_attention [--tokens 256,1024,4096] [--keys 0] [--heads 10] [--head-dim 64] [--batch 1]
//                   [--reps 5] [--block-elements N] [--python /usr/bin/python3,.venv/bin/python]
//
// --keys 0: self-attention (keys = tokens); otherwise cross-attention over that many keys (77: a
// CLIP context). Shapes default to SDXL's 64×64-latent level (10 heads of 64). Every figure is
// the median of --reps timed runs after one untimed run of each path. Freed memory is kept for
// reuse (zs::keep_freed_memory), as in training; LibTorch's own thread count is used.
// A second table, measured in the same run, is the Python baseline (bench/attention_baseline.py)
// on the same shapes and thread count in each PyTorch given: Debian's python3-torch (1.13) and,
// where `make peers` made it, the pinned PyTorch 2.x of .venv with its fused
// scaled_dot_product_attention.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include "core/cpu_allocation_counter.h"
#include "core/memory.h"
#include "models/attention.h"
#include "python_baseline.h"
#include "source_dir.h"

using namespace zs::models;

namespace {

using Clock = std::chrono::steady_clock;

std::vector<std::int64_t> parse_list(const std::string& s) {
  std::vector<std::int64_t> out;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, ',');) out.push_back(std::stoll(item));
  return out;
}

struct Sample {
  double ms;
  std::int64_t peak;
};

Sample fwd_bwd(const at::Tensor& q0, const at::Tensor& k0, const at::Tensor& v0, const at::Tensor& g, std::int64_t heads,
               const AttentionOptions& o) {
  at::Tensor q = q0.clone().requires_grad_(true), k = k0.clone().requires_grad_(true), v = v0.clone().requires_grad_(true);
  zs::CpuAllocationCounter counter;
  const auto t0 = Clock::now();
  {
    const at::Tensor out = multi_head_attention(q, k, v, heads, {}, o);
    out.backward(g);
  }
  const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  return {ms, counter.peak()};
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::int64_t> tokens = {256, 1024, 4096};
  std::int64_t keys = 0, heads = 10, head_dim = 64, batch = 1, block_elements = AttentionOptions{}.block_elements;
  int reps = 5;
  std::vector<std::string> pythons = baseline_pythons();
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--tokens") tokens = parse_list(v);
    else if (k == "--keys") keys = std::stoll(v);
    else if (k == "--heads") heads = std::stoll(v);
    else if (k == "--head-dim") head_dim = std::stoll(v);
    else if (k == "--batch") batch = std::stoll(v);
    else if (k == "--reps") reps = std::max(1, std::stoi(v));
    else if (k == "--block-elements") block_elements = std::stoll(v);
    else if (k == "--python") pythons = split_list(v);
    else {
      std::fprintf(stderr, "bench_attention: unknown option %s\n", k.c_str());
      return 2;
    }
  }
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  zs::keep_freed_memory();  // as the trainer does: freed buffers are reused, not faulted in again
  std::printf("attention forward+backward on the CPU, batch %lld, %lld heads of %lld, %d threads\n",
              static_cast<long long>(batch), static_cast<long long>(heads), static_cast<long long>(head_dim),
              at::get_num_threads());
  std::printf("%8s %6s %11s %11s %8s %11s %11s %8s\n", "queries", "keys", "plain ms", "blocked ms", "time",
              "plain MB", "blocked MB", "memory");
  AttentionOptions plain, blocked;
  plain.mode = AttentionMode::plain;
  blocked.mode = AttentionMode::blocked;
  blocked.block_elements = block_elements;
  for (const std::int64_t n : tokens) {
    const std::int64_t nk = keys > 0 ? keys : n, inner = heads * head_dim;
    at::manual_seed(0);
    const at::Tensor q = at::randn({batch, n, inner}), k = at::randn({batch, nk, inner}), v = at::randn({batch, nk, inner});
    const at::Tensor g = at::randn({batch, n, inner});
    fwd_bwd(q, k, v, g, heads, plain);  // warm-up: first-touch pages, thread pools
    fwd_bwd(q, k, v, g, heads, blocked);
    std::vector<double> tp, tb;
    std::int64_t pp = 0, pb = 0;
    for (int r = 0; r < reps; ++r) {  // alternated, so drift on the machine hits both alike
      const Sample a = r % 2 == 0 ? fwd_bwd(q, k, v, g, heads, plain) : fwd_bwd(q, k, v, g, heads, blocked);
      const Sample b = r % 2 == 0 ? fwd_bwd(q, k, v, g, heads, blocked) : fwd_bwd(q, k, v, g, heads, plain);
      const Sample& sp = r % 2 == 0 ? a : b;
      const Sample& sb = r % 2 == 0 ? b : a;
      tp.push_back(sp.ms);
      tb.push_back(sb.ms);
      pp = std::max(pp, sp.peak);
      pb = std::max(pb, sb.peak);
    }
    const double mp = median(tp), mb = median(tb);
    std::printf("%8lld %6lld %11.1f %11.1f %7.2fx %11.1f %11.1f %7.3fx\n", static_cast<long long>(n),
                static_cast<long long>(nk), mp, mb, mb / mp, pp / 1e6, pb / 1e6, static_cast<double>(pb) / pp);
  }
  std::printf("time: blocked / plain (median of %d alternated runs); memory: peak bytes allocated during the\n"
              "call, blocked / plain (q, k, v and the upstream gradient are outside it).\n",
              reps);
  if (pythons.empty()) return 0;
  // The Python baselines, same shapes and threads, in the same run.
  std::printf("\nPython baseline (bench/attention_baseline.py), %d threads: plain = q kT, softmax kept; sdpa = "
              "F.scaled_dot_product_attention\n%8s %6s %-18s %11s %11s\n",
              at::get_num_threads(), "queries", "keys", "torch", "plain ms", "sdpa ms");
  const std::string script = std::string(zs_bench_source_dir()) + "/bench/attention_baseline.py";
  for (const std::int64_t n : tokens)
    for (const std::string& py : pythons) {
      std::ostringstream cmd;
      cmd << py << " " << script << " --tokens " << n << " --keys " << keys << " --heads " << heads << " --head-dim "
          << head_dim << " --batch " << batch << " --reps " << reps << " --threads " << at::get_num_threads()
          << " 2>/dev/null";
      const std::string out = run_command(cmd.str());
      const double plain_ms = number_after(out, "plain_ms"), sdpa_ms = number_after(out, "sdpa_ms");
      const auto nq = static_cast<long long>(n), nk = static_cast<long long>(keys > 0 ? keys : n);
      if (plain_ms <= 0) {
        std::printf("%8lld %6lld %-18s did not run (%s)\n", nq, nk, "", py.c_str());
        continue;
      }
      char sdpa[32] = "-";
      if (sdpa_ms > 0) std::snprintf(sdpa, sizeof sdpa, "%.1f", sdpa_ms);
      std::printf("%8lld %6lld %-18s %11.1f %11s\n", nq, nk, word_after(out, "torch").c_str(), plain_ms, sdpa);
    }
  return 0;
}
