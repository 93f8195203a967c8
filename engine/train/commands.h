#pragma once
// UI -> engine requests, polled by the trainer between steps (thread-safe, lock-free).

#include <atomic>

namespace zs::train {

class TrainerCommands {
 public:
  /// Finish the current step, write a checkpoint, end the run.
  void request_stop() { stop_ = true; }
  void set_paused(bool paused) { pause_ = paused; }
  void request_sample() { sample_ = true; }
  void request_save() { save_ = true; }
  void request_validate() { validate_ = true; }

  bool stop_requested() const { return stop_; }
  bool paused() const { return pause_; }
  /// True once per request.
  bool take_sample_request() { return sample_.exchange(false); }
  bool take_save_request() { return save_.exchange(false); }
  bool take_validate_request() { return validate_.exchange(false); }

 private:
  std::atomic<bool> stop_{false}, pause_{false}, sample_{false}, save_{false}, validate_{false};
};

}  // namespace zs::train
