#include "zero/adamw8bit_unit.h"

#include <ATen/ATen.h>

#include "zero/blockwise_quant.h"
#include "zero/cpu_adam.h"

namespace zs::zero {

AdamW8bitUnit::AdamW8bitUnit(std::int64_t numel, std::int64_t owned, const AdamSettings& settings,
                             const at::TensorOptions& opts, at::Tensor signed_map, at::Tensor unsigned_map)
    : numel_(numel), owned_(owned), o_(settings), signed_map_(std::move(signed_map)), unsigned_map_(std::move(unsigned_map)) {
  m_codes_ = at::zeros({owned}, opts.dtype(at::kByte));
  v_codes_ = at::zeros({owned}, opts.dtype(at::kByte));
  m_absmax_ = at::zeros({owned / kQuantBlock}, opts.dtype(at::kFloat));
  v_absmax_ = at::zeros({owned / kQuantBlock}, opts.dtype(at::kFloat));
}

StateLayout AdamW8bitUnit::layout(bool masters, std::int64_t element_bytes) const {
  return adamw8bit_state_layout(numel_, owned_, masters, element_bytes);
}

void AdamW8bitUnit::step(const UnitStep& s) {
  adamw8bit_update(s.weights, s.grad, m_codes_, m_absmax_, v_codes_, v_absmax_, signed_map_, unsigned_map_,
                   AdamHyper{s.lr, o_.beta1, o_.beta2, o_.eps, o_.weight_decay, s.step});
}

at::Tensor AdamW8bitUnit::moment(Moment k) const {
  return k == Moment::first ? dequantize_flat(m_codes_, m_absmax_, signed_map_)
                            : dequantize_flat(v_codes_, v_absmax_, unsigned_map_);
}

void AdamW8bitUnit::set_moment(Moment k, const at::Tensor& values) {
  const bool first = k == Moment::first;
  quantize_into(values.reshape({-1}).to(m_absmax_.options()), first ? signed_map_ : unsigned_map_,
                first ? m_codes_ : v_codes_, first ? m_absmax_ : v_absmax_);
}

std::vector<std::pair<const char*, at::Tensor*>> AdamW8bitUnit::swappable() {
  return {{"exp_avg.swp", &m_codes_}, {"exp_avg_sq.swp", &v_codes_}, {"absmax.swp", &m_absmax_}, {"absmax.swp", &v_absmax_}};
}

void AdamW8bitUnit::pin() {
  for (at::Tensor* t : {&m_codes_, &v_codes_, &m_absmax_, &v_absmax_})
    if (t->defined()) *t = t->pin_memory();
}

void AdamW8bitUnit::save_extra(const UnitView&, const std::string& prefix, bool, const at::TensorOptions&,
                               NamedTensors& out) const {
  out.emplace_back(prefix + "exp_avg.absmax", m_absmax_.to(at::kCPU).contiguous().clone());
  out.emplace_back(prefix + "exp_avg_sq.absmax", v_absmax_.to(at::kCPU).contiguous().clone());
}

void AdamW8bitUnit::load(const UnitView& u, const Read& read, const MomentWrite&) {
  // With the saved blocks' absmax the dequantized moments return to their codes exactly.
  const std::int64_t first = u.owned_offset / kQuantBlock, blocks = u.owned / kQuantBlock;
  const auto values = [&](const char* kind) {
    return read(kind, u.owned_offset, u.owned).to(m_absmax_.options()).reshape({-1});
  };
  quantize_into(values("exp_avg"), signed_map_, m_codes_, m_absmax_, read("exp_avg.absmax", first, blocks));
  quantize_into(values("exp_avg_sq"), unsigned_map_, v_codes_, v_absmax_, read("exp_avg_sq.absmax", first, blocks));
}

std::int64_t AdamW8bitUnit::checkpoint_bytes(const UnitView& u, bool rank0, std::int64_t element_bytes) const {
  return UnitOptimizer::checkpoint_bytes(u, rank0, element_bytes) +
         2 * (u.owned / kQuantBlock) * static_cast<std::int64_t>(sizeof(float));
}

}  // namespace zs::zero
