#include "train/job_queue.h"

#include <algorithm>
#include <limits>
#include <map>
#include <ctime>
#include <filesystem>
#include <system_error>

#include <nlohmann/json.hpp>

#include "config/config_loader.h"
#include "config/config_writer.h"
#include "config/trainability.h"
#include "core/error.h"
#include "core/install_paths.h"
#include "core/memory.h"
#include "core/text.h"
#include "estimate/memory_estimator.h"
#include "io/atomic_file.h"
#include "io/json_file.h"
#include "train/run_directory.h"

namespace zs::train {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr char kFormat[] = "zerostudio-queue";
constexpr int kVersion = 1;

std::int64_t now_s() { return static_cast<std::int64_t>(std::time(nullptr)); }

JobState state_from(const std::string& s, const std::string& file) {
  for (JobState st : {JobState::waiting, JobState::running, JobState::finished, JobState::failed, JobState::stopped})
    if (s == to_string(st)) return st;
  throw Error(ErrorKind::io, file + ": unknown job state '" + s + "'; fix or remove the file");
}

json to_json(const QueueJob& j) {
  return {{"id", j.id},           {"name", j.name},         {"source", j.source},
          {"overrides", j.overrides}, {"config", j.config}, {"run_dir", j.run_dir},
          {"working_dir", j.working_dir}, {"num_processes", j.num_processes}, {"state", to_string(j.state)},
          {"exit_code", j.exit_code}, {"last_error", j.last_error}, {"fit_note", j.fit_note},
          {"added_at", j.added_at},   {"started_at", j.started_at}, {"ended_at", j.ended_at},
          {"starts", j.starts},       {"stop_requested", j.stop_requested}, {"runner_pid", j.runner_pid},
          {"pid", j.pid}};
}

QueueJob job_from(const json& o, const std::string& file) {
  QueueJob j;
  constexpr std::int64_t kIntMax = std::numeric_limits<int>::max(), kInt64Max = std::numeric_limits<std::int64_t>::max();
  // Integers through io::json_int: a float (1e56) is refused, not cast (undefined behaviour).
  const std::string where = file + ": job";
  auto integer = [&](const char* key, std::int64_t fallback, std::int64_t lo, std::int64_t hi) {
    return io::json_int(o, key, fallback, lo, hi, where);
  };
  if (!o.is_object() || !o.contains("id")) throw Error(ErrorKind::io, file + ": a job without an id; fix or remove the file");
  j.id = integer("id", 0, 1, kInt64Max);
  j.name = o.value("name", "");
  j.source = o.value("source", "");
  j.overrides = o.value("overrides", std::vector<std::string>{});
  j.config = o.at("config").get<std::string>();
  j.run_dir = o.at("run_dir").get<std::string>();
  j.working_dir = o.value("working_dir", "");
  j.num_processes = static_cast<int>(integer("num_processes", 1, 1, 4096));
  j.state = state_from(o.value("state", "waiting"), file);
  j.exit_code = static_cast<int>(integer("exit_code", 0, -kIntMax, kIntMax));
  j.last_error = o.value("last_error", "");
  j.fit_note = o.value("fit_note", "");
  j.added_at = integer("added_at", 0, 0, kInt64Max);
  j.started_at = integer("started_at", 0, 0, kInt64Max);
  j.ended_at = integer("ended_at", 0, 0, kInt64Max);
  j.starts = static_cast<int>(integer("starts", 0, 0, kIntMax));
  j.stop_requested = o.value("stop_requested", false);
  j.runner_pid = integer("runner_pid", 0, 0, kInt64Max);
  j.pid = integer("pid", 0, 0, kInt64Max);
  return j;
}

QueueState parse(const std::string& text, const std::string& file) {
  QueueState st;
  try {
    const json o = json::parse(text);
    if (o.value("format", "") != kFormat)
      throw Error(ErrorKind::io, file + ": not a ZeroStudio queue file (no \"format\": \"" + kFormat +
                                     "\"); move it away and the queue starts empty");
    if (io::json_int(o, "version", 0, 0, std::numeric_limits<int>::max(), file) > kVersion)
      throw Error(ErrorKind::io, file + ": written by a newer ZeroStudio (queue version " +
                                     std::to_string(o.value("version", 0)) + "); update this one");
    st.paused = o.value("paused", false);
    st.next_id = io::json_int(o, "next_id", 1, 1, std::numeric_limits<std::int64_t>::max(), file);
    for (const auto& j : o.at("jobs")) st.jobs.push_back(job_from(j, file));
  } catch (const json::exception& e) {
    throw Error(ErrorKind::io, file + ": the queue file is damaged (" + std::string(e.what()) +
                                   "); fix it or move it away and the queue starts empty");
  }
  // Two entries with one id (a pasted job) would be claimed again and again: finish() and
  // set_pid() reach only the first. Refused whole, the file left as it is.
  std::map<std::int64_t, int> seen;
  std::string dup;
  for (const auto& j : st.jobs)
    if (++seen[j.id] == 2) dup += (dup.empty() ? "" : ", ") + std::to_string(j.id);
  if (!dup.empty())
    throw Error(ErrorKind::io, file + ": more than one job has the id " + dup +
                                   "; give each job its own id (or remove the copy) and run again (nothing was changed)");
  for (const auto& j : st.jobs) st.next_id = std::max(st.next_id, j.id + 1);
  return st;
}

std::string serialize(const QueueState& st) {
  json jobs = json::array();
  for (const auto& j : st.jobs) jobs.push_back(to_json(j));
  const json o = {{"format", kFormat}, {"version", kVersion}, {"paused", st.paused}, {"next_id", st.next_id}, {"jobs", jobs}};
  return o.dump(2) + "\n";
}

std::string absolute(const std::string& path, const std::string& base) {
  const fs::path p(path);
  return (p.is_absolute() ? p : fs::path(base) / p).lexically_normal().string();
}

/// Creates a new folder ROOT/BASE (or BASE-2, BASE-3 ...) and returns it: mkdir either creates a
/// folder or fails, so two adds at once never share one.
std::string create_unique_folder(const fs::path& root, const std::string& base) {
  std::error_code ec;
  fs::create_directories(root, ec);
  if (ec) throw Error(ErrorKind::io, root.string() + ": cannot create the runs folder: " + ec.message());
  for (int n = 1; n < 10000; ++n) {
    const fs::path p = root / (n == 1 ? base : base + "-" + std::to_string(n));
    if (fs::create_directory(p, ec)) return p.string();
    if (ec) throw Error(ErrorKind::io, p.string() + ": cannot create the job's run folder: " + ec.message());
  }
  throw Error(ErrorKind::io, root.string() + ": no free name for " + base + "; clear out old runs");
}

/// Why the config's estimate does not fit `gpu_memory` (-1: the detected GPU), or "" (it fits,
/// there is nothing to check against, or the model's architecture cannot be read yet — a model
/// an earlier job makes).
std::string fit_note(const config::TrainerConfig& cfg, const std::string& file, std::int64_t gpu_memory) {
  if (gpu_memory < 0) gpu_memory = cfg.launch.use_cpu ? 0 : gpu_total_bytes(0);
  if (gpu_memory <= 0) return "";
  try {
    estimate::EstimateOptions o = estimate::options_from_config(cfg);
    o.gpu_memory = gpu_memory;
    const auto e = estimate::estimate_memory(models::model_shape(cfg), o);
    if (e.fits) return "";
    return "estimate " + format_bytes(e.gpu.total()) + " per GPU does not fit " + format_bytes(gpu_memory) +
           " (zerostudio estimate " + file + " suggests a setting)";
  } catch (const Error&) {
    return "";
  }
}

bool holds_a_run(const std::string& run_dir) {
  std::error_code ec;
  return fs::exists(fs::path(run_dir) / "events.jsonl", ec);
}

}  // namespace

