#include "models/attention.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <mutex>
#include <sstream>

#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/nn/module.h>

#include "core/torch_compat.h"

namespace zs::models {

namespace {

// ---- what ran, for the run log ----
struct PathsUsed {
  std::mutex mutex;
  std::array<std::int64_t, 3> nq{}, nk{};
};
PathsUsed& paths_used() {
  static PathsUsed p;
  return p;
}
void record(AttentionPath path, std::int64_t nq, std::int64_t nk) {
  auto& p = paths_used();
  const auto i = static_cast<std::size_t>(path);
  std::lock_guard lock(p.mutex);
  if (nq * nk > p.nq[i] * p.nk[i]) {
    p.nq[i] = nq;
    p.nk[i] = nk;
  }
}

/// Reduced-precision inputs are computed in fp32 block by block (the running max, sum and
/// output accumulate there); fp32 and fp64 stay as they are.
at::ScalarType compute_type(const at::Tensor& t) {
  const auto s = t.scalar_type();
  return s == at::kHalf || s == at::kBFloat16 ? at::kFloat : s;
}

/// Scores of one block: q_i k_jᵀ·scale (+ the mask's block), [BH, bq, bk] in the compute type.
at::Tensor block_scores(const at::Tensor& qi, const at::Tensor& kj, const at::Tensor& mask, std::int64_t i0,
                        std::int64_t j0, double scale) {
  at::Tensor s = at::bmm(qi, kj.transpose(1, 2)).mul_(scale);
  if (mask.defined()) s.add_(mask.narrow(0, i0, qi.size(1)).narrow(1, j0, kj.size(1)));
  return s;
}

/// The blocked path over heads-first tensors [BH, N, d]. Forward keeps q, k, v, the output and
/// the rows' log-sum-exp; backward recomputes each block's probabilities from them.
struct BlockedAttention : public torch::autograd::Function<BlockedAttention> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& q, const at::Tensor& k,
                            const at::Tensor& v, const at::Tensor& mask_arg, double scale, std::int64_t block_q,
                            std::int64_t block_k) {
    const auto ct = compute_type(q);
    const auto bh = q.size(0), nq = q.size(1), nk = k.size(1), d = q.size(2);
    const at::Tensor kc = k.to(ct), vc = v.to(ct);
    const at::Tensor mask = mask_arg.numel() > 0 ? mask_arg : at::Tensor();
    const at::Tensor mc = mask.defined() ? mask.to(ct) : at::Tensor();
    at::Tensor out = at::empty({bh, nq, d}, q.options());
    at::Tensor lse = at::empty({bh, nq, 1}, q.options().dtype(ct));
    const double neg_inf = -std::numeric_limits<double>::infinity();
    for (std::int64_t i0 = 0; i0 < nq; i0 += block_q) {
      const std::int64_t bq = std::min(block_q, nq - i0);
      const at::Tensor qi = q.narrow(1, i0, bq).to(ct);
      at::Tensor m = at::full({bh, bq, 1}, neg_inf, qi.options());
      at::Tensor safe_m;  // m with -inf (a row masked so far) as 0, so exp never sees inf - inf
      at::Tensor l = at::zeros({bh, bq, 1}, qi.options());
      at::Tensor acc = at::zeros({bh, bq, d}, qi.options());
      for (std::int64_t j0 = 0; j0 < nk; j0 += block_k) {
        const std::int64_t bk = std::min(block_k, nk - j0);
        at::Tensor p = block_scores(qi, kc.narrow(1, j0, bk), mc, i0, j0, scale);
        const at::Tensor m_new = at::maximum(m, std::get<0>(p.max(-1, /*keepdim=*/true)));
        const at::Tensor safe_new = m_new.masked_fill(m_new.isneginf(), 0.0);
        p.sub_(safe_new).exp_();
        const at::Tensor correction = (m - safe_new).exp_();  // 0 where m was -inf
        l.mul_(correction).add_(p.sum(-1, /*keepdim=*/true));
        acc.mul_(correction).baddbmm_(p, vc.narrow(1, j0, bk));
        m = m_new;
        safe_m = safe_new;
      }
      out.narrow(1, i0, bq).copy_(acc.div_(l));
      lse.narrow(1, i0, bq).copy_(safe_m.add(l.log()));
    }
    ctx->save_for_backward({q, k, v, out, lse});
    if (mask.defined()) ctx->saved_data["mask"] = mask;  // a constant: no gradient, not an input edge
    ctx->saved_data["scale"] = scale;
    ctx->saved_data["block_q"] = block_q;
    ctx->saved_data["block_k"] = block_k;
    return out;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &q = saved[0], &k = saved[1], &v = saved[2], &out = saved[3], &lse = saved[4];
    const at::Tensor mask = ctx->saved_data.count("mask") ? ctx->saved_data["mask"].toTensor() : at::Tensor();
    const double scale = ctx->saved_data["scale"].toDouble();
    const std::int64_t block_q = ctx->saved_data["block_q"].toInt(), block_k = ctx->saved_data["block_k"].toInt();
    const auto ct = compute_type(q);
    const auto nq = q.size(1), nk = k.size(1);
    at::NoGradGuard no_grad;
    const at::Tensor qc = q.to(ct), kc = k.to(ct), vc = v.to(ct), dout = grads[0].to(ct);
    const at::Tensor mc = mask.defined() ? mask.to(ct) : at::Tensor();
    // D_i = rowsum(dO ∘ O): the softmax backward's correction, one value per query row.
    const at::Tensor dsum = (dout * out.to(ct)).sum(-1, /*keepdim=*/true);
    at::Tensor dq = at::zeros_like(qc), dk = at::zeros_like(kc), dv = at::zeros_like(vc);
    for (std::int64_t i0 = 0; i0 < nq; i0 += block_q) {
      const std::int64_t bq = std::min(block_q, nq - i0);
      const at::Tensor qi = qc.narrow(1, i0, bq), doi = dout.narrow(1, i0, bq);
      const at::Tensor lse_i = lse.narrow(1, i0, bq), d_i = dsum.narrow(1, i0, bq);
      at::Tensor dqi = dq.narrow(1, i0, bq);
      for (std::int64_t j0 = 0; j0 < nk; j0 += block_k) {
        const std::int64_t bk = std::min(block_k, nk - j0);
        const at::Tensor kj = kc.narrow(1, j0, bk), vj = vc.narrow(1, j0, bk);
        at::Tensor p = block_scores(qi, kj, mc, i0, j0, scale).sub_(lse_i).exp_();
        at::Tensor dvj = dv.narrow(1, j0, bk), dkj = dk.narrow(1, j0, bk);
        dvj.baddbmm_(p.transpose(1, 2), doi);
        at::Tensor ds = at::bmm(doi, vj.transpose(1, 2)).sub_(d_i).mul_(p);  // dS = P ∘ (dP − D)
        dqi.baddbmm_(ds, kj, 1.0, scale);
        dkj.baddbmm_(ds.transpose(1, 2), qi, 1.0, scale);
      }
    }
    return {dq.to(q.scalar_type()), dk.to(k.scalar_type()), dv.to(v.scalar_type()), at::Tensor(), at::Tensor(),
            at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor multi_head_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, std::int64_t heads,
                                const at::Tensor& mask, const AttentionOptions& o) {
  const auto b = q.size(0), nq = q.size(1), nk = k.size(1), inner = q.size(2);
  const auto d = inner / heads;
  const AttentionPath path = choose_attention_path(o, nq, nk, q.is_cuda());
  record(path, nq, nk);
  if (compat::kHasFusedAttention && path == AttentionPath::fused) {
    auto heads_first = [&](const at::Tensor& t, std::int64_t n) { return t.reshape({b, n, heads, d}).transpose(1, 2); };
    const at::Tensor out = compat::scaled_dot_product_attention(heads_first(q, nq), heads_first(k, nk), heads_first(v, nk), mask);
    return out.transpose(1, 2).reshape({b, nq, inner});  // [B, H, Nq, d] -> [B, Nq, H·d]
  }
  // [B, N, H·d] -> [B·H, N, d]
  auto split = [&](const at::Tensor& t, std::int64_t n) {
    return t.reshape({b, n, heads, d}).permute({0, 2, 1, 3}).reshape({b * heads, n, d});
  };
  auto merge = [&](const at::Tensor& t) { return t.reshape({b, heads, nq, d}).permute({0, 2, 1, 3}).reshape({b, nq, inner}); };
  const at::Tensor qh = split(q, nq), kh = split(k, nk), vh = split(v, nk);
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  if (path == AttentionPath::blocked) {
    const AttentionBlocks blocks = attention_blocks(o, b * heads, nq, nk);
    // No mask: an empty tensor (LibTorch 1.13's apply needs defined tensor arguments).
    const at::Tensor m = mask.defined() ? mask.detach() : at::empty({0}, q.options());
    return merge(BlockedAttention::apply(qh.contiguous(), kh.contiguous(), vh.contiguous(), m, scale, blocks.q,
                                         blocks.k));
  }
  at::Tensor scores;
  if (mask.defined()) {
    scores = at::baddbmm(mask.unsqueeze(0).expand({b * heads, nq, nk}), qh, kh.transpose(1, 2), 1.0, scale);
  } else {
    scores = at::bmm(qh, kh.transpose(1, 2)).mul_(scale);  // [B·H, Nq, Nk]
  }
  return merge(at::bmm(at::softmax(scores, -1), vh));
}

at::Tensor causal_mask(std::int64_t n, at::ScalarType dtype, at::Device device) {
  return at::full({n, n}, -std::numeric_limits<float>::infinity(), at::TensorOptions().dtype(dtype).device(device))
      .triu_(1);
}

std::size_t set_attention_options(torch::nn::Module& root, const AttentionOptions& o) {
  std::size_t n = 0;
  for (const auto& m : root.modules(/*include_self=*/true)) {
    if (auto* site = dynamic_cast<AttentionSite*>(m.get())) {
      site->attention = o;
      ++n;
    }
  }
  return n;
}

std::string attention_paths_used() {
  auto& p = paths_used();
  std::lock_guard lock(p.mutex);
  std::ostringstream s;
  for (std::size_t i = 0; i < p.nq.size(); ++i) {
    if (p.nq[i] == 0) continue;
    if (s.tellp() > 0) s << ", ";
    s << attention_path_name(static_cast<AttentionPath>(i)) << " (up to " << p.nq[i] << "×" << p.nk[i] << " tokens)";
  }
  return s.str();
}

void reset_attention_paths_used() {
  auto& p = paths_used();
  std::lock_guard lock(p.mutex);
  p.nq.fill(0);
  p.nk.fill(0);
}

}  // namespace zs::models
