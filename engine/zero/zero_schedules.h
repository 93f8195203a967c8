#pragma once
// ZeroOptimizer's schedules: where and when a step's update runs, one class each over the units'
// UnitOptimizer (unit_optimizer.h) — in memory after backward (zero_step.cpp), AdamW's state
// streamed from NVMe in sub-groups (zero_nvme.cpp), fused into backward (zero_fused.cpp), or
// delayed one step on a host thread (zero_delayed.cpp). The optimizer makes the one its options
// name (make_schedule) and calls it from step(), after the reductions and before the gathers of
// the whole units. Not a public header.

#include <cstdint>
#include <exception>
#include <memory>
#include <thread>
#include <unordered_set>
#include <vector>

#include <ATen/core/Tensor.h>

#include "zero/zero_unit.h"

namespace zs::zero {

class ZeroOptimizer::Schedule {
 public:
  explicit Schedule(ZeroOptimizer& z) : z_(z) {}
  virtual ~Schedule() = default;
  Schedule(const Schedule&) = delete;
  Schedule& operator=(const Schedule&) = delete;
  /// Counts the step (ZeroOptimizer::steps) and updates every trained unit with learning rate
  /// `lr` (× the unit's lr_scale); their reduced gradients are final.
  virtual void step(double lr) = 0;

 protected:
  ZeroOptimizer& z_;
};

/// Every unit after backward, one after the other, where its state lives (a lean optimizer's
/// state on NVMe comes in for its unit's step, the next unit's reads under way meanwhile).
class ZeroOptimizer::InMemorySchedule final : public Schedule {
 public:
  using Schedule::Schedule;
  void step(double lr) override;
  /// The update of every unit for a step already counted.
  void update(double lr);
};

/// AdamW with its state in NVMe files: the sub-groups stream through the staging buffers, the
/// read of one, the update of the one before and the write of the one before that overlapped.
class ZeroOptimizer::NvmeSchedule final : public Schedule {
 public:
  using Schedule::Schedule;
  void step(double lr) override;
};

/// optimizer.fused_backward: each unit steps as soon as its reduced gradients are final (from the
/// backward hook of the unit before it in the forward) and its gradient memory goes at once; the
/// clipping scales by the previous step's global norm (the current one is known only at the end).
class ZeroOptimizer::FusedSchedule final : public Schedule {
 public:
  using Schedule::Schedule;
  /// The units the hooks did not step, now; this step's norm becomes the next one's clipping norm.
  void step(double lr) override;
  /// Before the step's first micro-batch: its learning rate and clipping (0: none).
  void prepare(double lr, double max_norm);
  /// zero_grad: a new step begins, nothing stepped or waiting.
  void begin();
  /// `u`'s backward hook ran: the unit whose hook ran before is complete now and steps.
  void defer(Unit& u);
  /// Reduces what the waiting unit still has and steps it.
  void finish();
  bool stepped(const Unit& u) const { return stepped_.count(&u) > 0; }
  std::size_t units_stepped() const { return stepped_.size(); }
  /// The global norm of the gradients the units stepped with (a collective when the ranks hold
  /// parts), the units not stepped yet counted now; once per step.
  double norm();
  double previous_norm() const { return previous_norm_; }
  void set_previous_norm(double norm) { previous_norm_ = norm; }

 private:
  /// Steps one unit whose reduced gradients are final (once per step).
  void step_unit(Unit& u);
  // This step's lr and clip, the squared norm of the gradients stepped so far (this rank's part),
  // the previous step's global norm and this one's, once norm() has it.
  double lr_ = 0, clip_ = 0, norm_sq_ = 0, previous_norm_ = -1, current_norm_ = 0;
  bool begun_ = false, ready_ = false, norm_known_ = false;
  Unit* pending_ = nullptr;  // the unit whose hook ran last, not stepped yet
  std::unordered_set<const Unit*> stepped_;  // updated in this step
};

/// zero.offload_optimizer.delayed_update (ZeRO-Offload's one-step delayed parameter update): after
/// the warm-up's ordinary steps, the update of step t runs on a host thread while the device runs
/// step t+1 with the weights of step t−1, and goes into the weights at the next step().
class ZeroOptimizer::DelayedSchedule final : public Schedule {
 public:
  DelayedSchedule(ZeroOptimizer& z, std::int64_t warmup) : Schedule(z), warmup_(z), warmup_steps_(warmup) {}
  ~DelayedSchedule() override;
  void step(double lr) override;
  /// Waits for the host thread's update (rethrowing its error).
  void join();
  /// Writes the update under way into the weights now (and gathers the whole units again).
  void flush();
  /// Whether an update is computed but not yet in the weights.
  bool pending() const { return pending_; }
  /// load_shards: the checkpoint's masters are one update ahead of its weights (`pending`).
  void resume(bool pending);

 private:
  /// A unit's gradients put aside for the host thread's update.
  struct PutAside {
    at::Tensor grad;     // [owned] float32, put aside (swapped with shard_grad, or copied)
    at::Tensor host;     // ... or, when the step's gradient was held in bf16, that (swapped with grad_host)
    bool held = false;   // the update reads `host`, × scale
    double scale = 1.0;
  };
  /// The weights from the masters the host thread updated (compute copy, shards).
  void write();
  /// The update of trained unit k from its put-aside gradients, into masters and moments only.
  void compute(std::size_t k, double lr, std::int64_t step);
  InMemorySchedule warmup_;
  std::int64_t warmup_steps_;
  std::vector<PutAside> aside_;  // per trained unit, in order (from the first delayed step)
  std::thread thread_;           // the update under way
  std::exception_ptr error_;
  bool pending_ = false;         // masters ahead of the weights by one update
};

}  // namespace zs::zero