const char* to_string(JobState state) {
  switch (state) {
    case JobState::waiting: return "waiting";
    case JobState::running: return "running";
    case JobState::finished: return "finished";
    case JobState::failed: return "failed";
    case JobState::stopped: return "stopped";
  }
  return "waiting";
}

QueueJob* QueueState::find(std::int64_t id) {
  for (auto& j : jobs)
    if (j.id == id) return &j;
  return nullptr;
}

const QueueJob* QueueState::find(std::int64_t id) const { return const_cast<QueueState*>(this)->find(id); }

JobQueue::JobQueue(std::string dir) : dir_(std::move(dir)) {}

std::string JobQueue::default_queue_dir() { return xdg_config_dir(); }
std::string JobQueue::file() const { return (fs::path(dir_) / "queue.json").string(); }
std::string JobQueue::runner_lock() const { return (fs::path(dir_) / "runner.lock").string(); }
std::string JobQueue::job_lock(std::int64_t id) const {
  return (fs::path(dir_) / "queue-jobs" / (std::to_string(id) + ".lock")).string();
}

QueueState JobQueue::read() const {
  std::error_code ec;
  if (!fs::exists(file(), ec)) return {};
  return parse(io::read_file(file()), file());  // whole files only: writers rename into place
}

QueueState JobQueue::update(const std::function<void(QueueState&)>& change) const {
  const FileLock lock((fs::path(dir_) / "queue.lock").string());
  QueueState st = read();
  change(st);
  io::write_file_atomic(file(), serialize(st));
  return st;
}

