// `zerostudio launch`: spawns this machine's ranks as direct children running `zerostudio train`
// with torchrun's environment variables, like `accelerate launch`.
#include <fcntl.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <thread>

#include <nlohmann/json.hpp>

#include "arg_parser.h"
#include "commands.h"
#include "comm/communicator.h"
#include "config/config_loader.h"
#include "config/trainability.h"
#include "doctor/system_check.h"
#include "io/atomic_file.h"
#include "train/event_types.h"
#include "train/events.h"
#include "train/run_directory.h"
#include "train/trainer.h"

namespace zs::cli {

namespace {

const CommandSpec kLaunch{
    "launch",
    "[--num_processes N] [--num_machines M --machine_rank R --main_process_ip IP --main_process_port P] FILE "
    "[--set KEY=VALUE ...] [--run-dir DIR] [--resume latest|auto|CHECKPOINT]",
    "Start this machine's ranks of a multi-process run (each runs `zerostudio train` on FILE).",
    "The flags default to the config's launch section. --num_processes counts ranks over all machines\n"
    "(as accelerate). Each rank gets RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR and\n"
    "MASTER_PORT (as torchrun), an equal share of the cores for its threads, and its output prefixed\n"
    "with [rank R]. Ctrl-C and SIGTERM are passed on to every rank (a second one kills them). A rank\n"
    "that dies (a signal, an error) or stalls (no heartbeat for launch.heartbeat_timeout_s) ends the\n"
    "run: the others get SIGTERM at once and are killed after launch.failure_grace_s. The exit\n"
    "code is the first failing rank's (128 + signal for a killed rank; 3 when the run ended without\n"
    "its newest checkpoint). On one machine the ranks meet through a file in a private folder under\n"
    "$TMPDIR (ZEROSTUDIO_STORE_FILE), so no port is opened; several machines meet at rank 0's store on\n"
    "--main_process_port, which the other machines must reach. Under srun or torchrun, run\n"
    "`zerostudio train` directly: it joins as the rank those variables describe.",
    {{"num_processes", "N", "Total ranks over all machines (launch.num_processes)"},
     {"num_machines", "M", "Machines (launch.num_machines)"},
     {"machine_rank", "R", "This machine's index (launch.machine_rank)"},
     {"main_process_ip", "IP", "Address of the machine with rank 0 (launch.main_process_ip)"},
     {"main_process_port", "P", "Port of the rendezvous store, several machines only (launch.main_process_port)"},
     {"set", "KEY=VALUE", "Override one key (repeatable; passed to every rank)", true},
     {"run_dir", "DIR", "Run directory (passed to every rank)"},
     {"resume", "latest|auto|CHECKPOINT", "Resume (passed to every rank)"},
     {"allow_cpu", "", "Train a full-size model (500 M parameters and more) on the CPU, which is refused otherwise"}},
    1, 1};

std::atomic<int> g_signal{0};
std::atomic<int> g_signal_count{0};

extern "C" void on_launcher_signal(int sig) {
  g_signal = sig;
  g_signal_count.fetch_add(1);
}

using Clock = std::chrono::steady_clock;

struct Child {
  int rank = 0;
  pid_t pid = -1;
  int fd = -1;            // read end of its stdout+stderr
  int beat_fd = -1;       // our end of its heartbeat socket (ZEROSTUDIO_HEARTBEAT_FD on its side)
  Clock::time_point last_beat;  // its last heartbeat (or its start)
  bool stalled = false;   // killed by us for a stopped heartbeat
  std::string stopped_after;  // "rank 1 died": the launcher stopped it after another rank's failure
  std::string pending;    // partial line
  std::string last_error; // the last "error: ..." line it printed
  bool running = true;
  int code = 0;           // exit code, or 128 + signal
};

void take_line(Child& c, const std::string& line) {
  if (line.empty()) return;
  if (line.rfind("error: ", 0) == 0) c.last_error = line.substr(7);
  std::cout << "[rank " << c.rank << "] " << line << "\n";
}

void flush_lines(Child& c, bool all) {
  for (std::size_t nl; (nl = c.pending.find_first_of("\n\r")) != std::string::npos;) {
    const std::string line = c.pending.substr(0, nl);
    c.pending.erase(0, nl + 1);
    take_line(c, line);
  }
  if (all && !c.pending.empty()) {
    take_line(c, c.pending);
    c.pending.clear();
  }
  std::cout.flush();
}

/// "signal 9 (SIGKILL: Killed)".
std::string signal_text(int sig) {
  const char* abbrev = sigabbrev_np(sig);
  const char* description = sigdescr_np(sig);
  return "signal " + std::to_string(sig) + (abbrev ? std::string(" (SIG") + abbrev + (description ? std::string(": ") + description : "") + ")" : "");
}

/// What ended a rank, for the launcher's output and the run's events.
std::string ending_of(const Child& c, int status, std::int64_t heartbeat_timeout_s) {
  if (c.stalled)
    return "rank " + std::to_string(c.rank) + " stalled (no heartbeat for " + std::to_string(heartbeat_timeout_s) +
           " s, launch.heartbeat_timeout_s) and was killed";
  // The launcher's own SIGTERM or SIGKILL (or the exit it caused) is no fault of the rank's.
  if (!c.stopped_after.empty())
    return "rank " + std::to_string(c.rank) + " was stopped by the launcher after " + c.stopped_after +
           (WIFSIGNALED(status) ? " (" + signal_text(WTERMSIG(status)) + ")" : " (exit code " + std::to_string(WEXITSTATUS(status)) + ")");
  if (WIFSIGNALED(status))
    return "rank " + std::to_string(c.rank) + " was killed by " + signal_text(WTERMSIG(status)) +
           (WTERMSIG(status) == SIGKILL ? " (out of memory? see dmesg)" : "");
  return "rank " + std::to_string(c.rank) + " exited with code " + std::to_string(WEXITSTATUS(status)) +
         (c.last_error.empty() ? "" : ": " + c.last_error);
}

/// Appends an event to the run's events.jsonl, when rank 0 has created it (at the step of its
/// last event), so the dashboard shows what ended a rank that could not say so itself.
void append_run_event(const std::string& run_dir, const std::string& type, const nlohmann::json& fields) {
  const std::string path = run_dir + "/events.jsonl";
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return;
  std::int64_t step = 0;
  std::string last_type;
  {
    std::ifstream in(path);
    for (std::string line; std::getline(in, line);) {
      const auto e = nlohmann::json::parse(line, nullptr, false);
      if (e.is_object()) {
        step = e.value(train::event::step, step);
        last_type = e.value(train::event::type, "");
      }
    }
  }
  if (type == train::event::run_end && last_type == train::event::run_end) return;  // rank 0 ended it already
  try {
    train::EventLog(path).write(type, step, fields);
  } catch (const std::exception&) {
    // the run folder is gone or read-only: the launcher's output still says it
  }
}

const RegisterCommands kRegisterLaunchCommand{{&kLaunch}};

}  // namespace

/// What every rank of this machine is started with.
struct RankSpawn {
  std::string self;                     ///< this executable
  std::vector<std::string> train_args;  ///< `train CONFIG --run-dir DIR ...`
  int total = 1, local = 1, machine_rank = 0, threads = 1, port = 0;
  std::string ip;          ///< MASTER_ADDR
  std::string store_file;  ///< one machine: the private rendezvous file ("" with several)
};

/// Forks and execs local rank `i` with its environment, its output on a pipe and its heartbeat
/// on a socket.
Child start_rank(const RankSpawn& s, int i) {
  std::string self = s.self;
  std::vector<std::string> args = s.train_args;  // execv takes them as char*
  int fds[2], beat[2];
  if (::pipe(fds) != 0) throw Error(ErrorKind::io, "cannot create a pipe for a rank's output");
  // The heartbeat: a socket (not a pipe), so that a rank whose launcher is gone gets EPIPE from
  // send(MSG_NOSIGNAL) instead of SIGPIPE.
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, beat) != 0)
    throw Error(ErrorKind::io, "cannot create a socket for a rank's heartbeat");
  Child c;
  c.rank = s.machine_rank * s.local + i;
  const pid_t launcher = ::getpid();
  c.pid = ::fork();
  if (c.pid == 0) {
    // A launcher that is killed takes its ranks along: they get SIGTERM, finish the step,
    // save and end (the other ranks get it too, so they agree), or fail within the timeout.
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (::getppid() != launcher) ::_exit(1);  // it died before the line above
    ::dup2(fds[1], STDOUT_FILENO);
    ::dup2(fds[1], STDERR_FILENO);
    ::close(fds[0]);
    ::close(fds[1]);
    ::fcntl(beat[1], F_SETFD, 0);  // this rank's end survives exec; ours (beat[0]) does not
    std::signal(SIGINT, SIG_DFL);
    std::signal(SIGTERM, SIG_DFL);
    const std::map<std::string, std::string> env = {
        {"RANK", std::to_string(c.rank)},        {"WORLD_SIZE", std::to_string(s.total)},
        {"LOCAL_RANK", std::to_string(i)},       {"LOCAL_WORLD_SIZE", std::to_string(s.local)},
        {"MASTER_ADDR", s.ip},                     {"MASTER_PORT", std::to_string(s.port)},
        {"OMP_NUM_THREADS", std::to_string(s.threads)}, {"MKL_NUM_THREADS", std::to_string(s.threads)}};
    for (const auto& [k, v] : env) ::setenv(k.c_str(), v.c_str(), 1);
    if (s.store_file.empty()) ::unsetenv("ZEROSTUDIO_STORE_FILE");
    else ::setenv("ZEROSTUDIO_STORE_FILE", s.store_file.c_str(), 1);
    ::setenv("ZEROSTUDIO_LAUNCHER_PID", std::to_string(launcher).c_str(), 1);  // whether it is still there
    ::setenv("ZEROSTUDIO_HEARTBEAT_FD", std::to_string(beat[1]).c_str(), 1);
    std::vector<char*> argv{self.data()};
    for (auto& arg : args) argv.push_back(arg.data());
    argv.push_back(nullptr);
    ::execv(self.c_str(), argv.data());
    std::perror("zerostudio launch: exec");
    ::_exit(127);
  }
  ::close(fds[1]);
  ::close(beat[1]);
  if (c.pid < 0) throw Error(ErrorKind::io, "cannot start rank " + std::to_string(c.rank));
  c.fd = fds[0];
  c.beat_fd = beat[0];
  ::fcntl(c.beat_fd, F_SETFL, ::fcntl(c.beat_fd, F_GETFL) | O_NONBLOCK);
  c.last_beat = Clock::now();
  return c;
}

