// `zerostudio train` and `zerostudio make-dataset`.
#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <optional>
#include <thread>
#include <utility>

#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "arg_parser.h"
#include "commands.h"
#include "config/config_loader.h"
#include "config/trainability.h"
#include "core/build_info.h"
#include "data/shapes.h"
#include "doctor/system_check.h"
#include "comm/communicator.h"
#include "train/event_types.h"
#include "train/run_directory.h"
#include "train/trainer.h"

namespace zs::cli {

namespace {

const CommandSpec kTrain{
    "train", "FILE [--set KEY=VALUE ...] [--run-dir DIR] [--resume latest|auto|CHECKPOINT]",
    "Train headless with a trainer config, writing the run directory (events.jsonl, samples, checkpoints).",
    "Ctrl-C (SIGINT) or SIGTERM finishes the current step, writes a checkpoint and exits; a second\n"
    "Ctrl-C stops at once. --resume continues a run in its own directory: `latest` picks its newest\n"
    "intact checkpoint; `auto` does the same when there is one and otherwise starts the run (for jobs\n"
    "that are started by the same command again and again); keys that define the model, data and\n"
    "optimizer must not change. Exit codes: 0 done, 1 an error (the message names it), 2 bad usage,\n"
    "3 the run ended without its newest checkpoint on disk (checkpointing.on_save_failure; the message\n"
    "names the newest saved one).",
    {{"set", "KEY=VALUE", "Override one key, validated by the schema (repeatable)", true},
     {"run_dir", "DIR", "Run directory (default: logging.runs_root/logging.run_name or CONFIG-DATE-TIME)"},
     {"resume", "latest|auto|CHECKPOINT",
      "Continue from the run directory's newest checkpoint (auto: or start when it has none) or from a checkpoint folder"},
     {"allow_cpu", "", "Train a full-size model (500 M parameters and more) on the CPU, which is refused otherwise"}},
    1, 1};

const CommandSpec kMakeDataset{
    "make-dataset", "shapes --out DIR [--count N] [--size S] [--seed K]",
    "Generate the demo dataset of coloured shapes in the flat-files layout (images/ + captions/).",
    "", {{"out", "DIR", "Folder to create (must not exist or be empty)"},
         {"count", "N", "Number of images (default 2048)"},
         {"size", "S", "Image side in pixels (default 32)"},
         {"seed", "K", "Random seed (default 0)"}},
    1, 1};

std::atomic<train::TrainerCommands*> g_commands{nullptr};
std::atomic<int> g_signals{0};

extern "C" void on_stop_signal(int sig) {
  if (g_signals.fetch_add(1) > 0) {  // second signal: stop now
    std::signal(sig, SIG_DFL);
    std::raise(sig);
    return;
  }
  if (auto* c = g_commands.load()) c->request_stop();
}

std::string format_duration(double s) {
  const long t = static_cast<long>(s + 0.5);
  char buf[32];
  if (t >= 3600) std::snprintf(buf, sizeof buf, "%ld:%02ld:%02ld", t / 3600, (t / 60) % 60, t % 60);
  else std::snprintf(buf, sizeof buf, "%ld:%02ld", t / 60, t % 60);
  return buf;
}

/// A one-line progress bar on a terminal; a line every 5 % otherwise.
class ProgressBar {
 public:
  ProgressBar() : tty_(isatty(STDERR_FILENO) != 0) {}
  void update(std::int64_t step, std::int64_t total, double loss, double s_per_step) {
    avg_ = avg_ == 0 ? s_per_step : 0.9 * avg_ + 0.1 * s_per_step;
    const double eta = avg_ * static_cast<double>(total - step);
    const int width = 30;
    const int filled = static_cast<int>(width * step / std::max<std::int64_t>(total, 1));
    char line[256];
    std::snprintf(line, sizeof line, "[%s%s] %lld/%lld  loss %.4f  %.2f s/step  ETA %s",
                  std::string(static_cast<std::size_t>(filled), '#').c_str(),
                  std::string(static_cast<std::size_t>(width - filled), '.').c_str(), static_cast<long long>(step),
                  static_cast<long long>(total), loss, avg_, format_duration(eta).c_str());
    if (tty_) {
      std::fprintf(stderr, "\r%s\033[K", line);
      shown_ = true;
    } else if (step == total || step * 20 / std::max<std::int64_t>(total, 1) != last_bucket_) {
      last_bucket_ = step * 20 / std::max<std::int64_t>(total, 1);
      std::fprintf(stderr, "%s\n", line);
    }
    std::fflush(stderr);
  }
  /// Prints a message on its own line, above the bar.
  void message(const std::string& text) {
    if (tty_ && shown_) std::fprintf(stderr, "\r\033[K");
    std::fprintf(stderr, "%s\n", text.c_str());
    std::fflush(stderr);
  }
  void finish() {
    if (tty_ && shown_) std::fprintf(stderr, "\n");
  }

