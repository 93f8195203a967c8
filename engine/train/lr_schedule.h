#pragma once
// Learning-rate schedules with DeepSpeed's names (scheduler.type).

#include <cstdint>

#include "settings/trainer_config.h"

namespace zs::train {

/// lr(step) for `scheduler.type`:
///  constant      — optimizer.lr, with the warmup when warmup_steps > 0;
///  WarmupLR      — warm up from warmup_min_lr to optimizer.lr (log or linear curve), then hold;
///  WarmupDecayLR — warm up, then decay linearly to min_lr at total_steps;
///  cosine        — warm up, then cosine from optimizer.lr to min_lr at total_steps.
/// The length is scheduler.total_steps, or training.max_steps when that is null.
class LrSchedule {
 public:
  explicit LrSchedule(const config::TrainerConfig& config);
  /// Learning rate of optimizer step `step` (0-based).
  double lr(std::int64_t step) const;
  std::int64_t total_steps() const { return total_; }

 private:
  config::SchedulerConfig s_;
  double peak_;
  std::int64_t total_;
};

}  // namespace zs::train
