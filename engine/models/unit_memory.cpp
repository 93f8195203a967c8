#include "models/unit_memory.h"

#include <algorithm>
#include <cmath>

#include "models/model_shape.h"

namespace zs::models {

double ActivationQuery::positions(const UnitShape& u) const {
  return std::pow(static_cast<double>(std::max<std::int64_t>(side >> u.level, 1)), 2);
}

std::int64_t adafactor_linear_elements(const UnitShape& u, std::int64_t parameters) {
  const std::int64_t width = std::max({u.in_channels, u.out_channels, std::int64_t{1}});
  return width >= 32 ? parameters * 4 / width : parameters / 8;
}

std::int64_t UnitMemory::adafactor_state_elements(const UnitShape& u, std::int64_t parameters) const {
  return adafactor_linear_elements(u, parameters);
}

double attention_transient(const ActivationQuery& q, std::int64_t heads, std::int64_t tokens, double channels, bool blocked) {
  const double n = static_cast<double>(tokens), h = static_cast<double>(heads);
  if (!blocked) return 2 * h * n * n;
  const std::int64_t batch = std::max<std::int64_t>(q.batch_size, 1), bh = batch * heads;
  const AttentionBlocks b = attention_blocks(q.attention, bh, tokens, tokens);
  return 3 * channels * n + h * n + 2 * static_cast<double>(bh * b.q * b.k) / static_cast<double>(batch);
}

bool attention_blocked(const ActivationQuery& q, std::int64_t tokens) {
  return choose_attention_path(q.attention, tokens, tokens, false) != AttentionPath::plain;
}

namespace {

/// conv_in's output; norm, SiLU and conv_out at the end; the loss terms (Flux's and Qwen-Image's
/// io are counted alike: x_embedder, the embeddings and proj_out).
class IoMemory final : public UnitMemory {
 public:
  UnitActivation activation(const UnitShape& u, const ActivationQuery& q) const override {
    const double s = q.positions(u), cin = static_cast<double>(u.in_channels), cout = static_cast<double>(u.out_channels);
    UnitActivation a;
    a.output = cout * s;
    a.saved = (3 * cout + 4 * static_cast<double>(q.model_out_channels) + cin) * s;
    a.transient = 2 * cout * s;
    return a;
  }
  std::optional<double> checkpointed_input(const UnitShape&, const ActivationQuery&) const override { return std::nullopt; }
  /// Convolutions of few channels, embeddings.
  std::int64_t adafactor_state_elements(const UnitShape&, std::int64_t parameters) const override {
    return parameters * 2 / 3;
  }
};

/// models/clip_text_model.cpp per layer: LayerNorms, q/k/v, the merged heads, the MLP (4× and
/// its quick GELU), residuals — about 16·T·dim — and the probabilities [heads, T, T] twice.
class TextEncoderMemory final : public UnitMemory {
 public:
  UnitActivation activation(const UnitShape& u, const ActivationQuery& q) const override {
    const double t = static_cast<double>(q.context_tokens), dim = static_cast<double>(u.in_channels);
    const double h = static_cast<double>(u.heads);
    UnitActivation a;
    a.output = dim * t;
    a.saved = static_cast<double>(u.depth) * (16 * dim * t + 2 * h * t * t) + 2 * dim * t;
    a.transient = 2 * h * t * t;
    return a;
  }
  std::optional<double> checkpointed_input(const UnitShape&, const ActivationQuery&) const override { return std::nullopt; }
};

/// Over the joint sequence N = image tokens + text tokens (models/flux/flux_transformer.cpp):
/// modulated LayerNorm outputs, q/k/v, their RMS-normed and rotated copies, the attention
/// output, the gated residuals and the 4× MLP (projection and GELU) — about 24·N·C for a joint
/// block (two streams' worth of small tensors), 25·N·C for a single block (its MLP input and the
/// [attention, MLP] concatenation) — plus the attention's probabilities [heads, N, N], or with
/// the blocked path each row's log-sum-exp.
class FlowBlockMemory final : public UnitMemory {
 public:
  explicit FlowBlockMemory(double per_token_channel) : per_token_channel_(per_token_channel) {}
  UnitActivation activation(const UnitShape& u, const ActivationQuery& q) const override {
    const double n = tokens(u, q), h = static_cast<double>(u.heads), c = static_cast<double>(u.out_channels);
    const bool blocked = attention_blocked(q, static_cast<std::int64_t>(n));
    UnitActivation a;
    a.output = c * n;
    a.saved = per_token_channel_ * c * n + h * (blocked ? n : n * n);
    a.transient = attention_transient(q, u.heads, static_cast<std::int64_t>(n), c, blocked);
    a.peak = std::max(a.saved + 8 * c * n, a.saved + a.transient);
    return a;
  }
  /// The input is the whole joint sequence, text tokens too.
  std::optional<double> checkpointed_input(const UnitShape& u, const ActivationQuery& q) const override {
    return static_cast<double>(u.in_channels) * tokens(u, q);
  }

 private:
  static double tokens(const UnitShape& u, const ActivationQuery& q) {
    return q.positions(u) + static_cast<double>(q.context_tokens);
  }
  double per_token_channel_;
};

}  // namespace

const UnitMemory& io_unit_memory() {
  static const IoMemory m;
  return m;
}

const UnitMemory& text_encoder_unit_memory() {
  static const TextEncoderMemory m;
  return m;
}

const UnitMemory& joint_block_unit_memory() {
  static const FlowBlockMemory m(24);
  return m;
}

const UnitMemory& single_block_unit_memory() {
  static const FlowBlockMemory m(25);
  return m;
}

}  // namespace zs::models
