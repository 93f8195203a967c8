// `zerostudio queue`: the job queue shared with the GUI (train/job_queue.h) — add, list,
// reorder, stop, remove — and the runner that works through it (queue_runner.cpp).
#include <ctime>
#include <iomanip>
#include <iostream>
#include <map>
#include <sstream>

#include <nlohmann/json.hpp>

#include "arg_parser.h"
#include "commands.h"
#include "config/config_loader.h"
#include "core/error.h"
#include "estimate/memory_estimator.h"
#include "queue_runner.h"
#include "train/job_queue.h"

namespace zs::cli {
namespace {

const CommandSpec kQueueAdd{
    "queue add", "FILE [--set KEY=VALUE ...] [--num_processes N] [--gpu-memory SIZE]",
    "Add a training job: the config (with --set applied) is checked and copied, and the job's run\n"
    "folder is created under its logging.runs_root.",
    "The job runs from its copy, so later edits of FILE do not change it; relative paths in it are\n"
    "read from the folder you add it from. A job whose memory estimate does not fit the card\n"
    "(--gpu-memory, else the detected GPU) is flagged, not refused.",
    {{"set", "KEY=VALUE", "Override one key, validated by the schema (repeatable)", true},
     {"num_processes", "N", "Ranks on this machine (default: launch.num_processes)"},
     {"gpu_memory", "SIZE", "Device memory to check the estimate against, e.g. 24GiB"}},
    1, 1};

const CommandSpec kQueueList{"queue list", "[--json]", "The jobs in run order with their state.",
                             "States: waiting, running, finished, failed (with its exit code and last error),\n"
                             "stopped, and interrupted (marked running, but nothing holds it: it resumes from\n"
                             "its newest checkpoint at the next `queue run`).",
                             {{"json", "", "Print the queue as JSON"}}, 0, 0};

const CommandSpec kQueueRemove{"queue remove", "ID", "Remove a job that is not running (its run folder stays).", "", {}, 1, 1};
const CommandSpec kQueueMove{"queue move", "ID POSITION", "Move a job to POSITION (1 = first).", "", {}, 2, 2};
const CommandSpec kQueueStop{"queue stop", "ID",
                             "Stop a job: a running one saves a checkpoint and ends as stopped; a waiting one\n"
                             "is skipped. `queue retry ID` puts it back.",
                             "", {}, 1, 1};
const CommandSpec kQueueRetry{"queue retry", "ID",
                              "Put a stopped, failed or finished job back to waiting; it resumes from its newest\n"
                              "checkpoint.",
                              "", {}, 1, 1};
const CommandSpec kQueuePause{"queue pause", "", "Start no new job (the running one goes on).", "", {}, 0, 0};
const CommandSpec kQueueUnpause{"queue unpause", "", "Start jobs again after `queue pause`.", "", {}, 0, 0};
const CommandSpec kQueueRun{
    "queue run", "[--watch] [--stop-on-failure]",
    "Run the waiting jobs one after another; exit 0 when none is left.",
    "One runner per machine: a second `queue run` waits for the first. Each job runs as\n"
    "`zerostudio train COPY --run-dir RUN --resume auto` (`launch` for several ranks) with its output in\n"
    "RUN/logs/job.log. A job that was running when its runner or the machine went down resumes from\n"
    "its newest checkpoint. Ctrl-C (SIGINT, SIGTERM, SIGHUP) stops the running job with a checkpoint\n"
    "and leaves it waiting. Exit codes: 0 no job left (or a signal while no job ran), 1 a job failed\n"
    "with --stop-on-failure, 2 bad usage, 130 a signal stopped a running job (it waits again).",
    {{"watch", "", "Keep waiting for new jobs instead of exiting"},
     {"stop_on_failure", "", "Stop at the first failed job"}},
    0, 0};
const CommandSpec kQueue{"queue", "{add,list,remove,move,stop,retry,pause,unpause,run} ...",
                         "The job queue shared with the GUI (in $XDG_CONFIG_HOME/zerostudio/queue.json).",
                         "Run `zerostudio queue SUBCOMMAND --help` for each one's options.", {}, 0, 0};

const RegisterCommands kRegisterQueueCommand{
    {&kQueueAdd, &kQueueList, &kQueueRemove, &kQueueMove, &kQueueStop, &kQueueRetry, &kQueuePause, &kQueueUnpause, &kQueueRun, &kQueue}};

std::int64_t job_id(const std::string& text) {
  try {
    std::size_t used = 0;
    const long long id = std::stoll(text, &used);
    if (used == text.size() && id > 0) return id;
  } catch (const std::exception&) {
  }
  throw UsageError("'" + text + "' is not a job number (zerostudio queue list shows them)");
}

std::string clock_text(std::int64_t t) {
  if (t <= 0) return "-";
  const std::time_t tt = static_cast<std::time_t>(t);
  std::tm tm{};
  localtime_r(&tt, &tm);
  std::ostringstream s;
  s << std::put_time(&tm, "%m-%d %H:%M");
  return s.str();
}

int queue_add(const ParsedArgs& a) {
  train::JobRequest r;
  r.config_file = a.positional()[0];
  r.overrides = a.all("set");
  r.num_processes = static_cast<int>(a.get_int("num_processes", 0, 1));
  const config::LoadedConfig loaded = config::load_config_file(r.config_file, r.overrides);  // problems first
  print_warnings(loaded.warnings);
  r.gpu_memory = a.has("gpu_memory") ? estimate::parse_bytes(a.get("gpu_memory")) : -1;
  const train::QueueJob job = train::JobQueue().add(r);
  std::cout << "added job " << job.id << ": " << job.name << " (" << job.num_processes << " rank"
            << (job.num_processes == 1 ? "" : "s") << "), run folder " << job.run_dir << "\n";
  if (!job.fit_note.empty()) std::cerr << "warning: job " << job.id << " may not fit: " << job.fit_note << "\n";
  return 0;
}

int queue_list(const ParsedArgs& a) {
  const train::JobQueue queue;
  const train::QueueState st = queue.read();
  if (a.has("json")) {
    nlohmann::json jobs = nlohmann::json::array();
    for (const auto& j : st.jobs)
      jobs.push_back({{"id", j.id}, {"name", j.name}, {"state", queue.shown_state(j)}, {"num_processes", j.num_processes},
                      {"config", j.config}, {"source", j.source}, {"run_dir", j.run_dir}, {"exit_code", j.exit_code},
                      {"last_error", j.last_error}, {"fit_note", j.fit_note}, {"starts", j.starts},
                      {"added_at", j.added_at}, {"started_at", j.started_at}, {"ended_at", j.ended_at}});
    std::cout << nlohmann::json{{"paused", st.paused}, {"runner_active", queue.runner_active()}, {"jobs", jobs}}.dump(2)
              << "\n";
    return 0;
  }
  std::cout << "queue " << queue.file() << (st.paused ? " (paused)" : "")
            << (queue.runner_active() ? ", a runner is working through it" : "") << "\n";
  if (st.jobs.empty()) {
    std::cout << "no jobs (zerostudio queue add CONFIG)\n";
    return 0;
  }
  std::cout << std::left << std::setw(5) << "ID" << std::setw(13) << "STATE" << std::setw(6) << "RANKS" << std::setw(13)
            << "STARTED" << "NAME\n";
  for (const auto& j : st.jobs) {
    std::string state = queue.shown_state(j);
    if (j.state == train::JobState::failed) state += " (" + std::to_string(j.exit_code) + ")";
    std::cout << std::left << std::setw(5) << j.id << std::setw(13) << state << std::setw(6) << j.num_processes
              << std::setw(13) << clock_text(j.started_at) << j.name << "\n";
    if (j.state == train::JobState::failed && !j.last_error.empty()) std::cout << "     error: " << j.last_error << "\n";
    if (!j.fit_note.empty()) std::cout << "     may not fit: " << j.fit_note << "\n";
  }
  return 0;
}

int queue_remove(const ParsedArgs& a) {
  train::JobQueue().remove(job_id(a.positional()[0]));
  std::cout << "removed job " << a.positional()[0] << "\n";
  return 0;
}

int queue_move(const ParsedArgs& a) {
  const std::int64_t position = job_id(a.positional()[1]);
  train::JobQueue().move(job_id(a.positional()[0]), static_cast<std::size_t>(position - 1));
  return 0;
}

int queue_stop(const ParsedArgs& a) {
  train::JobQueue().request_stop(job_id(a.positional()[0]));
  std::cout << "asked job " << a.positional()[0] << " to stop\n";
  return 0;
}

int queue_retry(const ParsedArgs& a) {
  train::JobQueue().requeue(job_id(a.positional()[0]));
  return 0;
}

int queue_pause(const ParsedArgs&) {
  train::JobQueue().set_paused(true);
  return 0;
}

int queue_unpause(const ParsedArgs&) {
  train::JobQueue().set_paused(false);
  return 0;
}

int queue_run(const ParsedArgs& a) {
  QueueRunOptions o;
  o.watch = a.has("watch");
  o.stop_on_failure = a.has("stop_on_failure");
  return run_queue(train::JobQueue(), o);
}

}  // namespace

int run_queue_command(const std::vector<std::string>& args) {
  if (args.empty()) {
    std::cerr << kQueue.help();
    return 2;
  }
  if (args[0] == "--help" || args[0] == "-h") {
    std::cout << kQueue.help();
    return 0;
  }
  struct Entry {
    const CommandSpec* spec;
    int (*run)(const ParsedArgs&);
  };
  const std::map<std::string, Entry> table = {{"add", {&kQueueAdd, queue_add}},         {"list", {&kQueueList, queue_list}},
                                              {"remove", {&kQueueRemove, queue_remove}}, {"move", {&kQueueMove, queue_move}},
                                              {"stop", {&kQueueStop, queue_stop}},       {"retry", {&kQueueRetry, queue_retry}},
                                              {"pause", {&kQueuePause, queue_pause}},    {"unpause", {&kQueueUnpause, queue_unpause}},
                                              {"run", {&kQueueRun, queue_run}}};
  const auto it = table.find(args[0]);
  if (it == table.end())
    throw UsageError("unknown queue subcommand '" + args[0] + "' (add, list, remove, move, stop, retry, pause, unpause, run)");
  const ParsedArgs parsed = parse_args(*it->second.spec, std::vector<std::string>(args.begin() + 1, args.end()));
  if (parsed.help) {
    std::cout << it->second.spec->help();
    return 0;
  }
  return it->second.run(parsed);
}

}  // namespace zs::cli
