#include "queue_runner.h"

#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <thread>
#include <vector>

#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "config/config_loader.h"
#include "config/trainability.h"
#include "core/error.h"
#include "train/control_file.h"

namespace zs::cli {
namespace {

namespace fs = std::filesystem;

std::atomic<int> g_queue_signals{0};

extern "C" void on_queue_signal(int) { g_queue_signals.fetch_add(1); }

void say(const std::string& text) {
  std::cout << text << std::endl;  // a line at a time: the GUI and logs read it as it comes
}

std::string self_exe() {
  std::error_code ec;
  const auto p = fs::read_symlink("/proc/self/exe", ec);
  if (ec) throw Error(ErrorKind::io, "cannot find this program (/proc/self/exe): " + ec.message());
  return p.string();
}

bool has_checkpoint(const std::string& run_dir) {
  std::error_code ec;
  for (fs::directory_iterator it(fs::path(run_dir) / "checkpoints", ec), end; !ec && it != end; it.increment(ec))
    if (fs::exists(it->path() / "meta.json", ec)) return true;
  return false;
}

/// A job cut short before its first checkpoint starts over: `--resume auto` would find a run
/// there without a checkpoint and refuse, so its events move aside (kept, under logs/).
void set_aside_unfinished_start(const std::string& run_dir) {
  std::error_code ec;
  const fs::path events = fs::path(run_dir) / "events.jsonl";
  if (!fs::exists(events, ec) || has_checkpoint(run_dir)) return;
  fs::create_directories(fs::path(run_dir) / "logs", ec);
  fs::rename(events, fs::path(run_dir) / "logs" / ("events-interrupted-" + std::to_string(std::time(nullptr)) + ".jsonl"), ec);
}

/// The last "error: ..." line of the job's log (the text after "error: "), or "".
std::string last_error_line(const std::string& log) {
  std::ifstream in(log, std::ios::binary);
  if (!in) return "";
  in.seekg(0, std::ios::end);
  const std::streamoff size = in.tellg();
  in.seekg(std::max<std::streamoff>(0, size - 65536));
  std::string line, found;
  while (std::getline(in, line)) {
    if (const auto cr = line.rfind('\r'); cr != std::string::npos) line = line.substr(cr + 1);
    if (line.rfind("error: ", 0) == 0) found = line.substr(7);
  }
  return found.size() > 400 ? found.substr(0, 400) + "..." : found;
}

struct JobEnd {
  train::JobState state;
  int exit_code;
  std::string error;
};

/// Why the job's model cannot be trained from ("" when it can): its config loaded and its model
/// files read as `train` reads them (config::require_readable_model), from the folder the job was
/// added from, where its relative paths resolve — before the run folder is created, so a broken
/// model leaves no folder behind (issue 59 item 11). The runner is single-threaded here, so it
/// may step into that folder for the check and back.
std::string refused_model(const train::QueueJob& job) {
  std::error_code ec;
  const fs::path here = fs::current_path(ec);
  if (ec) return std::string("cannot read the runner's working folder: ") + ec.message();
  fs::current_path(job.working_dir, ec);
  if (ec) return job.working_dir + ": cannot enter the folder the job was added from: " + ec.message();
  struct Back {
    const fs::path& to;
    ~Back() {
      std::error_code ignored;
      fs::current_path(to, ignored);
    }
  } back{here};
  try {
    config::require_readable_model(config::load_config_file(job.config));
  } catch (const config::ConfigError& e) {
    std::string m;
    for (const auto& p : e.problems()) m += (m.empty() ? "" : "; ") + p.to_string();
    return m;
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

/// Runs one claimed job to its end.
JobEnd run_job(const train::JobQueue& queue, const train::ClaimedJob& claimed, const QueueRunOptions& o) {
  const train::QueueJob& job = claimed.job;
  if (const std::string refused = refused_model(job); !refused.empty()) return {train::JobState::failed, 1, refused};
  std::error_code ec;
  fs::create_directories(fs::path(job.run_dir) / "logs", ec);
  if (ec) return {train::JobState::failed, 1, job.run_dir + ": cannot create the run folder: " + ec.message()};
  set_aside_unfinished_start(job.run_dir);
  std::vector<std::string> args = {self_exe()};
  if (job.num_processes > 1) args.insert(args.end(), {"launch", "--num_processes", std::to_string(job.num_processes)});
  else args.push_back("train");
  args.insert(args.end(), {job.config, "--run-dir", job.run_dir, "--resume", "auto"});
  const std::string log = (fs::path(job.run_dir) / "logs" / "job.log").string();
  const int log_fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (log_fd < 0) return {train::JobState::failed, 1, log + ": cannot write the job's log: " + std::strerror(errno)};
  const pid_t runner = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(log_fd);
    return {train::JobState::failed, 1, std::string("cannot start the job: ") + std::strerror(errno)};
  }
  if (pid == 0) {
    // Its own process group: Ctrl-C in the runner's terminal reaches the runner, which stops
    // the job once (a second signal would make the trainer stop without its checkpoint).
    ::setpgid(0, 0);
    // A runner that dies takes its job along the gentle way: SIGTERM saves a checkpoint.
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (::getppid() != runner) ::_exit(1);
    ::dup2(log_fd, STDOUT_FILENO);
    ::dup2(log_fd, STDERR_FILENO);
    const int null_fd = ::open("/dev/null", O_RDONLY);
    if (null_fd >= 0) ::dup2(null_fd, STDIN_FILENO);
    // The job's lock lives on in the job's processes while they live, even past the runner.
    ::fcntl(claimed.lock.fd(), F_SETFD, 0);
    for (int s : {SIGINT, SIGTERM, SIGHUP, SIGPIPE}) std::signal(s, SIG_DFL);
    if (::chdir(job.working_dir.c_str()) != 0) {
      const std::string m = "error: " + job.working_dir + ": cannot enter the folder the job was added from: " +
                             std::strerror(errno) + "\n";
      (void)!::write(STDERR_FILENO, m.data(), m.size());
      ::_exit(1);
    }
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    ::execv(argv[0], argv.data());
    const std::string m = std::string("error: cannot start ") + args[0] + ": " + std::strerror(errno) + "\n";
    (void)!::write(STDERR_FILENO, m.data(), m.size());
    ::_exit(127);
  }
  ::setpgid(pid, pid);  // also here: whichever runs first
  ::close(log_fd);
  queue.set_pid(job.id, pid);
  int status = 0;
  int signals_sent = 0;
  bool interrupted = false, stop_asked = false;
  auto next_look = std::chrono::steady_clock::now();
  while (true) {
    const pid_t r = ::waitpid(pid, &status, WNOHANG);
    if (r == pid) break;
    if (r < 0 && errno != EINTR) {
      status = 1 << 8;
      break;
    }
    const int signals = g_queue_signals.load();
    if (signals > signals_sent) {  // the runner is asked to end: the job checkpoints and waits again
      interrupted = true;
      ::kill(pid, SIGTERM);
      signals_sent = signals;
    }
    if (std::chrono::steady_clock::now() >= next_look) {
      next_look += std::chrono::milliseconds(static_cast<long>(o.poll_s * 1000));
      try {
        const train::QueueState st = queue.read();
        const train::QueueJob* now = st.find(job.id);
        if (now && now->stop_requested) {
          stop_asked = true;
          // Written again until the trainer has seen it: a starting trainer resets the file.
          train::ControlState c = train::read_control_file(job.run_dir);
          if (!c.stop) {
            c.stop = true;
            train::write_control_file(job.run_dir, c);
          }
        }
      } catch (const std::exception&) {
        // a damaged queue file: the job goes on; the next write reports it
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  if (interrupted && !stop_asked) return {train::JobState::waiting, code, ""};
  if (code == 0) return {stop_asked ? train::JobState::stopped : train::JobState::finished, 0, ""};
  std::string error = last_error_line(log);
  if (WIFSIGNALED(status) && error.empty())
    error = "killed by signal " + std::to_string(WTERMSIG(status)) + (WTERMSIG(status) == SIGKILL ? " (out of memory? see dmesg)" : "");
  if (error.empty()) error = "exited with code " + std::to_string(code) + "; see " + log;
  return {train::JobState::failed, code, error};
}

}  // namespace

int run_queue(const train::JobQueue& queue, const QueueRunOptions& o) {
  g_queue_signals = 0;
  for (int s : {SIGINT, SIGTERM, SIGHUP}) std::signal(s, on_queue_signal);
  std::signal(SIGPIPE, SIG_IGN);
  struct Restore {
    ~Restore() {
      for (int s : {SIGINT, SIGTERM, SIGHUP}) std::signal(s, SIG_DFL);
    }
  } restore;
  FileLock runner(queue.runner_lock(), FileLock::Wait::no);
  if (!runner.held()) {
    say("another queue runner is working on " + queue.file() + "; waiting for it to finish");
    while (!runner.held()) {
      if (g_queue_signals.load() > 0) return 0;
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      runner = FileLock(queue.runner_lock(), FileLock::Wait::no);
    }
  }
  bool said_waiting = false, cut_short = false;
  int done = 0, failed = 0;
  // One runner claims a job again only when something edited the queue behind it (a job that
  // ends "waiting" ends this runner too); past kMaxClaimsInARow the job fails instead of looping.
  ClaimStreak streak;
  while (g_queue_signals.load() == 0) {
    std::optional<train::ClaimedJob> claimed = queue.claim_next(::getpid());
    if (!claimed) {
      const train::QueueState st = queue.read();
      if (!o.watch) {
        std::size_t waiting = 0;
        for (const auto& j : st.jobs) waiting += j.state == train::JobState::waiting;
        if (st.paused && waiting > 0)
          say("the queue is paused; " + std::to_string(waiting) + " waiting job" + (waiting == 1 ? "" : "s") +
              " not started (zerostudio queue unpause)");
        break;
      }
      if (!said_waiting) say(st.paused ? "the queue is paused; waiting" : "no waiting jobs; waiting for new ones (Ctrl-C ends)");
      said_waiting = true;
      for (int i = 0; i < 10 && g_queue_signals.load() == 0; ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(static_cast<long>(o.poll_s * 100)));
      continue;
    }
    said_waiting = false;
    const train::QueueJob& job = claimed->job;
    if (!streak.allow(job.id)) {
      const std::string error = "claimed " + std::to_string(streak.count()) + " times in a row by one queue runner without " +
                                "ending (the most is " + std::to_string(kMaxClaimsInARow) + "); check " + queue.file() +
                                " and retry it";
      queue.finish(job.id, train::JobState::failed, 1, error);
      claimed->lock.release();
      ++failed;
      say("job " + std::to_string(job.id) + ": failed: " + error);
      if (o.stop_on_failure) return 1;
      continue;
    }
    say("job " + std::to_string(job.id) + " (" + job.name + "): " + (claimed->resumed ? "resuming after an interruption" : "started") +
        ", run folder " + job.run_dir);
    const auto t0 = std::chrono::steady_clock::now();
    const JobEnd end = run_job(queue, *claimed, o);
    queue.finish(job.id, end.state, end.exit_code, end.error);
    claimed->lock.release();
    const long secs = static_cast<long>(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    const std::string took = " after " + std::to_string(secs / 60) + " min " + std::to_string(secs % 60) + " s";
    switch (end.state) {
      case train::JobState::finished: ++done; say("job " + std::to_string(job.id) + ": finished" + took); break;
      case train::JobState::stopped: say("job " + std::to_string(job.id) + ": stopped" + took); break;
      case train::JobState::waiting: cut_short = true; say("job " + std::to_string(job.id) + ": interrupted; it resumes at the next queue run"); break;
      default:
        ++failed;
        say("job " + std::to_string(job.id) + ": failed (exit " + std::to_string(end.exit_code) + "): " + end.error);
        if (o.stop_on_failure) {
          say("stopping the queue (--stop-on-failure)");
          return 1;
        }
    }
  }
  if (g_queue_signals.load() > 0) {
    say("queue runner ended by a signal");
    return cut_short ? 130 : 0;
  }
  say("no waiting jobs left (" + std::to_string(done) + " finished, " + std::to_string(failed) + " failed in this run)");
  return 0;
}

}  // namespace zs::cli
