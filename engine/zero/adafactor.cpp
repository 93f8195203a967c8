#include "zero/adafactor.h"

#include <algorithm>
#include <cmath>

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <c10/util/accumulate.h>

#include "core/parallel.h"

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

at::Tensor AdafactorUnit::statistics(std::size_t i) const { return stats_.narrow(0, slots_.at(i).stats_offset, statistics_numel(i)); }

std::int64_t AdafactorUnit::statistics_numel(std::size_t i) const {
  const Slot& s = slots_.at(i);
  return s.rows > 0 ? s.numel / s.cols + s.numel / s.rows : s.numel;
}

std::int64_t AdafactorUnit::bytes() const {
  auto b = [](const at::Tensor& t) { return t.defined() ? t.numel() * static_cast<std::int64_t>(t.element_size()) : 0; };
  return b(stats_) + b(exp_avg_);
}

std::vector<AdafactorUnit::Piece> AdafactorUnit::owned_pieces() const {
  std::vector<Piece> pieces;
  for (std::size_t i = 0; i < slots_.size(); ++i) {
    const Slot& s = slots_[i];
    const std::int64_t lo = std::max(s.offset, owned_offset_), hi = std::min(s.offset + s.numel, owned_offset_ + owned_);
    if (lo < hi) pieces.push_back({i, lo - s.offset, hi - lo});
  }
  return pieces;
}

