#pragma once
// Loss scaling for fp16 with DeepSpeed's semantics (deepspeed/runtime/fp16/loss_scaler.py):
// the loss is multiplied by the scale before backward; gradients are divided by it before the
// step. An overflow (inf/NaN in any gradient on any rank) skips the step: with hysteresis h the
// first h−1 overflows only use up the hysteresis, then the scale halves (not below
// min_loss_scale). After `window` steps without overflow since the last one the scale doubles
// and the hysteresis is restored. A static scale (loss_scale > 0) never changes.

#include <cstdint>

namespace zs::train {

struct LossScalerOptions {
  double static_scale = 0;           ///< > 0: a fixed scale (DeepSpeed's fp16.loss_scale)
  int initial_scale_power = 16;      ///< dynamic: the scale starts at 2^this
  std::int64_t window = 1000;        ///< dynamic: clean steps before the scale doubles
  int hysteresis = 2;                ///< dynamic: overflows tolerated before lowering the scale
  double min_scale = 1;              ///< dynamic: the lowest scale
};

class LossScaler {
 public:
  explicit LossScaler(LossScalerOptions options);
  double scale() const { return scale_; }
  bool dynamic() const { return o_.static_scale <= 0; }
  /// Records one step's outcome and adjusts the scale. Returns true when the scale was lowered.
  bool update(bool overflow);
  /// An overflow at the lowest scale (training cannot go on: lower the learning rate).
  bool stuck() const { return stuck_; }
  /// Overflowed (skipped) steps so far.
  std::int64_t skipped() const { return skipped_; }

  /// For checkpoints: scale, steps seen, last overflow step, hysteresis left, skipped steps.
  struct State {
    double scale;
    std::int64_t iter, last_overflow;
    int hysteresis;
    std::int64_t skipped;
  };
  State state() const { return {scale_, iter_, last_overflow_, hysteresis_, skipped_}; }
  void load(const State& s);

 private:
  LossScalerOptions o_;
  double scale_;
  std::int64_t iter_ = 0, last_overflow_ = -1, skipped_ = 0;
  int hysteresis_;
  bool stuck_ = false;
};

}  // namespace zs::train
