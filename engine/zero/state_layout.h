#pragma once
// What each optimizer keeps for one unit's owned elements: the parts of its state, their element
// sizes, and which of them go to files with the optimizer offloaded to NVMe. ZeroOptimizer counts
// its optimizer bytes from these layouts and the memory estimator calls the same functions, so the
// two cannot disagree. No LibTorch here.

#include <cstdint>
#include <string>
#include <vector>

#include "zero/zero_rules.h"

namespace zs::zero {

/// One tensor of a unit's optimizer state.
struct StatePart {
  std::string name;           ///< "master", "exp_avg", "exp_avg_sq", "exp_avg.absmax", "exp_avg_sq.absmax", "statistics"
  std::int64_t numel = 0;     ///< elements
  std::int64_t element_bytes = 4;  ///< bytes per element: 4 float32 (8 with float64 masters), 1 for 8-bit codes
  bool swapped = true;        ///< with the optimizer on NVMe it lives in a file between steps (false: stays in memory)

  std::int64_t bytes() const { return numel * element_bytes; }
};

/// A unit's optimizer state, part by part (the masters first when kept).
struct StateLayout {
  std::vector<StatePart> parts;

  /// Bytes of every part.
  std::int64_t bytes() const;
  /// Bytes that stay in memory between steps with the optimizer on NVMe (the unswapped parts).
  std::int64_t resident_bytes() const;
};

/// AdamW over `owned` elements: fp32 masters (when `masters`) and two moments, each `element_bytes`
/// an element (the optimizer's precision: 4, or 8 in float64 tests).
StateLayout adamw_state_layout(std::int64_t owned, bool masters, std::int64_t element_bytes = 4);
/// 8-bit AdamW over the `owned` elements of a unit of `numel`: from kMin8bitSize elements
/// (uses_8bit_state) the moments are 1-byte codes with one float32 absmax per kQuantBlock owned
/// elements; smaller units keep AdamW's float moments.
StateLayout adamw8bit_state_layout(std::int64_t numel, std::int64_t owned, bool masters, std::int64_t element_bytes = 4);
/// Adafactor over `owned` elements whose parameters' factored statistics have `statistics_numel`
/// elements in all (AdafactorUnit::statistics_numel; every rank holds them whole, and they stay in
/// memory with NVMe) and, with beta1, a first moment.
StateLayout adafactor_state_layout(std::int64_t owned, std::int64_t statistics_numel, bool beta1, bool masters,
                                   std::int64_t element_bytes = 4);

/// The layout of optimizer `t` (the arguments the others do not read are ignored).
struct LayoutRequest {
  OptimizerType optimizer = OptimizerType::adamw;
  std::int64_t numel = 0;             ///< the unit's real elements (decides 8-bit state)
  std::int64_t owned = 0;             ///< elements this rank updates
  bool masters = false;               ///< keeps_master_weights
  std::int64_t element_bytes = 4;     ///< the optimizer's float precision
  std::int64_t statistics_numel = 0;  ///< Adafactor: its statistics' elements
  bool adafactor_beta1 = false;       ///< Adafactor: keeps a first moment
};
StateLayout state_layout(const LayoutRequest& r);

}  // namespace zs::zero
