#include "train/lr_schedule.h"

#include <algorithm>
#include <cmath>

namespace zs::train {

LrSchedule::LrSchedule(const config::TrainerConfig& config)
    : s_(config.scheduler), peak_(config.optimizer.lr), total_(config.schedule_steps()) {}

double LrSchedule::lr(std::int64_t step) const {
  const std::int64_t warm = s_.warmup_steps;
  if (warm > 0 && step < warm) {
    // DeepSpeed's WarmupLR: log(step + 1) / log(warmup) or step / warmup.
    const double frac = s_.warmup_type == "log" ? std::log(static_cast<double>(step) + 1) / std::log(static_cast<double>(warm))
                                               : static_cast<double>(step) / warm;
    return s_.warmup_min_lr + (peak_ - s_.warmup_min_lr) * std::clamp(frac, 0.0, 1.0);
  }
  if (s_.type == "constant" || s_.type == "WarmupLR") return peak_;
  const double span = std::max<std::int64_t>(total_ - warm, 1);
  const double progress = std::clamp((static_cast<double>(step) - warm) / span, 0.0, 1.0);
  if (s_.type == "WarmupDecayLR") return s_.min_lr + (peak_ - s_.min_lr) * (1.0 - progress);
  return s_.min_lr + (peak_ - s_.min_lr) * 0.5 * (1.0 + std::cos(M_PI * progress));  // cosine
}

}  // namespace zs::train
