// `zerostudio launch`: spawns this machine's ranks as direct children running `zerostudio train`
// with torchrun's environment variables, like `accelerate launch`.
#include <fcntl.h>
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <map>
#include <thread>

#include "arg_parser.h"
#include "commands.h"
#include "config/config_loader.h"
#include "train/trainer.h"

namespace zs::cli {

namespace {

const CommandSpec kLaunch{
    "launch",
    "[--num_processes N] [--num_machines M --machine_rank R --main_process_ip IP --main_process_port P] FILE "
    "[--set KEY=VALUE ...] [--run-dir DIR] [--resume latest|CHECKPOINT]",
    "Start this machine's ranks of a multi-process run (each runs `zerostudio train` on FILE).",
    "The flags default to the config's launch section. --num_processes counts ranks over all machines\n"
    "(as accelerate). Each rank gets RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR and\n"
    "MASTER_PORT (as torchrun), an equal share of the cores for its threads, and its output prefixed\n"
    "with [rank R]. Ctrl-C and SIGTERM are passed on to every rank (a second one kills them). The exit\n"
    "code is the first failing rank's (128 + signal for a killed rank). Under srun or torchrun, run\n"
    "`zerostudio train` directly: it joins as the rank those variables describe.",
    {{"num_processes", "N", "Total ranks over all machines (launch.num_processes)"},
     {"num_machines", "M", "Machines (launch.num_machines)"},
     {"machine_rank", "R", "This machine's index (launch.machine_rank)"},
     {"main_process_ip", "IP", "Address of the machine with rank 0 (launch.main_process_ip)"},
     {"main_process_port", "P", "Port of the rendezvous store (launch.main_process_port)"},
     {"set", "KEY=VALUE", "Override one key (repeatable; passed to every rank)", true},
     {"run_dir", "DIR", "Run directory (passed to every rank)"},
     {"resume", "latest|CHECKPOINT", "Resume (passed to every rank)"}},
    1, 1};

std::atomic<int> g_signal{0};
std::atomic<int> g_signal_count{0};

extern "C" void on_launcher_signal(int sig) {
  g_signal = sig;
  g_signal_count.fetch_add(1);
}

struct Child {
  int rank = 0;
  pid_t pid = -1;
  int fd = -1;            // read end of its stdout+stderr
  std::string pending;    // partial line
  bool running = true;
  int code = 0;           // exit code, or 128 + signal
};

void flush_lines(Child& c, bool all) {
  for (std::size_t nl; (nl = c.pending.find_first_of("\n\r")) != std::string::npos;) {
    const std::string line = c.pending.substr(0, nl);
    c.pending.erase(0, nl + 1);
    if (!line.empty()) std::cout << "[rank " << c.rank << "] " << line << "\n";
  }
  if (all && !c.pending.empty()) {
    std::cout << "[rank " << c.rank << "] " << c.pending << "\n";
    c.pending.clear();
  }
  std::cout.flush();
}

}  // namespace

int run_launch_command(const std::vector<std::string>& args) {
  const ParsedArgs a = parse_args(kLaunch, args);
  if (a.help) {
    std::cout << kLaunch.help();
    return 0;
  }
  const std::string file = a.positional()[0];
  const auto loaded = config::load_config_file(file, a.all("set"));
  const auto& l = loaded.config.launch;
  const int total = static_cast<int>(a.get_int("num_processes", l.num_processes, 0));
  const int machines = static_cast<int>(a.get_int("num_machines", l.num_machines, 0));
  const int machine_rank = static_cast<int>(a.get_int("machine_rank", l.machine_rank, 0));
  const int port = static_cast<int>(a.get_int("main_process_port", l.main_process_port, 0));
  const std::string ip = a.has("main_process_ip") ? a.get("main_process_ip") : l.main_process_ip;
  if (total < 1 || machines < 1 || total % machines != 0)
    throw UsageError("--num_processes " + std::to_string(total) + " must be a positive multiple of --num_machines " +
                     std::to_string(machines));
  if (machine_rank >= machines)
    throw UsageError("--machine_rank " + std::to_string(machine_rank) + " must be below --num_machines " +
                     std::to_string(machines));
  const int local = total / machines;
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  const int threads = std::max(1, static_cast<int>(cores) / local);

  std::vector<std::string> train_args = {"train", file};
  for (const auto& s : a.all("set")) train_args.insert(train_args.end(), {"--set", s});
  // Every rank must agree on the run directory: name it here when neither flag nor config does.
  std::string run_dir = a.get("run_dir");
  if (run_dir.empty() && loaded.config.logging.run_name.empty() && !a.has("resume"))
    run_dir = train::default_run_dir(loaded.config, std::filesystem::path(file).stem().string());
  if (!run_dir.empty()) train_args.insert(train_args.end(), {"--run-dir", run_dir});
  if (a.has("resume")) train_args.insert(train_args.end(), {"--resume", a.get("resume")});

  char self[4096];
  const ssize_t n = ::readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) throw Error(ErrorKind::io, "cannot find the zerostudio executable (/proc/self/exe)");
  self[n] = '\0';

