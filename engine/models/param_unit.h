#pragma once
// Parameter units: the groups of parameters that ZeRO shards and gathers one at a time.

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>

namespace torch::nn {
class Module;
}

namespace zs::models {

/// Called as soon as each unit (resnet, transformer or a piece of one, sampler) is built, with
/// the unit's name, the module prefix its parameter names are relative to
/// ("down_blocks.0.resnets.0"; a transformer's for its pieces) and a module holding exactly the
/// unit's parameters in optimizer order: ZeRO-3's sharded init loads it, keeps this rank's shard
/// and empties it before the next unit exists. A loader that reads the unit from model files
/// first leaves unread the names `supplies` claims (relative to the prefix): the callback fills
/// them itself (a quantized base's cached codes, train/base_cache.h).
class UnitBuilt {
 public:
  using Fn = std::function<void(const std::string& unit, const std::string& prefix, torch::nn::Module& module)>;
  using Supplies = std::function<bool(const std::string& unit, const std::string& name)>;

  UnitBuilt() = default;
  template <class F, class = std::enable_if_t<!std::is_same_v<std::decay_t<F>, UnitBuilt> && std::is_constructible_v<Fn, F>>>
  UnitBuilt(F&& fn) : fn_(std::forward<F>(fn)) {}  // NOLINT(google-explicit-constructor): a callback
  UnitBuilt(Fn fn, Supplies supplies) : fn_(std::move(fn)), supplies_(std::move(supplies)) {}

  explicit operator bool() const { return static_cast<bool>(fn_); }
  void operator()(const std::string& unit, const std::string& prefix, torch::nn::Module& module) const {
    fn_(unit, prefix, module);
  }
  /// Whether the callback fills `name` of `unit` itself (the loader does not read it).
  bool supplies(const std::string& unit, const std::string& name) const { return supplies_ && supplies_(unit, name); }

 private:
  Fn fn_;
  Supplies supplies_;
};


/// One unit: a resnet, a transformer, a sampler, or the model's small in/out layers together.
struct ParamUnit {
  std::string name;                                            ///< e.g. "down_blocks.0.resnets.0" or "io"
  std::vector<std::pair<std::string, at::Tensor>> parameters;  ///< full parameter names, in module order
  /// Built straight into shards (zero3_init_flag, zero/sharded_init.h): this rank's part of the
  /// flattened, padded values (full precision) and each parameter's shape; the parameters
  /// themselves are empty placeholders. Undefined otherwise.
  at::Tensor shard;
  std::vector<std::vector<std::int64_t>> shapes;
  /// This unit's learning rate relative to the one each step is given (a text encoder trained
  /// with optimizer.text_encoder_lr: that over optimizer.lr, so the schedule shapes both alike).
  double lr_scale = 1.0;
  /// Frozen (LoRA's base): the optimizer lays the unit out, moves it to the compute device and
  /// dtype and, where the plan shards it (stage 3), keeps only this rank's shard and gathers it
  /// around the unit's forward and backward like a trained unit; but it takes no gradient,
  /// master, moments, EMA or checkpoint space, and is never updated.
  bool frozen = false;
  /// Frozen units only, per parameter (empty: none): kept in its own dtype instead of the compute
  /// dtype — a quantized base's codes and scales (models/quantized_base.h). A unit with any is laid
  /// out, sharded, offloaded and gathered as bytes.
  std::vector<bool> raw;
  bool has_raw() const;
  /// Number of elements over all parameters.
  std::int64_t numel() const;
};

/// A denoiser's units named `names` (the first "io": every parameter no other name claims), the
/// parameters of unit `n` those of `module` whose names start with "<n>."; in module order.
std::vector<ParamUnit> units_by_prefix(const torch::nn::Module& module, const std::vector<std::string>& names);

/// Hooks around each unit's forward that may wrap the unit's main input and output (ZeRO
/// stage 3 gathers parameters there and attaches autograd nodes that re-gather them before the
/// unit's backward and reduce its gradients after it). Index 0 (the io unit) is reported only
/// for the whole forward: before(0, sample) at the start, after(0, prediction) at the end.
class UnitHooks {
 public:
  virtual ~UnitHooks() = default;
  virtual at::Tensor before(std::size_t unit, const at::Tensor& input) = 0;
  virtual at::Tensor after(std::size_t unit, const at::Tensor& output) = 0;
};

}  // namespace zs::models
