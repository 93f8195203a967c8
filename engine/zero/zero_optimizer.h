#pragma once
// ZeRO stages 0-2 over parameter units: each unit's parameters become views into one flat,
// padded fp32 buffer split into one shard per rank.
//   stage 0: full gradients all-reduced (averaged) in buckets; every rank updates everything.
//   stage 1: gradients all-reduced; each rank updates only its shard and keeps Adam moments
//            for it; parameters are all-gathered after the step.
//   stage 2: gradients reduce-scattered: only the rank's gradient shard is kept for the step.
// Stage 3 (sharded parameters, gathered per unit around forward and backward) is not here yet.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "models/param_unit.h"
#include "train/optimizer.h"

namespace zs::dist {
class Communicator;
}

namespace zs::zero {

struct ZeroOptions {
  int stage = 0;                                   ///< 0, 1 or 2
  std::int64_t reduce_bucket_size = 500'000'000;   ///< elements per gradient collective
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0.0;
};

class ZeroOptimizer final : public train::Optimizer {
 public:
  /// Flattens every unit's parameters (their names must be unique; they name the state).
  /// Parameters keep their identity: the module still trains them, now as views.
  ZeroOptimizer(std::vector<models::ParamUnit> units, dist::Communicator& comm, ZeroOptions options);
  ~ZeroOptimizer() override;

  void zero_grad() override;
  /// Averages the gradients over the ranks (stage 0/1: all-reduce; stage 2: reduce-scatter into
  /// this rank's shard and release the full gradients). Call once per optimizer step, after the
  /// last micro-batch's backward.
  void reduce_gradients() override;
  double clip_grad_norm(double max_norm) override;
  void step(double lr) override;
  /// Full (unsharded) Adam moments under the plain AdamW names, gathered from every rank: a
  /// collective, so every rank must call it. Resuming at another world size works.
  train::NamedTensors state() const override;
  void load_state(const std::function<at::Tensor(const std::string&)>& get) override;
  train::ModelStateBytes model_state() const override;
  std::int64_t steps() const override { return step_; }

  /// Padded elements over all units (Σ units' flat sizes) and real ones (Ψ).
  std::int64_t padded_numel() const;
  std::int64_t numel() const;

 private:
  struct Unit;
  void ensure_grads();
  std::vector<std::unique_ptr<Unit>> units_;
  dist::Communicator& comm_;
  ZeroOptions o_;
  std::int64_t step_ = 0;
  bool grads_reduced_ = false;
};

}  // namespace zs::zero
