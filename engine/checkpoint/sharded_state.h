#pragma once
// Sharded model state in a checkpoint: every rank writes the part of each parameter unit it
// owns (rank<R>.safetensors, tensors "<unit>/<kind>"), and meta.json's "sharding" object records
// the layout (world size, stage, and per unit its parameters' names, offsets and shapes), which
// is all a reader needs to cut the same units differently: another world size, another stage.

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>
#include <nlohmann/json.hpp>

namespace zs::io {
class SafetensorsReader;
}

namespace zs::checkpoint {

/// A parameter's place inside its unit's flat buffer.
struct ParamSlot {
  std::string name;
  std::int64_t offset = 0;
  std::vector<std::int64_t> shape;
};

/// One unit of the flat layout (the same on every rank).
struct UnitLayout {
  std::string name;
  std::int64_t numel = 0;   ///< real elements
  std::int64_t padded = 0;  ///< padded to a multiple of the world size it was saved with
  std::string dtype = "F32";  ///< of the saved weights and moments (safetensors spelling)
  std::vector<ParamSlot> params;
};

/// The "sharding" object of meta.json.
nlohmann::json sharding_json(const std::vector<UnitLayout>& units, int world_size, int stage);

/// The elements [first, first + count) of unit `u` that `rank` held when saved with `world_size`
/// ranks at `stage` (stage 0: every rank holds all; rank 0 writes them).
std::pair<std::int64_t, std::int64_t> saved_range(const UnitLayout& u, int rank, int world_size, int stage);

/// Name of a rank's shard file.
std::string shard_file_name(int rank);

/// Reads shards saved under any layout.
class ShardReader {
 public:
  /// `dir` holds meta.json's shard files; `sharding` is its "sharding" object. Throws
  /// zs::Error(checkpoint) naming a missing or unreadable rank file.
  ShardReader(const std::string& dir, const nlohmann::json& sharding);
  ~ShardReader();
  const std::vector<UnitLayout>& units() const { return units_; }
  /// Elements [first, first + count) of unit `unit`'s flat `kind` ("weights", "exp_avg",
  /// "exp_avg_sq", "ema"), float64 or float32 as stored; zeros past the unit's real elements.
  at::Tensor read(const std::string& unit, const std::string& kind, std::int64_t first, std::int64_t count) const;
  /// The same for a unit laid out as `target` now (this process's optimizer layout): straight
  /// from the saved unit when it is laid out the same, else parameter by parameter from wherever
  /// each was saved (units cut differently, e.g. a transformer saved whole and resumed split).
  /// Throws zs::Error(checkpoint) naming a parameter the checkpoint lacks.
  at::Tensor read_as(const UnitLayout& target, const std::string& kind, std::int64_t first, std::int64_t count) const;
  /// Blocks [first, first + count) of a kind kept one value per `block` elements (8-bit AdamW's
  /// absmax), for a unit laid out as `target`: undefined when the checkpoint cut that unit
  /// otherwise or lacks the kind (the blocks would not be the same).
  at::Tensor read_blocks(const UnitLayout& target, const std::string& kind, std::int64_t first, std::int64_t count,
                         std::int64_t block) const;
  /// A tensor every rank held whole and rank 0 saved per parameter, "<unit>/<kind>:<parameter>"
  /// (Adafactor's statistics), wherever that parameter's unit was. Throws zs::Error(checkpoint)
  /// naming the parameter when it is missing.
  at::Tensor replicated(const std::string& parameter, const std::string& kind) const;
  /// What ZeroOptimizer::ShardSource asks for, for a unit laid out as `target`: a kind
  /// "adafactor:<parameter>" (replicated), a kind ending in ".absmax" in blocks of `quant_block`
  /// (read_blocks), any other through read_as.
  at::Tensor read_state(const UnitLayout& target, const std::string& kind, std::int64_t first, std::int64_t count,
                        std::int64_t quant_block) const;
  /// One parameter whole, of one kind, in its shape: consolidated from the shards one tensor at
  /// a time (what export streams).
  at::Tensor parameter(const std::string& name, const std::string& kind) const;
  /// Every parameter's name, in layout order.
  std::vector<std::string> parameter_names() const;
  /// Whether the shards hold `kind` (the EMA only when the run kept one).
  bool has(const std::string& kind) const;

 private:
  std::string dir_;
  int world_ = 1, stage_ = 0;
  std::vector<UnitLayout> units_;
  std::map<std::string, std::size_t> by_name_;
  mutable std::map<std::string, std::pair<std::string, std::int64_t>> slots_;  // parameter -> saved unit, offset
  /// Where `parameter` was saved (its unit and offset); null when the checkpoint lacks it.
  const std::pair<std::string, std::int64_t>* slot_of(const std::string& parameter) const;
  /// Whether the saved unit of target's name has target's parameters at the same offsets.
  bool same_layout(const UnitLayout& target) const;
  std::vector<std::unique_ptr<io::SafetensorsReader>> files_;  // per saved rank (null: wrote nothing)
};

}  // namespace zs::checkpoint
