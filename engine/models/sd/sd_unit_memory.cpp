#include "models/sd/sd_unit_memory.h"

#include <algorithm>

#include "models/model_shape.h"

namespace zs::models {

namespace {

/// What every UNet unit shares: checkpointing keeps its input at its own level (the previous
/// output, or a fresh concatenation).
class UNetUnitMemory : public UnitMemory {
 public:
  std::optional<double> checkpointed_input(const UnitShape& u, const ActivationQuery& q) const override {
    return static_cast<double>(u.in_channels) * q.positions(u);
  }
};

/// norm1/SiLU/conv1 inputs, norm2/SiLU/conv2 inputs, the sum.
class ResnetMemory final : public UNetUnitMemory {
 public:
  UnitActivation activation(const UnitShape& u, const ActivationQuery& q) const override {
    const double s = q.positions(u), cin = static_cast<double>(u.in_channels), cout = static_cast<double>(u.out_channels);
    UnitActivation a;
    a.output = cout * s;
    a.saved = (2 * cin + 4 * cout + (u.concat_input ? cin : 0)) * s;
    a.transient = 2 * std::max(cin, cout) * s;
    return a;
  }
  /// conv1, conv2 (3×3: 3·O·I each kept), and a 1×1 conv_shortcut when the channels change
  /// (factored over its 1×1 kernel: twice its size).
  std::int64_t adafactor_state_elements(const UnitShape& u, std::int64_t parameters) const override {
    const std::int64_t cin = u.in_channels, cout = u.out_channels;
    const std::int64_t shortcut = cin != cout ? cin * cout : 0;
    const std::int64_t conv = 9 * (cin * cout + cout * cout) + shortcut;
    return 6 * (cin * cout + cout * cout) + 2 * shortcut + adafactor_linear_elements(u, std::max<std::int64_t>(parameters - conv, 0));
  }
};

/// Per block: LayerNorm outputs, q/k/v split into heads, merged heads, residual sums and the
/// GEGLU feed-forward (8C projection, 4C gelu and product), plus the attention probabilities
/// [heads, S, S] and [heads, S, T]. Around the blocks: norm, proj in/out. The blocked
/// self-attention keeps each row's log-sum-exp [heads, S] instead of its probabilities; its
/// backward allocates dq, dk, dv, a row sum and two score blocks.
class TransformerMemory final : public UNetUnitMemory {
 public:
  UnitActivation activation(const UnitShape& u, const ActivationQuery& q) const override {
    const double s = q.positions(u), cout = static_cast<double>(u.out_channels);
    const double t = static_cast<double>(q.context_tokens), h = static_cast<double>(u.heads);
    const double d = static_cast<double>(u.depth);
    const std::int64_t tokens = static_cast<std::int64_t>(s);
    const bool blocked = attention_blocked(q, tokens);
    UnitActivation a;
    // A piece of a split transformer passes tokens on (inner = C here) and keeps half of the
    // four around-the-blocks tensors when it has one end.
    a.output = cout * s;
    const double around = (u.projects_in ? 2 : 0) + (u.projects_out ? 2 : 0);
    a.saved = cout * s * (around + 28 * d) + d * h * ((blocked ? s : s * s) + s * t);
    a.transient = attention_transient(q, u.heads, tokens, cout, blocked);
    // The feed-forward's backward runs with everything saved; the self-attention's (the
    // largest temporaries) after the block's later parts were freed.
    a.peak = std::max(a.saved + 8 * cout * s, a.saved - cout * s * 22 - h * s * t + a.transient);
    return a;
  }
  /// proj_in/out as 1×1 convolutions (use_linear_projection false) are factored over their 1×1
  /// kernel, keeping twice their size.
  std::int64_t adafactor_state_elements(const UnitShape& u, std::int64_t parameters) const override {
    if (!u.conv_projection) return adafactor_linear_elements(u, parameters);
    const std::int64_t cout = u.out_channels;
    const std::int64_t projections = (u.projects_in ? cout * cout : 0) + (u.projects_out ? cout * cout : 0);
    return 2 * projections + adafactor_linear_elements(u, std::max<std::int64_t>(parameters - projections, 0));
  }
};

/// A 3×3 convolution (6·C² of statistics) and its bias.
class SamplerMemory : public UNetUnitMemory {
 public:
  std::int64_t adafactor_state_elements(const UnitShape& u, std::int64_t parameters) const override {
    const std::int64_t cout = u.out_channels;
    return 6 * cout * cout + adafactor_linear_elements(u, std::max<std::int64_t>(parameters - 9 * cout * cout, 0));
  }
};

class DownsamplerMemory final : public SamplerMemory {
 public:
  UnitActivation activation(const UnitShape& u, const ActivationQuery& q) const override {
    const double s = q.positions(u);
    UnitActivation a;
    a.output = static_cast<double>(u.out_channels) * s / 4;
    a.saved = a.output;
    a.transient = 2 * static_cast<double>(u.in_channels) * s;
    return a;
  }
};

/// The nearest-upsampled input and the conv output, both 4S.
class UpsamplerMemory final : public SamplerMemory {
 public:
  UnitActivation activation(const UnitShape& u, const ActivationQuery& q) const override {
    const double s = q.positions(u), cout = static_cast<double>(u.out_channels);
    UnitActivation a;
    a.output = 4 * cout * s;
    a.saved = 8 * cout * s;
    a.transient = 8 * cout * s;
    return a;
  }
};

}  // namespace

const UnitMemory& resnet_unit_memory() {
  static const ResnetMemory m;
  return m;
}

const UnitMemory& unet_transformer_unit_memory() {
  static const TransformerMemory m;
  return m;
}

const UnitMemory& downsampler_unit_memory() {
  static const DownsamplerMemory m;
  return m;
}

const UnitMemory& upsampler_unit_memory() {
  static const UpsamplerMemory m;
  return m;
}

}  // namespace zs::models
