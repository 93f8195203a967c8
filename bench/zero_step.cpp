// bench_zero_step: step time and model-state bytes per rank for ZeRO stages 0-3 at N = 1 and 2,
// on the quickstart's UNet and on a ~50 M-parameter one, against Debian's python3-torch running
// the same architecture with DistributedDataParallel on Gloo (bench/ddp_baseline.py) in the same run.
//
//   bench_zero_step [--steps 4] [--only tiny|large] [--python /usr/bin/python3]
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include "dist/communicator.h"
#include "models/unet_2d_condition.h"
#include "zero/zero_optimizer.h"

using namespace zs;

namespace {

struct ModelSpec {
  std::string name, channels, heads, down;
  int cin, cross, groups, layers, res, batch;
};

const std::vector<ModelSpec>& specs() {
  static const std::vector<ModelSpec> all = {
      {"tiny", "32,64,96", "2,4,4", "D,C,C", 3, 64, 8, 1, 16, 16},
      {"large", "80,160,320,320", "8,8,8,8", "C,C,C,D", 4, 256, 16, 2, 16, 2},
  };
  return all;
}

std::vector<std::int64_t> ints(const std::string& s) {
  std::vector<std::int64_t> out;
  std::stringstream ss(s);
  for (std::string x; std::getline(ss, x, ',');) out.push_back(std::stoll(x));
  return out;
}

models::UNetConfig config_of(const ModelSpec& m) {
  models::UNetConfig c;
  c.in_channels = c.out_channels = m.cin;
  c.block_out_channels = ints(m.channels);
  c.num_attention_heads = ints(m.heads);
  c.down_block_types.clear();
  c.up_block_types.clear();
  std::stringstream ss(m.down);
  for (std::string d; std::getline(ss, d, ',');) c.down_block_types.push_back(d == "C" ? "CrossAttnDownBlock2D" : "DownBlock2D");
  for (auto it = c.down_block_types.rbegin(); it != c.down_block_types.rend(); ++it)
    c.up_block_types.push_back(*it == "CrossAttnDownBlock2D" ? "CrossAttnUpBlock2D" : "UpBlock2D");
  c.transformer_layers_per_block.assign(c.block_out_channels.size(), 1);
  c.cross_attention_dim = m.cross;
  c.norm_num_groups = m.groups;
  c.layers_per_block = m.layers;
  return c;
}

/// One rank of one measurement (started by the parent with torchrun's variables).
int child(const ModelSpec& m, int stage, int steps) {
  const auto info = dist::rendezvous_from_env();
  auto comm = dist::Communicator::connect(*info, std::chrono::seconds(300));
  at::set_num_threads(std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / comm->world_size()));
  at::manual_seed(0);
  models::UNet2DConditionModel unet(config_of(m));
  zero::ZeroOptions o;
  o.stage = stage;
  o.reduce_bucket_size = 50'000'000;
  zero::ZeroOptimizer opt(unet->units(), *comm, o);
  unet->set_unit_hooks(opt.unit_hooks());
  const at::Tensor x = at::randn({m.batch, m.cin, m.res, m.res}), t = at::randint(0, 1000, {m.batch});
  const at::Tensor ctx = at::randn({m.batch, 8, m.cross});
  double total = 0;
  for (int step = 0; step < steps + 2; ++step) {
    const auto t0 = std::chrono::steady_clock::now();
    opt.zero_grad();
    (unet->forward(x, t, ctx) - x).pow(2).mean().backward();
    opt.reduce_gradients();
    opt.step(1e-4);
    if (step >= 2) total += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  const auto b = opt.model_state();
  if (comm->rank() == 0)
    std::printf("zs %s world %d stage %d psi %lld step_ms %.1f bytes %lld %lld %lld\n", m.name.c_str(), comm->world_size(),
                stage, static_cast<long long>(opt.numel()), 1000 * total / steps, static_cast<long long>(b.parameters),
                static_cast<long long>(b.gradients), static_cast<long long>(b.optimizer_states));
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
  std::string out;
  if (FILE* f = popen(cmd.str().c_str(), "r")) {
    char buf[4096];
    while (fgets(buf, sizeof buf, f)) out += buf;
    pclose(f);
  }
  return out;
}

double field(const std::string& line, const std::string& key) {
  const auto at = line.find(key + " ");
  return at == std::string::npos ? -1 : std::atof(line.c_str() + at + key.size() + 1);
}

}  // namespace

int main(int argc, char** argv) {
  int steps = 4;
  std::string only, python = "/usr/bin/python3";
  if (argc >= 4 && std::string(argv[1]) == "--child") {
    for (const auto& m : specs())
      if (m.name == argv[2]) return child(m, std::atoi(argv[3]), std::atoi(argv[4]));
    return 2;
  }
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    if (k == "--steps") steps = std::atoi(argv[i + 1]);
    else if (k == "--only") only = argv[i + 1];
    else if (k == "--python") python = argv[i + 1];
  }
  char self[4096];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  self[n > 0 ? n : 0] = '\0';
  const std::string script = std::string(ZS_SOURCE_DIR) + "/bench/ddp_baseline.py";
  int port = 29900;
  std::printf("%-6s %2s %-8s %10s %9s %13s %13s %13s %8s\n", "model", "N", "run", "step ms", "vs DDP", "params B/rank",
              "grads B/rank", "optim B/rank", "vs 16Ψ");
  for (const auto& m : specs()) {
    if (!only.empty() && m.name != only) continue;
    for (int world : {1, 2}) {
      const std::string ddp = run_python(python, script, m, world, steps, ++port);
      const double ddp_ms = field(ddp, "step_ms");
      const double ddp_params = field(ddp, "params");
      std::printf("%-6s %2d %-8s %10.1f %9s %13.0f %13.0f %13.0f %8.3f\n", m.name.c_str(), world, "DDP", ddp_ms, "1.00",
                  4 * ddp_params, 4 * ddp_params, 8 * ddp_params, 1.0);
      for (int stage = 0; stage <= 3; ++stage) {
        const std::string out =
            run_world(self, {"--child", m.name, std::to_string(stage), std::to_string(steps)}, world, ++port);
        const double ms = field(out, "step_ms"), psi = field(out, "psi");
        std::istringstream bytes(out.substr(out.find("bytes ") + 6));
        double p = 0, g = 0, o = 0;
        bytes >> p >> g >> o;
        if (psi > 0 && ddp_params > 0 && psi != ddp_params)
          std::printf("  (parameter counts differ: ZeroStudio %.0f, PyTorch %.0f)\n", psi, ddp_params);
        std::printf("%-6s %2d stage %d %10.1f %8.2fx %13.0f %13.0f %13.0f %8.3f\n", m.name.c_str(), world, stage, ms,
                    ms > 0 && ddp_ms > 0 ? ddp_ms / ms : 0.0, p, g, o, psi > 0 ? (p + g + o) / (16 * psi) : 0.0);
        std::fflush(stdout);
      }
    }
  }
  std::printf("vs DDP: DDP step time / ZeroStudio step time (above 1: faster). vs 16Ψ: model-state bytes per rank\n"
              "relative to replicated fp32 Adam (ZeRO: stage 1 ½+½/N, stage 2 ¼+¾/N, stage 3 1/N).\n");
  return 0;
}