template <typename T, typename G>
void AdafactorUnit::step_loops(at::Tensor& w, const at::Tensor& g, double lr, std::int64_t step, const Reduce& reduce) {
  const std::int64_t P = static_cast<std::int64_t>(slots_.size()), S = stats_.numel();
  const std::vector<Piece> pieces = owned_pieces();
  T* const wp = w.data_ptr<T>();
  const G* const gp = g.data_ptr<G>();
  auto base = [&](const Piece& p) { return slots_[p.slot].offset + p.lo - owned_offset_; };
  constexpr std::int64_t kBlock = 1 << 15;
  const T eps1 = static_cast<T>(o_.eps1);
  // Elements [a, b) of a factored parameter (its own indices) as row segments: f(row, first
  // element, end) with every element of [first, end) in that row.
  auto segments = [](const Slot& s, std::int64_t a, std::int64_t b, const auto& f) {
    for (std::int64_t e = a; e < b;) {
      const std::int64_t row = e / s.cols, end = std::min(b, (row + 1) * s.cols);
      f(row, e, end);
      e = end;
    }
  };
  // 1. Each rank's sums of grad² + eps1 per row and column (per element for a vector) and of the
  //    weights' squares, summed over the ranks.
  at::Tensor sums = at::zeros({S + P}, stats_.options());
  T* const sp = sums.data_ptr<T>();
  for (const Piece& p : pieces) {
    const Slot& s = slots_[p.slot];
    const G* gi = gp + base(p);
    const T* wi = wp + base(p);
    if (s.rows > 0) {
      T* row_sums = sp + s.stats_offset;
      T* col_sums = sp + s.stats_offset + s.numel / s.cols;
      const std::int64_t r0 = p.lo / s.cols, r1 = (p.lo + p.n - 1) / s.cols + 1;
      zs::parallel_for(r0, r1, std::max<std::int64_t>(1, kBlock / s.cols), [&](std::int64_t lo, std::int64_t hi) {
        for (std::int64_t r = lo; r < hi; ++r) {
          const std::int64_t a = std::max(p.lo, r * s.cols), b = std::min(p.lo + p.n, (r + 1) * s.cols);
          const G* x = gi + (a - p.lo);
          row_sums[r] = static_cast<T>(zs::lanes_sum(b - a, [&](std::int64_t k) {
            const T v = static_cast<T>(x[k]);
            return static_cast<double>(v * v + eps1);
          }));
        }
      });
      // Columns: per slab (the leading dimensions) and block of columns, down the rows.
      constexpr std::int64_t kCols = 256;
      const std::int64_t slab = s.rows * s.cols, blocks = (s.cols + kCols - 1) / kCols;
      const std::int64_t l0 = p.lo / slab, l1 = (p.lo + p.n - 1) / slab + 1;
      zs::parallel_for(0, (l1 - l0) * blocks, 1, [&](std::int64_t lo, std::int64_t hi) {
        double acc[kCols];
        for (std::int64_t t = lo; t < hi; ++t) {
          const std::int64_t l = l0 + t / blocks, c0 = (t % blocks) * kCols, c1 = std::min(s.cols, c0 + kCols);
          std::fill(acc, acc + (c1 - c0), 0.0);
          for (std::int64_t r = 0; r < s.rows; ++r) {
            const std::int64_t first = l * slab + r * s.cols;
            const std::int64_t a = std::max(p.lo, first + c0), b = std::min(p.lo + p.n, first + c1);
            for (std::int64_t e = a; e < b; ++e) {
              const T v = static_cast<T>(gi[e - p.lo]);
              acc[e - first - c0] += static_cast<double>(v * v + eps1);
            }
          }
          for (std::int64_t c = c0; c < c1; ++c) col_sums[l * s.cols + c] = static_cast<T>(acc[c - c0]);
        }
      });
    } else {
      T* out = sp + s.stats_offset + p.lo;
      zs::parallel_for(0, p.n, kBlock, [&](std::int64_t lo, std::int64_t hi) {
        for (std::int64_t e = lo; e < hi; ++e) {
          const T v = static_cast<T>(gi[e]);
          out[e] = v * v + eps1;
        }
      });
    }
    sp[S + static_cast<std::int64_t>(p.slot)] = static_cast<T>(zs::sum_of_squares(wi, p.n));
  }
  reduce(sums);
  // 2. The statistics, updated alike on every rank (β₂ₜ = 1 − t^decay_rate); each factored
  //    parameter's row factor r = rsqrt(row / mean(row)) and column factor c = rsqrt(col).
  const double beta2t = 1.0 - std::pow(static_cast<double>(step), o_.decay_rate);
  std::vector<at::Tensor> row_factor(slots_.size()), col_factor(slots_.size());
  for (std::size_t i = 0; i < slots_.size(); ++i) {
    const Slot& s = slots_[i];
    if (s.rows > 0) {
      const std::int64_t nrow = s.numel / s.cols, ncol = s.numel / s.rows;
      at::Tensor row = stats_.narrow(0, s.stats_offset, nrow), col = stats_.narrow(0, s.stats_offset + nrow, ncol);
      row.mul_(beta2t).add_(sums.narrow(0, s.stats_offset, nrow) / s.cols, 1.0 - beta2t);
      col.mul_(beta2t).add_(sums.narrow(0, s.stats_offset + nrow, ncol) / s.rows, 1.0 - beta2t);
      const at::Tensor slabs = row.view({s.numel / (s.rows * s.cols), s.rows});
      row_factor[i] = (slabs / slabs.mean(-1, true)).rsqrt().reshape({-1}).contiguous();
      col_factor[i] = col.rsqrt().contiguous();
    } else {
      stats_.narrow(0, s.stats_offset, s.numel).mul_(beta2t).add_(sums.narrow(0, s.stats_offset, s.numel), 1.0 - beta2t);
    }
  }
  // The unclipped updates of elements [a, b) of piece p (indices within the piece), a chunk at a
  // time into a buffer: f(first index, updates, count). The product loops run over a row segment's
  // contiguous columns and gradients, so they vectorize.
  const T* const st = stats_.data_ptr<T>();
  constexpr std::int64_t kUpdates = 1024;
  auto updates = [&](const Piece& p, std::int64_t a, std::int64_t b, const auto& f) {
    const Slot& s = slots_[p.slot];
    const G* gi = gp + base(p);
    T buf[kUpdates];
    for (std::int64_t c = a; c < b; c += kUpdates) {
      const std::int64_t m = std::min(kUpdates, b - c);
      if (s.rows > 0) {
        const T* r = row_factor[p.slot].data_ptr<T>();
        const T* cf = col_factor[p.slot].data_ptr<T>();
        segments(s, p.lo + c, p.lo + c + m, [&](std::int64_t row, std::int64_t first, std::int64_t end) {
          const T rv = r[row];
          const T* cv = cf + (row / s.rows) * s.cols + (first - row * s.cols);  // this slab's column factors
          const G* gg = gi + (first - p.lo);
          T* out = buf + (first - p.lo - c);
          for (std::int64_t j = 0; j < end - first; ++j) out[j] = (rv * cv[j]) * static_cast<T>(gg[j]);
        });
      } else {
        const T* v = st + s.stats_offset + p.lo + c;
        for (std::int64_t j = 0; j < m; ++j) buf[j] = (T(1) / std::sqrt(v[j])) * static_cast<T>(gi[c + j]);
      }
      f(c, static_cast<const T*>(buf), m);
    }
  };
  // 3. The squares' sums of the unclipped updates (for the RMS clip), summed over the ranks.
  at::Tensor update_sq = at::zeros({P}, at::kDouble);
  double* const usq = update_sq.data_ptr<double>();
  for (const Piece& p : pieces)
    usq[p.slot] = zs::blocked_sum(p.n, kBlock, [&](std::int64_t lo, std::int64_t hi) {
      double acc = 0;
      updates(p, lo, hi, [&](std::int64_t, const T* u, std::int64_t m) {
        acc += zs::lanes_sum(m, [u](std::int64_t k) { return static_cast<double>(u[k] * u[k]); });
      });
      return acc;
    });
  at::Tensor usq_state = update_sq.to(stats_.options());
  reduce(usq_state);
  const at::Tensor usq_cpu = usq_state.to(at::kDouble), sums_cpu = sums.narrow(0, S, P).to(at::kDouble);
  const double* param_sq = sums_cpu.data_ptr<double>();
  const double* upd_sq = usq_cpu.data_ptr<double>();
  // 4. Clip by the RMS, scale by the step size, the first moment, decay and update.
  for (const Piece& p : pieces) {
    const Slot& s = slots_[p.slot];
    const double n = static_cast<double>(s.numel);
    const double size = adafactor_step_size(o_, lr, step, std::sqrt(param_sq[p.slot] / n));
    const T div = static_cast<T>(std::max(1.0, std::sqrt(upd_sq[p.slot] / n) / o_.clip_threshold));
    const T scale = static_cast<T>(size), decay = static_cast<T>(-o_.weight_decay * size);
    const bool momentum = o_.beta1.has_value();
    const T b1 = static_cast<T>(o_.beta1.value_or(0.0)), one_minus_b1 = static_cast<T>(1.0 - o_.beta1.value_or(0.0));
    T* wi = wp + base(p);
    T* m = momentum ? exp_avg_.data_ptr<T>() + base(p) : nullptr;
    const bool decayed = o_.weight_decay != 0;
    zs::parallel_for(0, p.n, kBlock, [&](std::int64_t lo, std::int64_t hi) {
      updates(p, lo, hi, [&](std::int64_t first, const T* u, std::int64_t count) {
        T* w = wi + first;
        if (!momentum && !decayed) {  // (kohya's and OneTrainer's settings)
          for (std::int64_t j = 0; j < count; ++j) w[j] = w[j] - (u[j] / div) * scale;
          return;
        }
        T* mm = momentum ? m + first : nullptr;
        for (std::int64_t j = 0; j < count; ++j) {
          T v = (u[j] / div) * scale;
          if (momentum) v = mm[j] = mm[j] * b1 + one_minus_b1 * v;
          T x = w[j];
          if (decayed) x = x + decay * x;
          w[j] = x - v;
        }
      });
    });
  }
}