/// Follows the ranks until all have ended: passes their output and signals on, kills a rank
/// whose heartbeat stopped, and when one fails stops the others (SIGTERM, SIGKILL after
/// launch.failure_grace_s). Returns the first failing rank's exit code (0: all finished).
int supervise(std::vector<Child>& children, const config::LaunchConfig& lc, const std::string& run_dir) {
  int first_failure = 0;
  std::string failure_cause;  // "rank 1 failed": what made the launcher end the others
  int forwarded = 0;
  Clock::time_point kill_at = Clock::time_point::max();
  const auto heartbeat_timeout = std::chrono::seconds(lc.heartbeat_timeout_s);
  Clock::time_point last_round = Clock::now();
  for (;;) {
    // Pass signals on: the first politely, a second one as SIGKILL.
    if (g_signal_count > forwarded) {
      forwarded = g_signal_count;
      const int sig = forwarded > 1 ? SIGKILL : g_signal.load();
      for (auto& c : children)
        if (c.running) ::kill(c.pid, sig);
    }
    std::vector<pollfd> fds;
    for (auto& c : children) {
      if (c.fd >= 0) fds.push_back({c.fd, POLLIN, 0});
      if (c.beat_fd >= 0) fds.push_back({c.beat_fd, POLLIN, 0});
    }
    if (!fds.empty()) ::poll(fds.data(), fds.size(), 200);
    const auto now = Clock::now();
    // A launcher that was itself stopped (Ctrl-Z, a frozen machine) heard no heartbeats either:
    // what it missed meanwhile does not count against the ranks.
    if (now - last_round > std::chrono::seconds(2))
      for (auto& c : children) c.last_beat += now - last_round;
    last_round = now;
    for (auto& c : children) {
      for (const auto& p : fds) {
        if (!(p.revents & (POLLIN | POLLHUP | POLLERR))) continue;
        char buf[4096];
        if (p.fd == c.fd && c.fd >= 0) {
          const ssize_t got = ::read(c.fd, buf, sizeof buf);
          if (got > 0) {
            c.pending.append(buf, static_cast<std::size_t>(got));
            flush_lines(c, false);
          } else if (got == 0) {
            flush_lines(c, true);
            ::close(c.fd);
            c.fd = -1;
          }
        } else if (p.fd == c.beat_fd && c.beat_fd >= 0) {
          const ssize_t got = ::read(c.beat_fd, buf, sizeof buf);
          if (got > 0) {
            c.last_beat = now;
          } else if (got == 0 || (errno != EAGAIN && errno != EINTR)) {
            ::close(c.beat_fd);  // it exited (or closed its end): waitpid says how
            c.beat_fd = -1;
          }
        }
      }
    }
    // A rank whose heartbeat stopped is stalled (stopped, frozen, swapped out): dead to the others,
    // who wait for it in a collective that no socket error ends. It is killed like a dead rank.
    for (auto& c : children)
      if (c.running && !c.stalled && c.beat_fd >= 0 && now - c.last_beat > heartbeat_timeout) {
        c.stalled = true;
        std::cout << "[launcher] rank " << c.rank << " sent no heartbeat for " << lc.heartbeat_timeout_s
                  << " s (launch.heartbeat_timeout_s): it stalled; killing it\n";
        std::cout.flush();
        ::kill(c.pid, SIGKILL);
      }
    bool any_running = false;
    for (auto& c : children) {
      if (!c.running) continue;
      int status = 0;
      if (::waitpid(c.pid, &status, WNOHANG) == c.pid) {
        c.running = false;
        c.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        if (c.code != 0) {
          if (c.fd >= 0) {  // its last words first: they name the error
            char buf[4096];
            for (ssize_t got; (got = ::read(c.fd, buf, sizeof buf)) > 0;) c.pending.append(buf, static_cast<std::size_t>(got));
            flush_lines(c, true);
            ::close(c.fd);
            c.fd = -1;
          }
          const std::string ending = ending_of(c, status, lc.heartbeat_timeout_s);
          std::cout << "[launcher] " << ending << "\n";
          std::cout.flush();
          // A checkpoint that could not be saved ends every rank at once, agreed, and rank 0 has
          // said so in the events. Otherwise rank 0 reports its own errors; a killed rank 0 and
          // the other ranks cannot.
          const bool save_failed = WIFEXITED(status) && c.code == train::kSaveFailedExit;
          // A rank the launcher ended is a log line: the first failure stays the run's error.
          if (!c.stopped_after.empty())
            append_run_event(run_dir, train::event::log,
                             {{train::event::message, ending}, {"rank", c.rank}, {"source", "launcher"}});
          else if (!save_failed && (c.rank != 0 || WIFSIGNALED(status)))
            append_run_event(run_dir, train::event::error,
                             {{train::event::message, ending}, {"rank", c.rank}, {"source", "launcher"}});
          if (first_failure == 0) {
            first_failure = c.code;
            if (save_failed) {
              // The others end with it on their own, agreed; wait as long as their collectives may.
              kill_at = Clock::now() + std::chrono::seconds(lc.timeout_s + 15);
            } else {
              // The others cannot finish a step without it: tell them to stop now, give them a
              // moment to write their logs, then kill what is left (as torchrun's agent does).
              bool told = false;
              failure_cause = "rank " + std::to_string(c.rank) +
                              (c.stalled ? " stalled" : WIFSIGNALED(status) ? " was killed" : " failed");
              for (auto& o : children)
                if (o.running && o.pid != c.pid) {
                  // One that has already ended (not yet reaped) ended on its own: its own words.
                  siginfo_t info{};
                  const bool ended = ::waitid(P_PID, static_cast<id_t>(o.pid), &info, WEXITED | WNOHANG | WNOWAIT) == 0 &&
                                     info.si_pid == o.pid;
                  // So has one that printed an error of its own (not a collective that broke under
                  // it) and is on its way out, freeing its model or flushing its logs, when the rank
                  // that waited for it in a collective is reaped first. failure_grace_s still holds.
                  if (ended || (!o.last_error.empty() && !comm::is_collective_failure(o.last_error))) continue;
                  ::kill(o.pid, SIGTERM);
                  o.stopped_after = failure_cause;
                  told = true;
                }
              if (told) {
                std::cout << "[launcher] stopping the other ranks (SIGTERM; killed after " << lc.failure_grace_s
                          << " s, launch.failure_grace_s)\n";
                std::cout.flush();
              }
              kill_at = Clock::now() + std::chrono::seconds(lc.failure_grace_s);
            }
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
    if (Clock::now() > kill_at) {
      for (auto& c : children)
        if (c.running) {
          std::cout << "[launcher] rank " << c.rank << " still running after the failure; killing it\n";
          if (c.stopped_after.empty()) c.stopped_after = failure_cause;
          ::kill(c.pid, SIGKILL);
        }
      kill_at = Clock::time_point::max();
    }
  }
  return first_failure;
}

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
  // Every rank must agree on the run directory: the launcher decides it once and passes it on.
  const train::RunDirectory run_dir =
      train::resolve_run_dir(loaded.config, {a.get("run_dir"), a.get("resume"), std::filesystem::path(file).stem().string()});
  if (machines > 1 && run_dir.generated)
    throw UsageError("with several machines, every machine needs the same run directory: pass --run-dir DIR (on a "
                     "shared disk) or set logging.run_name");
  // Where the ranks train, and the refusal of a full-size model on the CPU, come first (as in train).
  const doctor::DevicePlan plan = doctor::plan_device(loaded.config, local);
  std::cout << "[launcher] device: " << plan.text() << "\n" << std::flush;
  if (plan.needs_consent() && !a.has("allow_cpu"))
    throw Error(ErrorKind::config, plan.consent_message(file, "pass --allow-cpu"));
  config::require_trainable(loaded, run_dir.path);  // refused here, before any rank starts
  train_args.insert(train_args.end(), {"--run-dir", run_dir.path});
  if (a.has("resume")) train_args.insert(train_args.end(), {"--resume", a.get("resume")});

  char self[4096];
  const ssize_t n = ::readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) throw Error(ErrorKind::io, "cannot find the zerostudio executable (/proc/self/exe)");
  self[n] = '\0';

  // One machine: the ranks meet through a file in a private folder (mode 0700, under $TMPDIR, not
  // the run folder, which may be on NFS), so no port is open to other machines. Several machines:
  // rank 0's TCPStore at --main_process_ip:--main_process_port.
  struct StoreFolder {
    std::string dir;
    ~StoreFolder() {
      std::error_code ec;
      if (!dir.empty()) io::remove_tree(dir, ec);  // never std::filesystem::remove_all (atomic_file.h)
    }
  } store;
  if (machines == 1) {
    const char* tmp = std::getenv("TMPDIR");
    std::string pattern = std::string(tmp && *tmp ? tmp : "/tmp") + "/zerostudio-store-XXXXXX";
    if (!::mkdtemp(pattern.data()))
      throw Error(ErrorKind::io, pattern + ": cannot create the ranks' private rendezvous folder: " + std::strerror(errno) +
                                     "; set TMPDIR to a writable folder");
    store.dir = pattern;
  }
  const std::string store_file = store.dir.empty() ? "" : store.dir + "/store";
  std::cout << "[launcher] starting " << local << " of " << total << " ranks on machine " << machine_rank << " ("
            << threads << " threads each, rendezvous "
            << (store_file.empty() ? ip + ":" + std::to_string(port) : "through " + store_file + ", no port") << ")\n";
  std::cout.flush();
  std::signal(SIGINT, on_launcher_signal);
  std::signal(SIGTERM, on_launcher_signal);
  std::vector<Child> children;
  RankSpawn spawn{self, train_args, total, local, machine_rank, threads, port, ip, store_file};
  for (int i = 0; i < local; ++i) children.push_back(start_rank(spawn, i));

  const int first_failure = supervise(children, loaded.config.launch, run_dir.path);
  for (auto& c : children)
    if (c.beat_fd >= 0) ::close(c.beat_fd);
  std::signal(SIGINT, SIG_DFL);
  std::signal(SIGTERM, SIG_DFL);
  if (first_failure && first_failure != train::kSaveFailedExit)  // when rank 0 could not
    append_run_event(run_dir.path, train::event::run_end, {{train::event::reason, train::event::reason_error}});
  std::cout << "[launcher] " << (first_failure ? "failed with exit code " + std::to_string(first_failure) : "all ranks finished")
            << "\n";
  return first_failure;
}

}  // namespace zs::cli