QueueJob JobQueue::add(const JobRequest& request) const {
  const std::string cwd = request.working_dir.empty() ? fs::current_path().string() : request.working_dir;
  const std::string source = absolute(request.config_file, cwd);
  const config::LoadedConfig loaded = config::load_config_file(source, request.overrides);
  const auto& cfg = loaded.config;
  config::require_readable_model(loaded);  // refused before its run folder is reserved (issue 59 item 11)
  // The folder `train` would pick (logging.run_name, else STEM-DATE-TIME under the runs root),
  // made unique: the same config may be queued several times.
  const fs::path named = absolute(resolve_run_dir(cfg, {"", "", fs::path(source).stem().string()}).path, cwd);
  const std::string run_dir = create_unique_folder(named.parent_path(), named.filename().string());
  QueueJob job;
  job.name = fs::path(run_dir).filename().string();
  job.source = source;
  job.overrides = request.overrides;
  job.run_dir = run_dir;
  job.working_dir = cwd;
  job.num_processes = request.num_processes > 0 ? request.num_processes : static_cast<int>(std::max<std::int64_t>(1, cfg.launch.num_processes));
  job.fit_note = fit_note(cfg, source, request.gpu_memory);
  job.added_at = now_s();
  try {
    update([&](QueueState& st) {
      job.id = st.next_id++;
      job.config = (fs::path(dir_) / "queue-jobs" / (std::to_string(job.id) + ".yaml")).string();
      config::save_config(cfg, job.config);
      st.jobs.push_back(job);
    });
  } catch (...) {
    std::error_code ec;
    fs::remove(run_dir, ec);  // still empty
    throw;
  }
  return job;
}

void JobQueue::remove(std::int64_t id) const {
  std::string config, run_dir;
  update([&](QueueState& st) {
    const QueueJob* j = st.find(id);
    if (!j) throw Error(ErrorKind::config, "the queue has no job " + std::to_string(id) + " (zerostudio queue list)");
    if (j->state == JobState::running && job_live(id))
      throw Error(ErrorKind::config, "job " + std::to_string(id) + " is running; stop it first (zerostudio queue stop " +
                                         std::to_string(id) + ")");
    config = j->config;
    run_dir = j->run_dir;
    st.jobs.erase(std::find_if(st.jobs.begin(), st.jobs.end(), [&](const QueueJob& x) { return x.id == id; }));
  });
  std::error_code ec;
  fs::remove(config, ec);
  fs::remove(job_lock(id), ec);
  if (!holds_a_run(run_dir)) fs::remove(run_dir, ec);  // removes only an empty folder
}

void JobQueue::move(std::int64_t id, std::size_t index) const {
  update([&](QueueState& st) {
    auto it = std::find_if(st.jobs.begin(), st.jobs.end(), [&](const QueueJob& x) { return x.id == id; });
    if (it == st.jobs.end()) throw Error(ErrorKind::config, "the queue has no job " + std::to_string(id));
    QueueJob j = std::move(*it);
    st.jobs.erase(it);
    st.jobs.insert(st.jobs.begin() + static_cast<std::ptrdiff_t>(std::min(index, st.jobs.size())), std::move(j));
  });
}

