#pragma once
// The one smoothed loss of a run: the events' `loss_smoothed`, TensorBoard's train/loss_smoothed,
// the dashboard's chart and checkpointing.keep_best all use this value, computed by the trainer
// per optimizer step.

#include <cmath>
#include <cstdint>

namespace zs::train {

/// An exponential moving average debiased as TensorBoard's smoothing is: after n values,
/// last / (1 − weightⁿ), so the first points are not pulled towards the first loss (or 0).
class LossSmoother {
 public:
  explicit LossSmoother(double weight = 0.9) : weight_(weight) {}
  /// Adds a value; returns the smoothed value.
  double add(double value) {
    last_ = last_ * weight_ + (1 - weight_) * value;
    ++count_;
    return this->value();
  }
  /// The smoothed value (0 before the first one).
  double value() const { return count_ == 0 ? 0.0 : last_ / (1 - std::pow(weight_, static_cast<double>(count_))); }
  /// The state, for checkpoints: the undebiased average and the count.
  double last() const { return last_; }
  std::int64_t count() const { return count_; }
  void restore(double last, std::int64_t count) {
    last_ = last;
    count_ = count;
  }

 private:
  double weight_;
  double last_ = 0;
  std::int64_t count_ = 0;
};

}  // namespace zs::train
