#include "train/loss_scaler.h"

#include <algorithm>
#include <cmath>

namespace zs::train {

LossScaler::LossScaler(LossScalerOptions options)
    : o_(options),
      scale_(options.static_scale > 0 ? options.static_scale : std::ldexp(1.0, options.initial_scale_power)),
      hysteresis_(std::max(options.hysteresis, 1)) {}

bool LossScaler::update(bool overflow) {
  bool lowered = false;
  if (overflow) {
    ++skipped_;
    if (dynamic()) {
      if (o_.hysteresis <= 1 || hysteresis_ == 1) {
        stuck_ = scale_ <= o_.min_scale;
        const double next = std::max(scale_ / 2, o_.min_scale);
        lowered = next < scale_;
        scale_ = next;
      } else {
        --hysteresis_;
      }
    }
    last_overflow_ = iter_;
  } else if (dynamic() && (iter_ - last_overflow_) % o_.window == 0) {
    hysteresis_ = std::max(o_.hysteresis, 1);
    scale_ *= 2;
  }
  ++iter_;
  return lowered;
}

void LossScaler::load(const State& s) {
  scale_ = s.scale;
  iter_ = s.iter;
  last_overflow_ = s.last_overflow;
  hysteresis_ = s.hysteresis;
  skipped_ = s.skipped;
}

}  // namespace zs::train
