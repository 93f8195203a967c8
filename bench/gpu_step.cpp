// bench_gpu_step: full-size UNet training steps on one CUDA GPU under ZeRO stages and offload:
// images/s and peak GPU memory per setting, against the same architecture in the machine's
// Python PyTorch (bench/gpu_baseline.py: a plain loop, bf16 autocast, fused AdamW, the same
// fused attention) measured in the same run. Each setting runs in a fresh process, so every
// peak is its own.
//
//   bench_gpu_step [--model sd15|sdxl] [--batch 8] [--res 64] [--steps 10] [--warmup 3]
//                  [--ckpt 0|1] [--runs stage0,stage2,...] [--python python3] [--baseline 1]
//                  [--profile 1]
//
// Settings (--runs): stage0, stage1, stage2, stage3, stage2+cpu-opt, stage3+cpu-param,
// stage3+cpu-param+opt; a "/serial" suffix turns the side streams and the overlap of
// reductions and prefetches off (for measuring the overlap). --profile 1 also prints the
// forward, backward, reduction and step phases (synchronized, so without overlap).
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <torch/cuda.h>

#include "python_baseline.h"
#include "source_dir.h"
#include "core/memory.h"
#include "comm/communicator.h"
#include "models/sd/unet_2d_condition.h"
#include "zero/zero_optimizer.h"

using namespace zs;

namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

struct Args {
  std::string model = "sd15", runs = "stage0,stage2,stage2+cpu-opt,stage3+cpu-param", python = "python3";
  int batch = 8, res = 64, steps = 10, warmup = 3;
  bool ckpt = false, baseline = true, profile = false;
};

struct Setting {
  int stage = 0;
  zero::ZeroOptions::Offload opt = zero::ZeroOptions::Offload::none, param = zero::ZeroOptions::Offload::none;
  bool overlap = true;
};

Setting parse_setting(const std::string& name) {
  Setting s;
  std::string n = name;
  if (const auto slash = n.find("/serial"); slash != std::string::npos) {
    s.overlap = false;
    n.resize(slash);
  }
  if (n.rfind("stage", 0) != 0 || n.size() < 6) throw std::runtime_error("unknown setting " + name);
  s.stage = n[5] - '0';
  if (n.find("+cpu-opt") != std::string::npos || n.find("+opt") != std::string::npos) s.opt = zero::ZeroOptions::Offload::cpu;
  if (n.find("+cpu-param") != std::string::npos) s.param = zero::ZeroOptions::Offload::cpu;
  return s;
}

void sync() { torch::cuda::synchronize(); }

/// One setting in this process: prints one "zs ..." line.
int child(const Args& a, const std::string& name) {
  keep_freed_memory();  // as the trainer does
  const Setting s = parse_setting(name);
  const at::Device dev(at::kCUDA, 0);
  const auto setup0 = Clock::now();
  at::manual_seed(0);
  const models::UNetConfig cfg = a.model == "sdxl" ? models::UNetConfig::sdxl() : models::UNetConfig::sd15();
  models::UNet2DConditionModel unet(cfg);
  auto comm = comm::Communicator::single();
  zero::ZeroOptions o;
  o.persistence_threshold = 0;  // every unit sharded at stage 3 (zero.stage3_param_persistence_threshold: 0)
  o.stage = s.stage;
  o.compute_dtype = at::kBFloat16;
  o.device = dev;
  o.offload_optimizer = s.opt;
  o.offload_param = s.param;
  o.side_streams = s.overlap;
  o.overlap_comm = s.overlap;
  if (!s.overlap) o.prefetch_bucket_size = 0;
  zero::ZeroOptimizer opt(unet->units(), *comm, o);
  unet->set_unit_hooks(opt.unit_hooks());
  unet->set_gradient_checkpointing(a.ckpt);
  const auto bf16 = at::TensorOptions().dtype(at::kBFloat16).device(dev);
  const std::int64_t b = a.batch, ctx_len = 77;
  const at::Tensor x = at::randn({b, cfg.in_channels, a.res, a.res}, bf16), target = at::randn_like(x).to(at::kFloat);
  const at::Tensor t = at::randint(0, 1000, {b}, at::TensorOptions().dtype(at::kLong).device(dev));
  const at::Tensor ctx = at::randn({b, ctx_len, cfg.cross_attention_dim}, bf16);
  at::Tensor pooled, time_ids;
  if (cfg.addition_embed_type == "text_time") {
    pooled = at::randn({b, cfg.projection_class_embeddings_input_dim - 6 * cfg.addition_time_embed_dim}, bf16);
    const double px = 8.0 * a.res;  // original and target size in pixels, no crop
    time_ids = at::tensor({px, px, 0.0, 0.0, px, px}, at::kFloat).to(bf16).repeat({b, 1});
  }
  sync();
  const double setup_s = since(setup0);
  reset_gpu_peak(0);
  double total = 0, phase[4] = {0, 0, 0, 0};
  for (int step = 0; step < a.warmup + a.steps; ++step) {
    const bool timed = step >= a.warmup;
    sync();
    const auto t0 = Clock::now();
    auto mark = [&](int i, Clock::time_point& from) {
      if (!a.profile) return;
      sync();
      if (timed) phase[i] += since(from);
      from = Clock::now();
    };
    auto p0 = t0;
    opt.zero_grad();
    const at::Tensor out = unet->forward(x, t, ctx, pooled, time_ids);
    const at::Tensor loss = (out.to(at::kFloat) - target).pow(2).mean();
    mark(0, p0);
    loss.backward();
    mark(1, p0);
    opt.reduce_gradients();
    mark(2, p0);
    opt.step(1e-5);
    mark(3, p0);
    sync();
    if (timed) total += since(t0);
  }
  const auto mem = gpu_memory(0);
  const double s_it = total / a.steps;
  std::printf("zs %s psi %lld s_it %.4f images_s %.3f peak_alloc %lld peak_reserved %lld setup_s %.1f", name.c_str(),
              static_cast<long long>(opt.numel()), s_it, a.batch / s_it, static_cast<long long>(mem.peak),
              static_cast<long long>(mem.reserved), setup_s);
  if (a.profile)
    std::printf(" forward %.4f backward %.4f reduce %.4f step %.4f", phase[0] / a.steps, phase[1] / a.steps,
                phase[2] / a.steps, phase[3] / a.steps);
  std::printf("\n");
  return 0;
}

