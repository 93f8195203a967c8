#pragma once
// The protocol every rank follows to save one sharded checkpoint: each rank writes its shard
// into a hidden staging folder, rank 0 adds meta.json, and the folder becomes checkpoints/<tag>
// only when every rank succeeded. A failure anywhere (a full disk, a rank that cannot write) is
// agreed by all ranks, the staging folder is removed and older checkpoints are untouched.

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>
#include <nlohmann/json.hpp>

#include "checkpoint/checkpoint.h"

namespace zs::comm {
class Communicator;
}

namespace zs::checkpoint {

/// One rank's part of a save.
struct ShardedSave {
  std::string checkpoints_dir;  ///< the run's checkpoints/ folder
  std::string tag;              ///< e.g. "step_500"
  std::vector<std::pair<std::string, at::Tensor>> shard;  ///< this rank's tensors (may be empty)
  nlohmann::json meta;          ///< rank 0: meta.json's fields (sizes and CRC-32s are added)
  /// Tests: this rank's shard write fails with this message, as a full disk would.
  std::optional<std::string> injected_failure;
};

/// What came of a save, the same verdict on every rank.
struct SaveOutcome {
  bool saved = false;
  CheckpointInfo info;          ///< rank 0, when saved
  std::string problem;          ///< when not saved: this rank's problem, or that another rank had one
  bool own_problem = false;     ///< `problem` is this rank's own (not another rank's)
  std::int64_t needed_bytes = 0;  ///< this rank's shard
  std::int64_t free_bytes = -1;   ///< free space where it was to go (-1: unknown)
};

/// Saves `save` as a collective over `comm` (every rank calls it with its own shard). Never
/// throws for a failed save: the outcome says why. A shard that cannot fit the free space
/// (estimated ×2 with several ranks, which share the disk) is refused before anything is written.
SaveOutcome save_sharded(comm::Communicator& comm, const ShardedSave& save);

}  // namespace zs::checkpoint