  std::cout << "[launcher] starting " << local << " of " << total << " ranks on machine " << machine_rank << " ("
            << threads << " threads each, rendezvous " << ip << ":" << port << ")\n";
  std::cout.flush();
  std::signal(SIGINT, on_launcher_signal);
  std::signal(SIGTERM, on_launcher_signal);
  std::vector<Child> children;
  for (int i = 0; i < local; ++i) {
    int fds[2];
    if (::pipe(fds) != 0) throw Error(ErrorKind::io, "cannot create a pipe for a rank's output");
    Child c;
    c.rank = machine_rank * local + i;
    c.pid = ::fork();
    if (c.pid == 0) {
      ::dup2(fds[1], STDOUT_FILENO);
      ::dup2(fds[1], STDERR_FILENO);
      ::close(fds[0]);
      ::close(fds[1]);
      std::signal(SIGINT, SIG_DFL);
      std::signal(SIGTERM, SIG_DFL);
      const std::map<std::string, std::string> env = {
          {"RANK", std::to_string(c.rank)},        {"WORLD_SIZE", std::to_string(total)},
          {"LOCAL_RANK", std::to_string(i)},       {"LOCAL_WORLD_SIZE", std::to_string(local)},
          {"MASTER_ADDR", ip},                     {"MASTER_PORT", std::to_string(port)},
          {"OMP_NUM_THREADS", std::to_string(threads)}, {"MKL_NUM_THREADS", std::to_string(threads)}};
      for (const auto& [k, v] : env) ::setenv(k.c_str(), v.c_str(), 1);
      std::vector<char*> argv{self};
      for (auto& s : train_args) argv.push_back(s.data());
      argv.push_back(nullptr);
      ::execv(self, argv.data());
      std::perror("zerostudio launch: exec");
      ::_exit(127);
    }
    ::close(fds[1]);
    if (c.pid < 0) throw Error(ErrorKind::io, "cannot start rank " + std::to_string(c.rank));
    c.fd = fds[0];
    children.push_back(c);
  }

  int first_failure = 0;
  int forwarded = 0;
  std::chrono::steady_clock::time_point kill_at = std::chrono::steady_clock::time_point::max();
  const auto grace = std::chrono::seconds(loaded.config.launch.timeout_s + 15);
  for (;;) {
    // Pass signals on: the first politely, a second one as SIGKILL.
    if (g_signal_count > forwarded) {
      forwarded = g_signal_count;
      const int sig = forwarded > 1 ? SIGKILL : g_signal.load();
      for (auto& c : children)
        if (c.running) ::kill(c.pid, sig);
    }
    std::vector<pollfd> fds;
    for (auto& c : children)
      if (c.fd >= 0) fds.push_back({c.fd, POLLIN, 0});
    if (!fds.empty()) ::poll(fds.data(), fds.size(), 200);
    for (auto& c : children) {
      if (c.fd < 0) continue;
      for (const auto& p : fds) {
        if (p.fd != c.fd || !(p.revents & (POLLIN | POLLHUP))) continue;
        char buf[4096];
        const ssize_t got = ::read(c.fd, buf, sizeof buf);
        if (got > 0) {
          c.pending.append(buf, static_cast<std::size_t>(got));
          flush_lines(c, false);
        } else if (got == 0) {
          flush_lines(c, true);
          ::close(c.fd);
          c.fd = -1;
        }
      }
    }
    bool any_running = false;
    for (auto& c : children) {
      if (!c.running) continue;
      int status = 0;
      if (::waitpid(c.pid, &status, WNOHANG) == c.pid) {
        c.running = false;
        c.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        if (c.code != 0) {
          std::cout << "[launcher] rank " << c.rank
                    << (WIFSIGNALED(status) ? " was killed by signal " + std::to_string(WTERMSIG(status))
                                            : " exited with code " + std::to_string(c.code))
                    << "\n";
          if (first_failure == 0) {
            first_failure = c.code;
            kill_at = std::chrono::steady_clock::now() + grace;
          }
        }
      } else {
        any_running = true;
      }
    }
    if (!any_running) {
      bool open = false;
      for (auto& c : children) open |= c.fd >= 0;
      if (!open) break;
    }
    if (std::chrono::steady_clock::now() > kill_at) {
      for (auto& c : children)
        if (c.running) {
          std::cout << "[launcher] rank " << c.rank << " still running after the failure; killing it\n";
          ::kill(c.pid, SIGKILL);
        }
      kill_at = std::chrono::steady_clock::time_point::max();
    }
  }
  std::signal(SIGINT, SIG_DFL);
  std::signal(SIGTERM, SIG_DFL);
  std::cout << "[launcher] " << (first_failure ? "failed with exit code " + std::to_string(first_failure) : "all ranks finished")
            << "\n";
  return first_failure;
}

}  // namespace zs::cli
