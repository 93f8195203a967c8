// bench_zero_step: step time and model-state bytes per rank for ZeRO stages 0-3 (and offload
// variants) at N = 1 and 2, on the quickstart's UNet and on a ~54 M-parameter one, against
// PyTorch running the same architecture with DistributedDataParallel on Gloo
// (bench/ddp_baseline.py) in the same run: Debian's python3-torch (1.13) and, where `make peers`
// has made it, the pinned PyTorch 2.x of .venv — one DDP row and one "vs DDP" column for each.
//
//   bench_zero_step [--steps 20] [--only tiny|large] [--worlds 1,2] [--stages 1,2,3] [--repeats 3]
//                   [--offload 0|1] [--profile 0|1] [--python /usr/bin/python3,.venv/bin/python]
//                   [--optimizer adamw|adamw8bit|adafactor]
//
// Every stage is measured against stage 0 in the same processes: each rank builds two copies of
// the model, one under stage 0 and one under the stage measured, and alternates between them in
// blocks of 3 steps (the first untimed, A B B A order), so the drift of this machine (identical
// stage-0 processes vary by ±15 % here) hits both alike;
// "vs stage 0" is the median over the repeats of that same-process ratio. --offload 1 adds rows
// with the optimizer states in CPU memory (stages 1-3) and in NVMe files (stage 2, under /tmp),
// as ratios to stage 0 without offload; --profile 1 prints forward, backward, gradient reduction
// and step (with the all-gather after it) per run. --optimizer runs every row (stage 0 too) with
// that optimizer instead of AdamW (the lean optimizers' schedules: issue 51 compares them).
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include "python_baseline.h"
#include "bench_models.h"
#include "source_dir.h"
#include "core/memory.h"
#include "comm/communicator.h"
#include "models/sd/unet_2d_condition.h"
#include "zero/zero_optimizer.h"

using namespace zs;
using bench::config_of;
using bench::ints;
using bench::ModelSpec;
using bench::specs;