void JobQueue::reorder(const std::vector<std::int64_t>& ids) const {
  update([&](QueueState& st) {
    std::vector<QueueJob> ordered;
    for (std::int64_t id : ids)
      if (QueueJob* j = st.find(id)) ordered.push_back(std::move(*j)), j->id = -1;
    for (auto& j : st.jobs)
      if (j.id != -1) ordered.push_back(std::move(j));
    st.jobs = std::move(ordered);
  });
}

void JobQueue::set_paused(bool paused) const {
  update([&](QueueState& st) { st.paused = paused; });
}

void JobQueue::request_stop(std::int64_t id) const {
  update([&](QueueState& st) {
    QueueJob* j = st.find(id);
    if (!j) throw Error(ErrorKind::config, "the queue has no job " + std::to_string(id));
    if (j->state == JobState::waiting || (j->state == JobState::running && !job_live(id))) j->state = JobState::stopped;
    else if (j->state == JobState::running) j->stop_requested = true;
  });
}

void JobQueue::requeue(std::int64_t id) const {
  update([&](QueueState& st) {
    QueueJob* j = st.find(id);
    if (!j) throw Error(ErrorKind::config, "the queue has no job " + std::to_string(id));
    if (j->state == JobState::running) throw Error(ErrorKind::config, "job " + std::to_string(id) + " is running");
    j->state = JobState::waiting;
    j->stop_requested = false;
  });
}

void JobQueue::replace_config(std::int64_t id, const std::string& yaml) const {
  (void)config::load_config_string(yaml, "job " + std::to_string(id));  // every problem, before any change
  update([&](QueueState& st) {
    const QueueJob* j = st.find(id);
    if (!j) throw Error(ErrorKind::config, "the queue has no job " + std::to_string(id));
    if (j->state != JobState::waiting)
      throw Error(ErrorKind::config, "job " + std::to_string(id) + " is " + to_string(j->state) +
                                         "; only a waiting job's config can change");
    io::write_file_atomic(j->config, yaml);
  });
}

bool JobQueue::runner_active() const { return FileLock::is_held(runner_lock()); }

bool JobQueue::job_live(std::int64_t id) const { return FileLock::is_held(job_lock(id)); }

std::string JobQueue::shown_state(const QueueJob& job) const {
  if (job.state == JobState::running && !job_live(job.id)) return "interrupted";
  return to_string(job.state);
}

std::optional<ClaimedJob> JobQueue::claim_next(std::int64_t runner_pid) const {
  std::optional<ClaimedJob> claimed;
  update([&](QueueState& st) {
    if (st.paused) return;
    for (auto& j : st.jobs) {
      if (j.state != JobState::waiting && j.state != JobState::running) continue;
      FileLock lock(job_lock(j.id), FileLock::Wait::no);
      if (!lock.held()) continue;  // running, and its runner or processes are alive
      const bool resumed = j.state == JobState::running;
      j.state = JobState::running;
      j.starts += 1;
      j.runner_pid = runner_pid;
      j.started_at = now_s();
      j.ended_at = 0;
      j.stop_requested = false;
      claimed = ClaimedJob{j, resumed, std::move(lock)};
      return;
    }
  });
  return claimed;
}

void JobQueue::finish(std::int64_t id, JobState state, int exit_code, const std::string& last_error) const {
  update([&](QueueState& st) {
    QueueJob* j = st.find(id);
    if (!j) return;  // removed meanwhile (the GUI refuses that, an edited file may not)
    j->state = state;
    j->exit_code = exit_code;
    j->last_error = last_error;
    j->ended_at = now_s();
    j->stop_requested = false;
    j->pid = 0;
  });
}

void JobQueue::set_pid(std::int64_t id, std::int64_t pid) const {
  update([&](QueueState& st) {
    if (QueueJob* j = st.find(id)) j->pid = pid;
  });
}

}  // namespace zs::train
