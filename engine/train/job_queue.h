#pragma once
// The job queue shared by the GUI and `zerostudio queue`: one JSON file in the settings folder
// ($XDG_CONFIG_HOME/zerostudio/queue.json) listing training jobs in the order they run. Every
// change is a read-modify-write under an exclusive lock on queue.lock and lands by an atomic
// rename, so the GUI and any number of `queue` commands can edit it at once and see each other's
// edits at their next read.
//
// A job is a snapshot: when it is added, its config (with --set applied, validated) is copied to
// queue-jobs/<id>.yaml and its run folder is created, unique, under the config's
// logging.runs_root. The runner (`zerostudio queue run`, one per machine: it holds runner.lock)
// starts `zerostudio train COPY --run-dir RUN --resume auto` (or `launch` for several ranks) in the
// folder the job was added from, and holds queue-jobs/<id>.lock while the job runs — its child
// inherits it — so a job marked running whose lock is free was cut short (kill -9, a reboot) and is
// resumed from its newest checkpoint by the next runner.

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/file_lock.h"

namespace zs::train {

enum class JobState { waiting, running, finished, failed, stopped };

/// "waiting", "running", ... (the file's spelling).
const char* to_string(JobState state);

struct QueueJob {
  std::int64_t id = 0;              ///< unique in the queue, never reused
  std::string name;                 ///< the run folder's name
  std::string source;               ///< the config file it was added from (absolute)
  std::vector<std::string> overrides;  ///< the --set values applied into the copy
  std::string config;               ///< the job's own copy: queue-jobs/<id>.yaml (absolute)
  std::string run_dir;              ///< absolute
  std::string working_dir;          ///< relative paths in the config resolve here
  int num_processes = 1;            ///< ranks on this machine
  JobState state = JobState::waiting;
  int exit_code = 0;                ///< of the last start (failed: nonzero; 128+N: killed by signal N)
  std::string last_error;           ///< the last "error:" line the job printed
  std::string fit_note;             ///< non-empty: why its estimate does not fit the card
  std::int64_t added_at = 0, started_at = 0, ended_at = 0;  ///< Unix seconds (0: not yet)
  int starts = 0;                   ///< times a runner started it (> 1: resumed after an interruption)
  bool stop_requested = false;      ///< Stop was asked while it ran
  std::int64_t runner_pid = 0;      ///< the runner that started it last
  std::int64_t pid = 0;             ///< its `train`/`launch` process while it runs (its own process group)
};

struct QueueState {
  bool paused = false;              ///< no new job starts (the running one goes on)
  std::int64_t next_id = 1;
  std::vector<QueueJob> jobs;       ///< in run order
  /// The job with `id`, or nullptr.
  QueueJob* find(std::int64_t id);
  const QueueJob* find(std::int64_t id) const;
};

/// What `add` needs.
struct JobRequest {
  std::string config_file;
  std::vector<std::string> overrides;  ///< "key=value", as --set
  int num_processes = 0;               ///< 0: the config's launch.num_processes
  std::string working_dir;             ///< empty: the current folder
  /// Device bytes to check the job's estimate against: -1 the detected GPU (none: no check; a
  /// CPU-only config is not checked), 0 no check.
  std::int64_t gpu_memory = -1;
};

/// A job taken by a runner: the job as it was claimed and the lock it holds while it runs.
struct ClaimedJob {
  QueueJob job;
  bool resumed = false;  ///< it was running when its runner went away
  FileLock lock;
};

class JobQueue {
 public:
  /// The queue in `dir` (default: default_queue_dir()).
  explicit JobQueue(std::string dir = default_queue_dir());
  /// $XDG_CONFIG_HOME/zerostudio (core/install_paths.h).
  static std::string default_queue_dir();

  const std::string& dir() const { return dir_; }
  std::string file() const;         ///< dir/queue.json
  std::string runner_lock() const;  ///< dir/runner.lock
  std::string job_lock(std::int64_t id) const;    ///< dir/queue-jobs/<id>.lock

  /// A snapshot (empty when there is no file). Throws zs::Error(io) naming the file when it is
  /// not a queue file.
  QueueState read() const;
  /// Applies `change` to the state under the lock and writes it back atomically; returns the state
  /// written. Exceptions from `change` leave the file as it was.
  QueueState update(const std::function<void(QueueState&)>& change) const;

  /// Validates the config with its overrides (throws config::ConfigError listing every problem),
  /// creates the job's run folder and config copy and appends the job, flagged (fit_note) when
  /// its memory estimate does not fit request.gpu_memory. Returns it.
  QueueJob add(const JobRequest& request) const;
  /// Removes a job that is not running (its copy goes; its run folder stays when it holds a run).
  /// Throws zs::Error(config) for an unknown id or a running job.
  void remove(std::int64_t id) const;
  /// Moves job `id` to position `index` (0 = first; clamped).
  void move(std::int64_t id, std::size_t index) const;
  /// Puts the jobs in this order (ids missing from `ids` keep their relative order at the end).
  void reorder(const std::vector<std::int64_t>& ids) const;
  void set_paused(bool paused) const;
  /// Asks the runner to stop a running job (it checkpoints and ends as "stopped"); a waiting job
  /// becomes stopped at once. Throws zs::Error(config) for an unknown id.
  void request_stop(std::int64_t id) const;
  /// A stopped, failed or finished job waits again (it resumes from its newest checkpoint).
  void requeue(std::int64_t id) const;
  /// Replaces a waiting job's config copy with `yaml` after validating it (ConfigError lists the
  /// problems, against the name "job N"). Throws zs::Error(config) when the job is not waiting.
  void replace_config(std::int64_t id, const std::string& yaml) const;

  /// True while a runner holds runner.lock.
  bool runner_active() const;
  /// True while the job's lock is held (by the runner or the job's processes).
  bool job_live(std::int64_t id) const;
  /// What a reader should show: the state, or "interrupted" for a running job nobody holds.
  std::string shown_state(const QueueJob& job) const;

  /// Takes the first job that may start — waiting, or running with its lock free (interrupted) —
  /// unless the queue is paused: locks it, marks it running (starts + 1, runner_pid, started_at)
  /// and returns it. Called by a runner; two runners never get the same job.
  std::optional<ClaimedJob> claim_next(std::int64_t runner_pid) const;
  /// Records how a claimed job ended.
  void finish(std::int64_t id, JobState state, int exit_code, const std::string& last_error) const;
  /// Records the process a claimed job runs in.
  void set_pid(std::int64_t id, std::int64_t pid) const;

 private:
  std::string dir_;
};

}  // namespace zs::train