namespace {

/// A run of the table: a stage, optionally with the optimizer offloaded, and the optimizer
/// ("STAGE:OFFLOAD:OPTIMIZER").
struct Run {
  int stage = 0;
  std::string offload = "none";  // none | cpu | nvme (optimizer states)
  std::string optimizer = "adamw";  // adamw | adamw8bit | adafactor
  std::string label() const { return "stage " + std::to_string(stage) + (offload == "none" ? "" : "+" + offload); }
  std::string spec() const { return std::to_string(stage) + ":" + offload + ":" + optimizer; }
  static Run parse(const std::string& spec) {
    Run r;
    std::istringstream in(spec);
    std::string stage;
    std::getline(in, stage, ':');
    r.stage = std::stoi(stage);
    std::getline(in, r.offload, ':');
    std::getline(in, r.optimizer, ':');
    if (r.offload.empty()) r.offload = "none";
    if (r.optimizer.empty()) r.optimizer = "adamw";
    return r;
  }
};

double median(std::vector<double> v) {
  if (v.empty()) return -1;
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

/// One rank of one measurement (started by the parent with torchrun's variables): a copy of the
/// model per run, their steps alternated in blocks; `steps` timed steps each. Rank 0
/// prints one line per run: the median step time, the model-state bytes and, with `profile`, the
/// mean time of each phase (forward, backward, gradient reduction, optimizer step with the
/// all-gather after it).
int child(const ModelSpec& m, const std::vector<Run>& runs, int steps, bool profile, const std::string& nvme_dir) {
  keep_freed_memory();  // as the trainer does
  const auto info = comm::rendezvous_from_env();
  auto comm = comm::Communicator::connect(*info, std::chrono::seconds(300));
  at::set_num_threads(std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / comm->world_size()));
  struct Side {
    Run run;
    models::UNet2DConditionModel unet{nullptr};
    std::unique_ptr<zero::ZeroOptimizer> opt;
    std::vector<double> times;
    double phase[4] = {0, 0, 0, 0};
  };
  std::vector<Side> sides(runs.size());
  for (std::size_t i = 0; i < runs.size(); ++i) {
    Side& side = sides[i];
    side.run = runs[i];
    at::manual_seed(0);
    side.unet = models::UNet2DConditionModel(config_of(m));
    zero::ZeroOptions o;
    o.persistence_threshold = 0;  // every unit sharded at stage 3 (zero.stage3_param_persistence_threshold: 0)
    o.stage = side.run.stage;
    o.reduce_bucket_size = 50'000'000;
    if (side.run.optimizer == "adamw8bit") o.optimizer = zero::OptimizerType::adamw8bit;
    else if (side.run.optimizer == "adafactor") o.optimizer = zero::OptimizerType::adafactor;
    else if (side.run.optimizer != "adamw") throw std::runtime_error("unknown optimizer " + side.run.optimizer);
    if (side.run.offload == "cpu") o.offload_optimizer = zero::ZeroOptions::Offload::cpu;
    if (side.run.offload == "nvme") {
      o.offload_optimizer = zero::ZeroOptions::Offload::nvme;
      o.optimizer_nvme_path = nvme_dir;
      o.run_tag = "bench" + std::to_string(i);
    }
    side.opt = std::make_unique<zero::ZeroOptimizer>(side.unet->units(), *comm, o);
    side.unet->set_unit_hooks(side.opt->unit_hooks());
  }
  const at::Tensor x = at::randn({m.batch, m.cin, m.res, m.res}), t = at::randint(0, 1000, {m.batch});
  const at::Tensor ctx = at::randn({m.batch, 8, m.cross});
  using Clock = std::chrono::steady_clock;
  // Blocks of 3 steps per model, the first untimed: it absorbs what the other model left behind
  // (its deferred gathers, its cache); the blocks go A B B A A B ..., so neither side is always
  // first. After 2 warm-up steps each, until every side has `steps` timed steps.
  auto one_step = [&](Side& side, bool timed) {
    const auto t0 = Clock::now();
    auto last = t0;
    auto mark = [&](int i) {
      const auto now = Clock::now();
      if (timed) side.phase[i] += std::chrono::duration<double>(now - last).count();
      last = now;
    };
    side.opt->zero_grad();
    const at::Tensor loss = (side.unet->forward(x, t, ctx) - x).pow(2).mean();
    mark(0);
    loss.backward();
    mark(1);
    side.opt->reduce_gradients();
    mark(2);
    side.opt->step(1e-4);
    mark(3);
    if (timed) side.times.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
  };
  for (Side& side : sides)
    for (int i = 0; i < 2; ++i) one_step(side, false);
  for (int block = 0; static_cast<int>(sides.back().times.size()) < steps; ++block)
    for (std::size_t k = 0; k < sides.size(); ++k) {
      Side& side = sides[block % 2 == 0 ? k : sides.size() - 1 - k];
      one_step(side, false);
      for (int i = 0; i < 2 && static_cast<int>(side.times.size()) < steps; ++i) one_step(side, true);
    }
  if (comm->rank() == 0)
    for (const Side& side : sides) {
      const auto b = side.opt->model_state();
      std::printf("zs run %s world %d psi %lld step_ms %.1f bytes %lld %lld %lld", side.run.spec().c_str(),
                  comm->world_size(), static_cast<long long>(side.opt->numel()), 1000 * median(side.times),
                  static_cast<long long>(b.parameters), static_cast<long long>(b.gradients),
                  static_cast<long long>(b.optimizer_states));
      if (profile)
        std::printf(" forward %.1f backward %.1f reduce %.1f step %.1f", 1000 * side.phase[0] / steps,
                    1000 * side.phase[1] / steps, 1000 * side.phase[2] / steps, 1000 * side.phase[3] / steps);
      std::printf("\n");
    }
  return 0;
}

/// Runs `argv` as `world` ranks and returns rank 0's output.
std::string run_world(const std::string& self, const std::vector<std::string>& args, int world, int port) {
  std::vector<std::pair<pid_t, int>> kids;
  for (int r = 0; r < world; ++r) {
    int fds[2];
    if (pipe(fds) != 0) return "";
    const pid_t pid = fork();
    if (pid == 0) {
      dup2(fds[1], STDOUT_FILENO);
      close(fds[0]);
      setenv("RANK", std::to_string(r).c_str(), 1);
      setenv("WORLD_SIZE", std::to_string(world).c_str(), 1);
      setenv("LOCAL_RANK", std::to_string(r).c_str(), 1);
      setenv("LOCAL_WORLD_SIZE", std::to_string(world).c_str(), 1);
      setenv("MASTER_ADDR", "127.0.0.1", 1);
      setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
      std::vector<char*> av{const_cast<char*>(self.c_str())};
      for (const auto& a : args) av.push_back(const_cast<char*>(a.c_str()));
      av.push_back(nullptr);
      execv(self.c_str(), av.data());
      _exit(127);
    }
    close(fds[1]);
    kids.emplace_back(pid, fds[0]);
  }
  std::string out;
  for (std::size_t i = 0; i < kids.size(); ++i) {
    char buf[4096];
    for (ssize_t n; (n = read(kids[i].second, buf, sizeof buf)) > 0;)
      if (i == 0) out.append(buf, static_cast<std::size_t>(n));
    close(kids[i].second);
    waitpid(kids[i].first, nullptr, 0);
  }
  return out;
}

std::string run_python(const std::string& python, const std::string& script, const ModelSpec& m, int world, int steps,
                       int port) {
  std::ostringstream cmd;
  cmd << python << " " << script << " --world " << world << " --cin " << m.cin << " --channels " << m.channels
      << " --heads " << m.heads << " --down " << m.down << " --cross " << m.cross << " --groups " << m.groups
      << " --layers " << m.layers << " --res " << m.res << " --batch " << m.batch << " --steps " << steps << " --port "
      << port << " 2>/dev/null";
  return run_command(cmd.str());
}

}  // namespace

