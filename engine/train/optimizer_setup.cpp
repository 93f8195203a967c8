#include "train/optimizer_setup.h"

#include <algorithm>
#include <map>
#include <optional>

#include "core/error.h"
#include "comm/communicator.h"
#include "models/trainable_model.h"
#include "models/lora.h"
#include "models/model_family.h"
#include "models/denoiser_module.h"
#include "models/quantized_base.h"
#include "core/text.h"
#include "zero/sharded_init.h"
#include "zero/zero_optimizer.h"

namespace zs::train {

at::ScalarType compute_dtype(const std::string& precision, const c10::Device& device) {
  if (precision == "bf16") return at::kBFloat16;
  if (precision == "fp16") {
    if (!device.is_cuda())
      throw Error(ErrorKind::config, "precision: fp16 needs a CUDA GPU: LibTorch has no fp16 convolution or group "
                                     "norm on the CPU. Use precision: bf16 (it runs on the CPU) or fp32.");
    return at::kHalf;
  }
  return at::kFloat;
}

std::unique_ptr<zero::ShardedInit> make_sharded_init(const config::TrainerConfig& cfg, int world, int rank) {
  std::optional<at::ScalarType> shard_dtype;
  // Shards without float32 masters keep the compute dtype: bf16 weights without masters, and a
  // LoRA run's frozen base (the only units built into shards then; it never needs float32 again).
  const bool lora = models::resolve_trained_parts(cfg).lora;
  if ((cfg.optimizer.master_weights == "none" || lora) && cfg.precision == "bf16") shard_dtype = at::kBFloat16;
  if (lora && cfg.precision == "fp16") shard_dtype = at::kHalf;
  // Parameters on NVMe: the shards go to a spill file there as they are cut (host memory holds one
  // unit while loading, not the model).
  const std::string spill = cfg.zero.offload_param.device == "nvme" ? cfg.zero.offload_param.nvme_path : std::string();
  return std::make_unique<zero::ShardedInit>(zero::plan_options(config::zero_options(cfg), world, rank), shard_dtype, spill);
}

std::unique_ptr<zero::ZeroOptimizer> make_optimizer(const config::TrainerConfig& cfg, const models::TrainedParts& trained,
                                                     models::TrainableModel& model,
                                          comm::Communicator& comm, at::ScalarType compute, const at::Device& device,
                                          const std::string& run_tag,
                                          std::function<void(const std::string&)> log,
                                          const zero::ShardedInit* sharded_init) {
  zero::ZeroOptions zo = config::zero_options(cfg);
  // Every unit the model could give, by name; the family's roster (models/model_family.h, the
  // same one the estimator counts) decides which of them train, which are frozen, which stay
  // whole at stage 3, and their order.
  std::map<std::string, models::ParamUnit> candidates;
  models::RosterParts parts;
  std::vector<models::ParamUnit> denoiser_units = model.denoiser_units();
  if (sharded_init) sharded_init->attach(denoiser_units);
  for (auto& u : denoiser_units) {
    parts.denoiser.emplace_back(u.name, u.numel());
    candidates.emplace(u.name, std::move(u));
  }
  if (trained.lora) {
    models::ParamUnit adapters = model.denoiser_adapters();
    parts.denoiser_adapters = adapters.numel();
    parts.denoiser_adapters_name = adapters.name;
    candidates.emplace(adapters.name, std::move(adapters));
  }
  for (auto& [component, encoder] : model.text_encoder_modules()) {
    models::ParamUnit whole{component, {}};
    for (const auto& p : encoder->named_parameters()) whole.parameters.emplace_back(component + "." + p.key(), p.value());
    parts.text_encoders.emplace_back(component, whole.numel());
    candidates.emplace(component, std::move(whole));
    std::int64_t adapter_numel = 0;
    if (trained.text == models::TextEncoderTraining::lora) {
      models::ParamUnit adapters = models::lora_unit(*encoder, models::text_adapter_unit(component), component + ".");
      adapter_numel = adapters.numel();
      candidates.emplace(adapters.name, std::move(adapters));
    }
    parts.text_encoder_adapters.push_back(adapter_numel);
  }
  const double te_scale = cfg.optimizer.text_encoder_lr && cfg.optimizer.lr > 0 ? *cfg.optimizer.text_encoder_lr / cfg.optimizer.lr : 1.0;
  std::vector<models::ParamUnit> units;
  zo.persistent_units.clear();
  // A quantized base (model.base_precision): each frozen block unit's Linear weights become codes
  // and scales, one unit at a time (the rest of the base still waits in its loaded precision); the
  // io unit (embedders, final layer) stays in the compute dtype.
  const quant::BaseFormat base_format = quant::base_format_from_string(cfg.model.base_precision);
  std::optional<models::BaseQuantizer> quantizer;
  if (base_format != quant::BaseFormat::bf16 && model.denoiser()) quantizer.emplace(*model.denoiser(), base_format);
  models::QuantizedBytes quantized;
  for (const models::RosterUnit& r : models::unit_roster(parts, trained)) {
    models::ParamUnit u = std::move(candidates.at(r.name));
    u.frozen = r.frozen;
    const bool block = !parts.denoiser.empty() && r.name != parts.denoiser.front().first &&
                       std::any_of(parts.denoiser.begin(), parts.denoiser.end(), [&](const auto& d) { return d.first == r.name; });
    if (quantizer && u.frozen && block) quantized += quantizer->quantize(u);
    if (r.text_lr) u.lr_scale = te_scale;
    if (r.persistent) zo.persistent_units.push_back(r.name);
    units.push_back(std::move(u));
  }
  // (a base quantized while it loaded was reported then: config::quantizes_while_loading)
  if (quantized.before > 0 && log)
    log("base: " + std::to_string(quantized.layers) + " Linear weights of the frozen blocks quantized to " +
        cfg.model.base_precision + " (" + format_bytes(quantized.before) + " -> " + format_bytes(quantized.after) + ")");
  zo.compute_dtype = compute;
  zo.device = device;
  zo.run_tag = run_tag;
  zo.log = std::move(log);
  auto zero_opt = std::make_unique<zero::ZeroOptimizer>(std::move(units), comm, std::move(zo));
  model.set_unit_hooks(zero_opt->unit_hooks());
  return zero_opt;
}

LossScalerOptions loss_scaler_options(const config::LossScalingConfig& c) {
  LossScalerOptions o;
  o.static_scale = c.loss_scale;
  o.initial_scale_power = static_cast<int>(c.initial_scale_power);
  o.window = c.loss_scale_window;
  o.hysteresis = static_cast<int>(c.hysteresis);
  o.min_scale = c.min_loss_scale;
  return o;
}

}  // namespace zs::train
