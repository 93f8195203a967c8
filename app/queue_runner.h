#pragma once
// The runner behind `zerostudio queue run` (the GUI starts the same command): takes jobs from the
// queue one at a time and runs each as a child `zerostudio train` / `launch` process.

#include <cstdint>
#include <functional>
#include <string>

#include "train/job_queue.h"

namespace zs::cli {

struct QueueRunOptions {
  bool watch = false;            ///< wait for new jobs instead of exiting when none is left
  bool stop_on_failure = false;  ///< end at the first failed job (exit 1)
  double poll_s = 1.0;           ///< seconds between looks at the queue file
};

/// The most times one runner claims the same job in a row; past it the job fails with that reason
/// (a job that ends "waiting" ends the runner too, so a second claim means the file was edited).
inline constexpr int kMaxClaimsInARow = 3;

/// One runner's claims of the same job in a row, against kMaxClaimsInARow.
class ClaimStreak {
 public:
  /// Records a claim of job `id`; false when it is one claim too many in a row (the job then fails).
  bool allow(std::int64_t id) {
    count_ = id == last_ ? count_ + 1 : 1;
    last_ = id;
    return count_ <= kMaxClaimsInARow;
  }
  int count() const { return count_; }

 private:
  std::int64_t last_ = -1;
  int count_ = 0;
};

/// Holds the queue's runner lock (waiting for another runner first) and runs waiting jobs in order
/// until none is left (or, with `watch`, until SIGINT/SIGTERM/SIGHUP). Returns the exit code:
/// 0, 1 (a job failed with stop_on_failure), 130 (ended by a signal while a job ran; that job waits
/// again and resumes from its checkpoint).
int run_queue(const train::JobQueue& queue, const QueueRunOptions& options);

}  // namespace zs::cli