/// The line of run `spec` in a child's output ("" when missing).
std::string line_of(const std::string& out, const std::string& spec) {
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);)
    if (line.rfind("zs run " + spec + " ", 0) == 0) return line;
  return "";
}

int main(int argc, char** argv) {
  int steps = 20, repeats = 3;
  bool profile = false, offload = false;
  std::string only, worlds_arg = "1,2", stages_arg = "1,2,3", optimizer = "adamw";
  std::vector<std::string> pythons = baseline_pythons();
  if (argc >= 7 && std::string(argv[1]) == "--child") {
    std::vector<Run> runs;
    for (int i = 6; i < argc; ++i) runs.push_back(Run::parse(argv[i]));
    for (const auto& m : specs())
      if (m.name == argv[2]) return child(m, runs, std::atoi(argv[3]), std::string(argv[4]) == "1", argv[5]);
    return 2;
  }
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--steps") steps = std::atoi(v.c_str());
    else if (k == "--only") only = v;
    else if (k == "--python") pythons = split_list(v);
    else if (k == "--repeats") repeats = std::max(1, std::atoi(v.c_str()));
    else if (k == "--profile") profile = v == "1";
    else if (k == "--offload") offload = v == "1";
    else if (k == "--worlds") worlds_arg = v;
    else if (k == "--stages") stages_arg = v;
    else if (k == "--optimizer") optimizer = v;
    else {
      std::fprintf(stderr, "bench_zero_step: unknown option %s\n", k.c_str());
      return 2;
    }
  }
  std::vector<int> worlds;
  for (const auto w : ints(worlds_arg)) worlds.push_back(static_cast<int>(w));
  std::vector<Run> runs;  // each measured against stage 0 in the same processes
  for (const auto st : ints(stages_arg))
    if (st != 0) runs.push_back({static_cast<int>(st), "none", optimizer});
  if (offload)
    for (const char* spec : {"1:cpu", "2:cpu", "3:cpu", "2:nvme"}) runs.push_back(Run::parse(spec + (":" + optimizer)));
  const std::string stage0 = Run{0, "none", optimizer}.spec();
  char self[4096];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  self[n > 0 ? n : 0] = '\0';
  const std::string script = std::string(zs_bench_source_dir()) + "/bench/ddp_baseline.py";
  char nvme_template[] = "/tmp/bench_zero_step_nvme.XXXXXX";
  const std::string nvme_dir = offload && mkdtemp(nvme_template) ? nvme_template : "/tmp";
  int port = 29900;
  struct Result {
    std::vector<double> ms, ratio, phases[4];  // per repeat (ratio: to stage 0 in the same processes)
    double psi = 0, p = 0, g = 0, o = 0;
  };
  std::map<std::string, Result> results;  // key: model/world/label
  std::map<std::size_t, std::string> torch_versions;  // of each Python that ran the baseline
  auto record = [&](Result& res, const std::string& line) {
    res.ms.push_back(number_after(line, "step_ms"));
    res.psi = number_after(line, "psi");
    std::istringstream bytes(line.substr(line.find("bytes ") + 6));
    bytes >> res.p >> res.g >> res.o;
    const char* names[4] = {"forward", "backward", "reduce", "step"};
    for (int i = 0; i < 4; ++i) res.phases[i].push_back(number_after(line, names[i]));
  };
  for (int rep = 0; rep < repeats; ++rep)
    for (const auto& m : specs()) {
      if (!only.empty() && m.name != only) continue;
      for (int world : worlds) {
        const std::string base = m.name + "/" + std::to_string(world) + "/";
        for (std::size_t i = 0; i < pythons.size(); ++i) {
          const std::string ddp = run_python(pythons[i], script, m, world, steps, ++port);
          const double ms = number_after(ddp, "step_ms");
          if (ms <= 0) {
            std::fprintf(stderr, "bench_zero_step: %s did not run bench/ddp_baseline.py\n", pythons[i].c_str());
            continue;
          }
          Result& res = results[base + "DDP" + std::to_string(i)];
          res.ms.push_back(ms);
          res.psi = number_after(ddp, "params");
          torch_versions[i] = word_after(ddp, "torch");
        }
        for (const Run& r : runs) {
          const std::string out = run_world(self,
                                            {"--child", m.name, std::to_string(steps), profile ? "1" : "0", nvme_dir,
                                             stage0, r.spec()},
                                            world, ++port);
          const std::string zero = line_of(out, stage0), mine = line_of(out, r.spec());
          if (zero.empty() || mine.empty()) {
            std::fprintf(stderr, "bench_zero_step: %s N=%d: no result; the child printed:\n%s\n", r.label().c_str(), world,
                         out.c_str());
            continue;
          }
          record(results[base + "stage 0"], zero);
          Result& res = results[base + r.label()];
          record(res, mine);
          res.ratio.push_back(number_after(mine, "step_ms") / number_after(zero, "step_ms"));
        }
        std::fprintf(stderr, "repeat %d/%d: %s N=%d done\n", rep + 1, repeats, m.name.c_str(), world);
      }
    }
  if (offload) rmdir(nvme_dir.c_str());
  // One "vs DDP" column per PyTorch that ran the baseline (Debian's 1.13, the pinned 2.x).
  std::vector<std::size_t> ran;
  for (const auto& [i, version] : torch_versions) ran.push_back(i);
  std::printf("%-6s %2s %-16s %10s", "model", "N", "run", "step ms");
  for (const std::size_t i : ran) std::printf(" %14s", ("vs DDP " + short_version(torch_versions[i])).c_str());
  std::printf(" %10s %13s %13s %13s %8s\n", "vs stage 0", "params B/rank", "grads B/rank", "optim B/rank", "vs 16Ψ");
  std::vector<Run> rows{{0, "none"}};
  rows.insert(rows.end(), runs.begin(), runs.end());
  for (const auto& m : specs()) {
    if (!only.empty() && m.name != only) continue;
    for (int world : worlds) {
      const std::string base = m.name + "/" + std::to_string(world) + "/";
      auto ddp_ms = [&](std::size_t i) { return median(results[base + "DDP" + std::to_string(i)].ms); };
      for (const std::size_t i : ran) {
        const Result& ddp = results[base + "DDP" + std::to_string(i)];
        std::printf("%-6s %2d %-16s %10.1f", m.name.c_str(), world, ("DDP " + torch_versions[i]).substr(0, 16).c_str(),
                    ddp_ms(i));
        for (const std::size_t j : ran) std::printf(" %13.2fx", ddp_ms(j) > 0 ? ddp_ms(j) / ddp_ms(i) : 0.0);
        std::printf(" %10s %13.0f %13.0f %13.0f %8.3f\n", "", 4 * ddp.psi, 4 * ddp.psi, 8 * ddp.psi, 1.0);
      }
      for (const Run& r : rows) {
        const Result& res = results[base + r.label()];
        const double ms = median(res.ms);
        for (const std::size_t i : ran) {
          const double psi = results[base + "DDP" + std::to_string(i)].psi;
          if (res.psi > 0 && psi > 0 && res.psi != psi)
            std::printf("  (parameter counts differ: ZeroStudio %.0f, PyTorch %s %.0f)\n", res.psi,
                        torch_versions[i].c_str(), psi);
        }
        const double ratio = r.stage == 0 && r.offload == "none" ? 1.0 : median(res.ratio);
        std::printf("%-6s %2d %-16s %10.1f", m.name.c_str(), world, r.label().c_str(), ms);
        for (const std::size_t i : ran) std::printf(" %13.2fx", ms > 0 && ddp_ms(i) > 0 ? ddp_ms(i) / ms : 0.0);
        std::printf(" %9.2fx %13.0f %13.0f %13.0f %8.3f\n", ratio, res.p, res.g, res.o,
                    res.psi > 0 ? (res.p + res.g + res.o) / (16 * res.psi) : 0.0);
        if (profile)
          std::printf("%-26s forward %.1f, backward %.1f, reduce %.1f, step %.1f ms\n", "", median(res.phases[0]),
                      median(res.phases[1]), median(res.phases[2]), median(res.phases[3]));
      }
    }
  }
  std::printf("Medians over %d repeat(s) of the median of %d timed steps. Each run shares its processes with\n"
              "stage 0, in alternating blocks of 3 steps (the first untimed); \"vs stage 0\" is the median of those same-process ratios (stage 0's own\n"
              "row pools every pairing). vs DDP <torch>: that PyTorch's DDP step time / this row's (above 1: this row is faster). The +cpu/+nvme rows have\n"
              "the optimizer states offloaded. vs 16Ψ: model-state bytes per rank relative to replicated fp32 Adam\n"
              "(ZeRO: stage 1 ½+½/N, stage 2 ¼+¾/N, stage 3 1/N).\n",
              repeats, steps);
  return 0;
}