void AdafactorUnit::step(at::Tensor w, const at::Tensor& g, double lr, std::int64_t step, const Reduce& reduce) {
  c10::NoGradGuard no_grad;
  const auto dtype = stats_.scalar_type();
  if (w.is_cpu() && g.is_cpu() && stats_.is_cpu() && w.is_contiguous() && g.is_contiguous() && w.scalar_type() == dtype &&
      (!exp_avg_.defined() || exp_avg_.is_contiguous())) {
    const auto gt = g.scalar_type();
    if (dtype == at::kFloat && gt == at::kFloat) return step_loops<float, float>(w, g, lr, step, reduce);
    if (dtype == at::kFloat && gt == at::kBFloat16) return step_loops<float, at::BFloat16>(w, g, lr, step, reduce);
    if (dtype == at::kDouble && gt == at::kDouble) return step_loops<double, double>(w, g, lr, step, reduce);
  }
  // The tensor form (a GPU; other dtypes).
  const auto opts = stats_.options();
  const std::int64_t P = static_cast<std::int64_t>(slots_.size()), S = stats_.numel();
  const std::vector<Piece> pieces = owned_pieces();
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

StateLayout AdafactorUnit::layout(bool masters, std::int64_t element_bytes) const {
  std::int64_t stats = 0;
  for (std::size_t i = 0; i < slots_.size(); ++i) stats += statistics_numel(i);
  return adafactor_state_layout(owned_, stats, o_.beta1.has_value(), masters, element_bytes);
}

void AdafactorUnit::set_moment(Moment k, const at::Tensor& values) {
  if (k == Moment::first && exp_avg_.defined()) exp_avg_.copy_(values);
}

std::vector<Moment> AdafactorUnit::moments() const {
  if (o_.beta1) return {Moment::first};
  return {};
}

void AdafactorUnit::full_state(const UnitView& u, const MomentRead&, const Gather& gather, NamedTensors& out) const {
  // As transformers names them: exp_avg with beta1; exp_avg_sq_row and exp_avg_sq_col for two or
  // more dimensions, exp_avg_sq for one.
  at::Tensor m = exp_avg_;
  if (m.defined()) m = gather(m);
  for (std::size_t i = 0; i < u.params.size(); ++i) {
    const std::string& name = u.params[i].first;
    const auto& shape = u.shapes[i];
    if (m.defined()) out.emplace_back("exp_avg." + name, m.narrow(0, u.offsets[i], u.sizes[i]).view(shape).clone());
    const at::Tensor stats = statistics(i);
    if (shape.size() < 2) {
      out.emplace_back("exp_avg_sq." + name, stats.view(shape).clone());
      continue;
    }
    std::vector<std::int64_t> row(shape.begin(), shape.end() - 1), col(shape.begin(), shape.end() - 2);
    col.push_back(shape.back());
    const std::int64_t rows = c10::multiply_integers(row);
    out.emplace_back("exp_avg_sq_row." + name, stats.narrow(0, 0, rows).view(row).clone());
    out.emplace_back("exp_avg_sq_col." + name, stats.narrow(0, rows, stats.numel() - rows).view(col).clone());
  }
}

void AdafactorUnit::save_extra(const UnitView& u, const std::string& prefix, bool rank0, const at::TensorOptions& opts,
                               NamedTensors& out) const {
  if (!rank0) return;  // the same on every rank
  for (std::size_t i = 0; i < u.params.size(); ++i)
    out.emplace_back(prefix + "adafactor:" + u.params[i].first, statistics(i).to(at::kCPU).to(opts).contiguous().clone());
}

void AdafactorUnit::load(const UnitView& u, const Read& read, const MomentWrite&) {
  if (exp_avg_.defined()) exp_avg_.copy_(read("exp_avg", u.owned_offset, u.owned));
  for (std::size_t i = 0; i < u.params.size(); ++i) {
    at::Tensor stats = statistics(i);
    stats.copy_(read("adafactor:" + u.params[i].first, 0, stats.numel()));
  }
}

std::int64_t AdafactorUnit::checkpoint_bytes(const UnitView& u, bool rank0, std::int64_t element_bytes) const {
  std::int64_t total = UnitOptimizer::checkpoint_bytes(u, rank0, element_bytes);
  if (rank0)
    for (std::size_t i = 0; i < u.params.size(); ++i) total += statistics_numel(i) * element_bytes;
  return total;
}

}  // namespace zs::zero
