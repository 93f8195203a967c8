#pragma once
// zero3_init_flag: a model built straight into ZeRO-3 shards. The UNet hands each unit over as
// soon as it is built (models::UnitBuilt); this keeps the rank's part of the unit's flattened,
// padded values (the same layout ZeroOptimizer uses) and empties the unit's parameters, so no
// rank ever holds more than one whole unit besides its own shards: loading never needs the
// whole model in memory, on the device or on the CPU.

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include <optional>

#include "models/param_unit.h"
#include "zero/zero_plan.h"

namespace zs::zero {

class ShardedInit {
 public:
  /// This rank's shards of the units that `plan` shards (zero_plan.h: shards_parameters); the
  /// others stay whole, as ZeroOptimizer keeps them.
  /// `shard_dtype`: what the shards are kept in (unset: the parameters' full precision, float32;
  /// bf16 when the run keeps no fp32 master weights, halving the memory of loading).
  /// `spill_dir` (zero.offload_param nvme_path, when the parameters live on NVMe): each shard is
  /// written to an unlinked file there as soon as it is cut and kept as a private mapping of it, so
  /// a model larger than host memory reaches the optimizer's NVMe store through the page cache
  /// instead of the heap (the load's peak is one unit, not every shard).
  explicit ShardedInit(PlanOptions plan, std::optional<at::ScalarType> shard_dtype = std::nullopt,
                       std::string spill_dir = {});
  ~ShardedInit();
  ShardedInit(const ShardedInit&) = delete;
  ShardedInit& operator=(const ShardedInit&) = delete;

  /// The callback for the UNet's constructor (or ModelSource::load_unet): takes `unit`'s values
  /// as they are at the call (loaded or freshly initialised).
  models::UnitBuilt callback();
  /// Gives every unit that was built into shards (by name, as UNet::units() names them) its
  /// shard and shapes; its parameters are the empty placeholders.
  void attach(std::vector<models::ParamUnit>& units) const;
  /// Elements of the units built into shards (whole, over all ranks).
  std::int64_t sharded_numel() const;
  std::size_t sharded_units() const { return units_.size(); }

 private:
  void take(const std::string& name, torch::nn::Module& unit);
  /// `shard` written to the spill file and mapped back (its values, no longer on the heap).
  at::Tensor spill(const at::Tensor& shard);
  PlanOptions plan_;
  std::string spill_dir_;
  int spill_fd_ = -1;
  std::int64_t spill_end_ = 0;
  std::optional<at::ScalarType> shard_dtype_;
  struct Built {
    at::Tensor shard;  ///< [padded / world] this rank's part
    std::vector<std::vector<std::int64_t>> shapes;
    std::int64_t numel = 0;
  };
  std::map<std::string, Built> units_;
};

}  // namespace zs::zero
