#pragma once
// Training within a wall-clock budget, for the quality benchmarks: the run is asked to stop (as
// Ctrl-C would, writing its final checkpoint) once the budget is spent.

#include <string>

#include "settings/trainer_config.h"
#include "train/trainer.h"

namespace zs::bench {

struct BudgetRun {
  train::RunSummary summary;
  double seconds = 0;  ///< wall time of the whole run (dataset generation included)
};

/// Trains `cfg` into `run_dir` for at most `budget_s` seconds.
BudgetRun train_within_budget(const config::TrainerConfig& cfg, const std::string& run_dir, double budget_s);

}  // namespace zs::bench