double field(const std::string& line, const std::string& key) {
  const auto at = line.find(" " + key + " ");
  return at == std::string::npos ? -1 : std::atof(line.c_str() + at + key.size() + 2);
}

std::string common_flags(const Args& a) {
  std::ostringstream f;
  f << " --model " << a.model << " --batch " << a.batch << " --res " << a.res << " --steps " << a.steps << " --warmup "
    << a.warmup << " --ckpt " << a.ckpt;
  return f.str();
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // each line as it comes, also into a pipe that may be cut
  Args a;
  std::string child_run;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--model") a.model = v;
    else if (k == "--runs") a.runs = v;
    else if (k == "--python") a.python = v;
    else if (k == "--batch") a.batch = std::stoi(v);
    else if (k == "--res") a.res = std::stoi(v);
    else if (k == "--steps") a.steps = std::stoi(v);
    else if (k == "--warmup") a.warmup = std::stoi(v);
    else if (k == "--ckpt") a.ckpt = v == "1";
    else if (k == "--baseline") a.baseline = v == "1";
    else if (k == "--profile") a.profile = v == "1";
    else if (k == "--child") child_run = v;
    else {
      std::fprintf(stderr, "bench_gpu_step: unknown option %s\n", k.c_str());
      return 2;
    }
  }
  if (!torch::cuda::is_available()) {
    std::printf("bench_gpu_step: skipped, no CUDA device here (it measures one GPU)\n");
    return 0;
  }
  if (!child_run.empty()) return child(a, child_run);

  char self[4096];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  self[n > 0 ? n : 0] = '\0';
  std::printf("%s UNet, batch %d, %d×%d latents, bf16%s, %d timed steps after %d\n", a.model.c_str(), a.batch, a.res,
              a.res, a.ckpt ? ", gradient checkpointing" : "", a.steps, a.warmup);
  std::printf("%-26s %9s %9s %11s %13s %9s %9s\n", "run", "s/it", "images/s", "vs PyTorch", "peak alloc MiB",
              "reserved", "setup s");
  double base_ips = -1;
  if (a.baseline) {
    const std::string script = std::string(zs_bench_source_dir()) + "/bench/gpu_baseline.py";
    const std::string out = run_command(a.python + " " + script + common_flags(a) + " 2>&1");
    base_ips = field(out, "images_s");
    if (base_ips <= 0) std::printf("PyTorch baseline failed:\n%s\n", out.c_str());
    else
      std::printf("%-26s %9.3f %9.2f %11s %13.0f %9.0f %9s\n", "PyTorch (bf16 autocast)", field(out, "s_it"), base_ips,
                  "1.00", field(out, "peak_alloc") / 1048576, field(out, "peak_reserved") / 1048576, "");
    std::fflush(stdout);
  }
  std::stringstream list(a.runs);
  for (std::string name; std::getline(list, name, ',');) {
    const std::string out = run_command(std::string(self) + common_flags(a) + " --profile " + (a.profile ? "1" : "0") +
                                        " --child " + name + " 2>&1");
    const double ips = field(out, "images_s");
    if (ips <= 0) {
      std::printf("%-26s failed:\n%s\n", name.c_str(), out.c_str());
      continue;
    }
    char ratio[32] = "";
    if (base_ips > 0) std::snprintf(ratio, sizeof ratio, "%.2fx", ips / base_ips);
    std::printf("%-26s %9.3f %9.2f %11s %13.0f %9.0f %9.1f\n", name.c_str(), field(out, "s_it"), ips, ratio,
                field(out, "peak_alloc") / 1048576, field(out, "peak_reserved") / 1048576, field(out, "setup_s"));
    if (a.profile)
      std::printf("%-26s forward %.3f s, backward %.3f s, reduce %.3f s, step %.3f s\n", "", field(out, "forward"),
                  field(out, "backward"), field(out, "reduce"), field(out, "step"));
    std::fflush(stdout);
  }
  std::printf("vs PyTorch: images/s over the baseline's (above 1: faster). Peak: the caching allocator's peak of\n"
              "allocated bytes during the timed steps; reserved: what it holds from the GPU at the end.\n");
  return 0;
}
