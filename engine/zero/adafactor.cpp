#include "zero/adafactor.h"

#include <algorithm>
#include <cmath>

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

namespace zs::zero {

namespace {

/// Elements a partly owned parameter's index arithmetic handles at once (its index tensors are
/// int64: 16 bytes an element while they live).
constexpr std::int64_t kChunk = 1 << 20;

}  // namespace

double adafactor_step_size(const AdafactorOptions& o, double lr, std::int64_t step, double param_rms) {
  double size = lr;
  const double t = static_cast<double>(step);
  if (o.relative_step) size = std::min(o.warmup_init ? 1e-6 * t : 1e-2, 1.0 / std::sqrt(t));
  if (o.scale_parameter) size *= std::max(o.eps2, param_rms);
  return size;
}

std::int64_t AdafactorUnit::statistics_numel(c10::IntArrayRef shape) {
  std::int64_t numel = 1;
  for (auto d : shape) numel *= d;
  if (shape.size() < 2) return numel;
  return numel / shape.back() + numel / shape[shape.size() - 2];
}

AdafactorUnit::AdafactorUnit(const std::vector<std::int64_t>& offsets, const std::vector<std::vector<std::int64_t>>& shapes,
                             std::int64_t owned_offset, std::int64_t owned, const AdafactorOptions& options,
                             at::TensorOptions opts)
    : owned_offset_(owned_offset), owned_(owned), o_(options) {
  std::int64_t stats = 0;
  for (std::size_t i = 0; i < shapes.size(); ++i) {
    Slot s;
    s.offset = offsets[i];
    s.numel = 1;
    for (auto d : shapes[i]) s.numel *= d;
    if (shapes[i].size() >= 2 && s.numel > 0) {
      s.rows = shapes[i][shapes[i].size() - 2];
      s.cols = shapes[i].back();
    }
    s.stats_offset = stats;
    stats += statistics_numel(shapes[i]);
    slots_.push_back(s);
  }
  stats_ = at::zeros({stats}, opts);
  if (o_.beta1) exp_avg_ = at::zeros({owned}, opts);
}

at::Tensor AdafactorUnit::statistics(std::size_t i) const {
  const Slot& s = slots_.at(i);
  const std::int64_t n = s.rows > 0 ? s.numel / s.cols + s.numel / s.rows : s.numel;
  return stats_.narrow(0, s.stats_offset, n);
}

std::int64_t AdafactorUnit::bytes() const {
  auto b = [](const at::Tensor& t) { return t.defined() ? t.numel() * static_cast<std::int64_t>(t.element_size()) : 0; };
  return b(stats_) + b(exp_avg_);
}

void AdafactorUnit::step(at::Tensor w, const at::Tensor& g, double lr, std::int64_t step, const Reduce& reduce) {
  c10::NoGradGuard no_grad;
  const auto opts = stats_.options();
  const std::int64_t P = static_cast<std::int64_t>(slots_.size()), S = stats_.numel();
  // The owned part of each parameter: elements [lo, lo + n) of it.
  struct Piece {
    std::size_t slot;
    std::int64_t lo, n;
  };
  std::vector<Piece> pieces;
  for (std::size_t i = 0; i < slots_.size(); ++i) {
    const Slot& s = slots_[i];
    const std::int64_t lo = std::max(s.offset, owned_offset_), hi = std::min(s.offset + s.numel, owned_offset_ + owned_);
    if (lo < hi) pieces.push_back({i, lo - s.offset, hi - lo});
  }
  auto owned_part = [&](const at::Tensor& t, const Piece& p) {
    return t.narrow(0, slots_[p.slot].offset + p.lo - owned_offset_, p.n);
  };
  // A partly owned factored parameter: its elements' row and column indices, chunk by chunk.
  auto for_chunks = [&](const Piece& p, const std::function<void(std::int64_t, std::int64_t, const at::Tensor&,
                                                                  const at::Tensor&)>& f) {
    const Slot& s = slots_[p.slot];
    for (std::int64_t c = 0; c < p.n; c += kChunk) {
      const std::int64_t m = std::min(kChunk, p.n - c);
      const at::Tensor e = at::arange(p.lo + c, p.lo + c + m, opts.dtype(at::kLong));
      const at::Tensor row = at::div(e, s.cols, "floor");
      const at::Tensor col = at::div(e, s.rows * s.cols, "floor") * s.cols + at::remainder(e, s.cols);
      f(c, m, row, col);
    }
  };
  // 1. Each rank's sums of grad² + eps1 per row and column (per element for a vector) and of the
  //    weights' squares, summed over the ranks.
  at::Tensor sums = at::zeros({S + P}, opts);
  for (const Piece& p : pieces) {
    const Slot& s = slots_[p.slot];
    const at::Tensor gi = owned_part(g, p).to(opts);
    const at::Tensor sq = gi * gi + o_.eps1;
    if (s.rows > 0) {
      const std::int64_t nrow = s.numel / s.cols, ncol = s.numel / s.rows;
      at::Tensor row_sums = sums.narrow(0, s.stats_offset, nrow), col_sums = sums.narrow(0, s.stats_offset + nrow, ncol);
      if (p.n == s.numel) {
        row_sums.copy_(sq.view({nrow, s.cols}).sum(-1));
        col_sums.copy_(sq.view({s.numel / (s.rows * s.cols), s.rows, s.cols}).sum(1).reshape({-1}));
      } else {
        for_chunks(p, [&](std::int64_t c, std::int64_t m, const at::Tensor& row, const at::Tensor& col) {
          row_sums.index_add_(0, row, sq.narrow(0, c, m));
          col_sums.index_add_(0, col, sq.narrow(0, c, m));
        });
      }
    } else {
      sums.narrow(0, s.stats_offset + p.lo, p.n).copy_(sq);
    }
    sums.narrow(0, S + static_cast<std::int64_t>(p.slot), 1).copy_(owned_part(w, p).to(opts).pow(2).sum().reshape({1}));
  }
  reduce(sums);
  // 2. The statistics, updated alike on every rank (β₂ₜ = 1 − t^decay_rate).
  const double beta2t = 1.0 - std::pow(static_cast<double>(step), o_.decay_rate);
  for (const Slot& s : slots_) {
    if (s.rows > 0) {
      const std::int64_t nrow = s.numel / s.cols, ncol = s.numel / s.rows;
      stats_.narrow(0, s.stats_offset, nrow).mul_(beta2t).add_(sums.narrow(0, s.stats_offset, nrow) / s.cols, 1.0 - beta2t);
      stats_.narrow(0, s.stats_offset + nrow, ncol)
          .mul_(beta2t)
          .add_(sums.narrow(0, s.stats_offset + nrow, ncol) / s.rows, 1.0 - beta2t);
    } else {
      stats_.narrow(0, s.stats_offset, s.numel).mul_(beta2t).add_(sums.narrow(0, s.stats_offset, s.numel), 1.0 - beta2t);
    }
  }
  // 3. The unclipped updates of the owned elements and their squares' sums (for the RMS clip).
  std::vector<at::Tensor> updates;
  at::Tensor update_sq = at::zeros({P}, opts);
  for (const Piece& p : pieces) {
    const Slot& s = slots_[p.slot];
    const at::Tensor gi = owned_part(g, p).to(opts);
    at::Tensor u;
    if (s.rows > 0) {
      const std::int64_t nrow = s.numel / s.cols, ncol = s.numel / s.rows, lead = s.numel / (s.rows * s.cols);
      const at::Tensor row = stats_.narrow(0, s.stats_offset, nrow).view({lead, s.rows});
      const at::Tensor r = (row / row.mean(-1, true)).rsqrt().reshape({-1});
      const at::Tensor c = stats_.narrow(0, s.stats_offset + nrow, ncol).rsqrt();
      if (p.n == s.numel) {
        u = (r.view({lead, s.rows, 1}) * c.view({lead, 1, s.cols})).reshape({-1}) * gi;
      } else {
        u = at::empty({p.n}, opts);
        for_chunks(p, [&](std::int64_t k, std::int64_t m, const at::Tensor& ri, const at::Tensor& ci) {
          u.narrow(0, k, m).copy_(r.index_select(0, ri) * c.index_select(0, ci) * gi.narrow(0, k, m));
        });
      }
    } else {
      u = stats_.narrow(0, s.stats_offset + p.lo, p.n).rsqrt() * gi;
    }
    update_sq.narrow(0, static_cast<std::int64_t>(p.slot), 1).copy_(u.pow(2).sum().reshape({1}));
    updates.push_back(std::move(u));
  }
  reduce(update_sq);
  const at::Tensor sums_cpu = sums.narrow(0, S, P).to(at::kCPU, at::kDouble), usq_cpu = update_sq.to(at::kCPU, at::kDouble);
  const double* param_sq = sums_cpu.data_ptr<double>();
  const double* upd_sq = usq_cpu.data_ptr<double>();
  // 4. Clip by the RMS, scale by the step size, the first moment, decay and update.
  for (std::size_t k = 0; k < pieces.size(); ++k) {
    const Piece& p = pieces[k];
    const Slot& s = slots_[p.slot];
    const double n = static_cast<double>(s.numel);
    const double size = adafactor_step_size(o_, lr, step, std::sqrt(param_sq[p.slot] / n));
    at::Tensor u = updates[k];
    u.div_(std::max(1.0, std::sqrt(upd_sq[p.slot] / n) / o_.clip_threshold));
    u.mul_(size);
    if (o_.beta1) {
      at::Tensor m = owned_part(exp_avg_, p);
      m.mul_(*o_.beta1).add_(u, 1.0 - *o_.beta1);
      u = m;
    }
    at::Tensor wi = owned_part(w, p);
    const bool direct = wi.scalar_type() == opts.dtype().toScalarType() && wi.device() == opts.device();
    at::Tensor x = direct ? wi : wi.to(opts);
    if (o_.weight_decay != 0) x.add_(x, -o_.weight_decay * size);
    x.sub_(u);
    if (!direct) wi.copy_(x);
  }
}

}  // namespace zs::zero