 private:
  bool tty_;
  bool shown_ = false;
  double avg_ = 0;
  std::int64_t last_bucket_ = -1;
};

/// A rank of `zerostudio launch` sends its launcher a byte twice a second, from a thread of its own,
/// on the socket ZEROSTUDIO_HEARTBEAT_FD names: a rank that is stopped or frozen falls silent, and the
/// launcher ends the run after launch.heartbeat_timeout_s instead of leaving the others waiting in
/// a collective. Ranks started by torchrun or srun have no such socket and beat nothing.
class LauncherHeartbeat {
 public:
  LauncherHeartbeat() {
    const char* fd = std::getenv("ZEROSTUDIO_HEARTBEAT_FD");
    if (!fd || !*fd) return;
    fd_ = std::atoi(fd);
    ::unsetenv("ZEROSTUDIO_HEARTBEAT_FD");  // not for processes this rank may start
    ::fcntl(fd_, F_SETFD, FD_CLOEXEC);
    thread_ = std::thread([this] {
      while (!stop_.load()) {
        // MSG_NOSIGNAL: a launcher that is gone gives EPIPE, not SIGPIPE; DONTWAIT: never blocks.
        if (::send(fd_, "b", 1, MSG_NOSIGNAL | MSG_DONTWAIT) < 0 && errno == EPIPE) break;
        for (int i = 0; i < 5 && !stop_.load(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
    });
  }
  ~LauncherHeartbeat() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
    if (fd_ >= 0) ::close(fd_);
  }
  LauncherHeartbeat(const LauncherHeartbeat&) = delete;
  LauncherHeartbeat& operator=(const LauncherHeartbeat&) = delete;

 private:
  int fd_ = -1;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

const RegisterCommands kRegisterTrainCommand{{&kTrain, &kMakeDataset}};

}  // namespace

std::optional<std::pair<int, std::int64_t>> rank_and_step(const char* name) {
  const char* f = std::getenv(name);
  if (!f) return std::nullopt;
  const std::string v = f;
  const auto colon = v.find(':');
  if (colon == std::string::npos) return std::nullopt;
  return std::make_pair(std::stoi(v.substr(0, colon)), std::stoll(v.substr(colon + 1)));
}

int run_train_command(const std::vector<std::string>& args) {
  const ParsedArgs a = parse_args(kTrain, args);
  if (a.help) {
    std::cout << kTrain.help();
    return 0;
  }
  const LauncherHeartbeat heartbeat;  // first: the launcher counts from our start
  const std::string file = a.positional()[0];
  const config::LoadedConfig loaded = config::load_config_file(file, a.all("set"));
  print_warnings(loaded.warnings);
  // Where it trains, said before it starts; a full-size model on the CPU only with --allow-cpu.
  // The ranks of `launch` were told by their launcher.
  if (!std::getenv("RANK")) {
    const doctor::DevicePlan plan = doctor::plan_device(loaded.config, 1);
    std::cout << "device: " << plan.text() << "\n" << std::flush;  // before the run's own lines
    if (plan.needs_consent() && !a.has("allow_cpu"))
      throw Error(ErrorKind::config, plan.consent_message(file, "pass --allow-cpu"));
  }

  // Ranks of `zerostudio launch` on one machine meet through a file in the launcher's private
  // folder, which the launcher removes at the end. When the launcher was killed, the ranks do:
  // the last FileStore to go removes the file (on whichever thread lets go of it last), and a
  // rank that finds the folder empty within a moment removes it.
  struct StoreFolder {
    ~StoreFolder() {
      const char* f = std::getenv("ZEROSTUDIO_STORE_FILE");
      const char* launcher = std::getenv("ZEROSTUDIO_LAUNCHER_PID");
      if (!f || !*f || !launcher || std::atol(launcher) == static_cast<long>(::getppid())) return;
      const std::string folder = std::filesystem::path(f).parent_path().string();
      for (int i = 0; i < 40 && ::rmdir(folder.c_str()) != 0 && errno == ENOTEMPTY; ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  } store_folder;
  ProgressBar bar;
  train::TrainerOptions options;
  // Tests make one rank's checkpoint write fail (ZEROSTUDIO_FAIL_SAVE=RANK:STEP[:TIMES]) or the rank
  // itself fail (ZEROSTUDIO_FAIL_AT=RANK:STEP).
  options.fail_save = rank_and_step("ZEROSTUDIO_FAIL_SAVE");
  if (const char* f = std::getenv("ZEROSTUDIO_FAIL_SAVE"); f && std::count(f, f + std::strlen(f), ':') == 2)
    options.fail_save_times = std::atoi(std::strrchr(f, ':') + 1);  // RANK:STEP:TIMES
  options.fail_at = rank_and_step("ZEROSTUDIO_FAIL_AT");
  // Tests kill ranks inside a save: ZEROSTUDIO_ANNOUNCE_SAVES=1 prints a line as each save starts.
  if (const char* an = std::getenv("ZEROSTUDIO_ANNOUNCE_SAVES"); an && std::string(an) == "1")
    options.on_save_start = [](const std::string& tag) {
      std::fprintf(stderr, "test hook: saving %s\n", tag.c_str());
      std::fflush(stderr);
    };
  if (const char* r = std::getenv("ZEROSTUDIO_SAVE_RETRY_SECONDS"); r && *r)  // tests: retry sooner than every minute
    options.save_retry_interval = std::chrono::milliseconds(static_cast<long>(std::stod(r) * 1000));
  const train::RunDirectory run_dir = train::resolve_run_dir(
      loaded.config, {a.get("run_dir"), a.get("resume"), std::filesystem::path(file).stem().string()});
  // Started by `zerostudio launch`, torchrun or srun: join the world as the rank they describe.
  const auto info = comm::rendezvous_from_env();
  const bool several = info && info->world_size > 1;
  if (several && run_dir.generated)
    throw UsageError("with several ranks, every rank needs the same run directory: pass --run-dir DIR "
                     "(zerostudio launch picks one for you) or set logging.run_name");
  config::require_trainable(loaded, run_dir.path);  // before any rank connects or creates anything
  options.run_dir = run_dir.path;
  bool main_rank = true;
  if (several) {
    const auto& c = loaded.config;
    const bool cuda = !c.launch.use_cpu && build_info().cuda_available;
    options.comm = comm::Communicator::connect(*info, std::chrono::seconds(c.launch.timeout_s), cuda);
    main_rank = info->rank == 0;
  }
  options.resume = a.get("resume");
  options.name_hint = std::filesystem::path(file).stem().string();
  options.on_step = [&bar, main_rank](std::int64_t step, std::int64_t total, double loss, double sps) {
    if (main_rank) bar.update(step, total, loss, sps);
  };
  options.on_event = [&bar](const nlohmann::json& e) {
    const std::string type = e.value(train::event::type, "");
    if (type == train::event::warning) bar.message("warning: " + e.value(train::event::message, ""));
    else if (type == train::event::log) bar.message(e.value(train::event::message, ""));
    else if (type == train::event::samples) bar.message("samples: " + e.value(train::event::dir, ""));
    else if (type == train::event::checkpoint) bar.message("checkpoint: " + e.value(train::event::path, ""));
    else if (type == train::event::save_failed) bar.message("error: " + e.value(train::event::message, ""));
    else if (type == train::event::run_start) {
      bar.message("run " + e.value("run_dir", "") + ": " + std::to_string(e.value("parameters", 0)) +
                  " parameters on " + e.value("device", "") + ", " + std::to_string(e.value("dataset_size", 0)) + " images, " +
                  std::to_string(e.value("steps_per_epoch", std::int64_t{0})) + " steps per epoch");
      if (e.contains("resumed_from") && e["resumed_from"].is_string())
        bar.message("resumed from " + e["resumed_from"].get<std::string>() + " at step " +
                    std::to_string(e.value("step", std::int64_t{0})));
    }
  };
  train::Trainer trainer(loaded.config, options);
  train::TrainerCommands commands;
  g_commands = &commands;
  g_signals = 0;
  std::signal(SIGINT, on_stop_signal);
  std::signal(SIGTERM, on_stop_signal);
  // Whoever reads our output may go away (a killed launcher, `| head`): training goes on and
  // stops only when asked, instead of dying at the next progress line.
  std::signal(SIGPIPE, SIG_IGN);
  struct Restore {
    ~Restore() {
      std::signal(SIGINT, SIG_DFL);
      std::signal(SIGTERM, SIG_DFL);
      g_commands = nullptr;
    }
  } restore;
  train::RunSummary summary;
  try {
    summary = trainer.run(commands);
  } catch (const train::SaveFailed& e) {
    bar.finish();
    std::cerr << "error: " << e.what() << "\n";
    return train::kSaveFailedExit;
  }
  bar.finish();
  if (main_rank)
    std::cout << (summary.reason == "stopped" ? "stopped" : "finished") << " at step " << summary.step << " (loss "
              << summary.last_loss << "); run directory: " << summary.run_dir << "\n";
  if (summary.last_save_failed) {
    if (main_rank)
      std::cerr << "error: the last checkpoint could not be saved (checkpointing.on_save_failure: continue); the newest "
                   "saved checkpoint is "
                << (summary.newest_checkpoint.empty() ? std::string("none") : summary.newest_checkpoint) << "\n";
    return train::kSaveFailedExit;
  }
  return 0;
}

int run_make_dataset_command(const std::vector<std::string>& args) {
  const ParsedArgs a = parse_args(kMakeDataset, args);
  if (a.help) {
    std::cout << kMakeDataset.help();
    return 0;
  }
  if (a.positional()[0] != "shapes")
    throw UsageError("make-dataset: unknown kind '" + a.positional()[0] + "' (the one kind is 'shapes')");
  if (!a.has("out")) throw UsageError("make-dataset needs --out DIR");
  const long count = a.get_int("count", 2048), size = a.get_int("size", 32), seed = a.get_int("seed", 0);
  ProgressBar bar;
  data::generate_shapes_dataset(a.get("out"), static_cast<int>(count), static_cast<int>(size),
                                static_cast<std::uint64_t>(seed),
                                [&](int done, int total) { if (done % 64 == 0 || done == total) bar.update(done, total, 0, 0); });
  bar.finish();
  std::cout << "wrote " << count << " images to " << a.get("out") << "\n";
  return 0;
}

}  // namespace zs::cli
