#pragma once
// 8-bit AdamW over one unit's owned elements (UnitOptimizer): bitsandbytes' block-wise 8-bit
// moments (blockwise_quant.h), codes and one absmax per kQuantBlock elements, for units of at
// least kMin8bitSize elements (smaller ones are AdamWUnit). Checkpoints keep the moments
// dequantized with each block's absmax, which brings back the same codes.

#include <cstdint>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>

#include "zero/adamw_unit.h"

namespace zs::zero {

class AdamW8bitUnit final : public UnitOptimizer {
 public:
  /// A unit of `numel` elements of which `owned` (a multiple of kQuantBlock) are this rank's;
  /// state where `opts` says; the dynamic maps (dynamic_map) on that device.
  AdamW8bitUnit(std::int64_t numel, std::int64_t owned, const AdamSettings& settings, const at::TensorOptions& opts,
                at::Tensor signed_map, at::Tensor unsigned_map);
  StateLayout layout(bool masters, std::int64_t element_bytes) const override;
  void step(const UnitStep& s) override;
  at::Tensor moment(Moment k) const override;
  void set_moment(Moment k, const at::Tensor& values) override;
  std::vector<std::pair<const char*, at::Tensor*>> swappable() override;
  void pin() override;
  void save_extra(const UnitView& u, const std::string& prefix, bool rank0, const at::TensorOptions& opts,
                  NamedTensors& out) const override;
  void load(const UnitView& u, const Read& read, const MomentWrite& write) override;
  std::int64_t checkpoint_bytes(const UnitView& u, bool rank0, std::int64_t element_bytes) const override;

 private:
  std::int64_t numel_, owned_;
  AdamSettings o_;
  at::Tensor m_codes_, v_codes_;    // [owned] uint8
  at::Tensor m_absmax_, v_absmax_;  // [owned / kQuantBlock] float32
  at::Tensor signed_map_, unsigned_map_;
};

}  // namespace zs::zero
