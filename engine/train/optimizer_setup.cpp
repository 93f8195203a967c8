#include "train/optimizer_setup.h"

#include <map>
#include <optional>

#include "core/error.h"
#include "comm/communicator.h"
#include "models/trainable_model.h"
#include "models/lora.h"
#include "models/model_family.h"
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

zero::ZeroOptions zero_options(const config::TrainerConfig& cfg) {
  const auto& z = cfg.zero;
  zero::ZeroOptions zo;
  zo.stage = static_cast<int>(z.stage);
  zo.reduce_bucket_size = z.reduce_bucket_size;
  zo.allgather_bucket_size = z.allgather_bucket_size;
  zo.persistence_threshold = z.stage3_param_persistence_threshold;
  zo.overlap_comm = z.overlap_comm;  // unset: the plan decides
  zo.prefetch_bucket_size = z.stage3_prefetch_bucket_size;
  zo.beta1 = cfg.optimizer.betas.at(0);
  zo.beta2 = cfg.optimizer.betas.at(1);
  zo.eps = cfg.optimizer.eps;
  zo.weight_decay = cfg.optimizer.weight_decay;
  zo.optimizer = zero::optimizer_from_name(cfg.optimizer.type);
  zo.master_weights = cfg.optimizer.master_weights != "none";
  zo.seed = static_cast<std::uint64_t>(cfg.training.seed);
  zo.fused_backward = cfg.optimizer.fused_backward;
  const auto& af = cfg.optimizer.adafactor;
  zo.adafactor.beta1 = af.beta1;
  zo.adafactor.decay_rate = af.decay_rate;
  zo.adafactor.eps1 = af.eps.at(0);
  zo.adafactor.eps2 = af.eps.at(1);
  zo.adafactor.clip_threshold = af.clip_threshold;
  zo.adafactor.weight_decay = cfg.optimizer.weight_decay;
  zo.adafactor.scale_parameter = af.scale_parameter;
  zo.adafactor.relative_step = af.relative_step;
  zo.adafactor.warmup_init = af.warmup_init;
  zo.offload_optimizer = zero::offload_from_name(z.offload_optimizer.device);
  zo.offload_param = zero::offload_from_name(z.offload_param.device);
  zo.optimizer_nvme_path = z.offload_optimizer.nvme_path;
  zo.param_nvme_path = z.offload_param.nvme_path;
  zo.sub_group_size = z.sub_group_size;
  zo.buffer_count = static_cast<int>(z.offload_optimizer.buffer_count);
  zo.delayed_update = z.offload_optimizer.delayed_update;
  zo.delayed_update_warmup = z.offload_optimizer.delayed_update_warmup;
  // CPU copies are pinned whenever CUDA is present (the pin_memory keys are read for DeepSpeed
  // compatibility; unpinned copies would only make the transfers slower).
  zo.pin_memory = true;
  zo.aio.block_size = z.aio.block_size;
  zo.aio.queue_depth = static_cast<int>(z.aio.queue_depth);
  zo.aio.threads = static_cast<int>(z.aio.intra_op_parallelism);
  zo.aio.single_submit = z.aio.single_submit;
  zo.aio.overlap_events = z.aio.overlap_events;
  return zo;
}

std::unique_ptr<zero::ShardedInit> make_sharded_init(const config::TrainerConfig& cfg, int world, int rank) {
  std::optional<at::ScalarType> shard_dtype;
  if (cfg.optimizer.master_weights == "none" && cfg.precision == "bf16") shard_dtype = at::kBFloat16;
  return std::make_unique<zero::ShardedInit>(zero::plan_options(zero_options(cfg), world, rank), shard_dtype);
}

std::unique_ptr<zero::ZeroOptimizer> make_optimizer(const config::TrainerConfig& cfg, const models::TrainedParts& trained,
                                                     models::TrainableModel& model,
                                          comm::Communicator& comm, at::ScalarType compute, const at::Device& device,
                                          const std::string& run_tag,
                                          std::function<void(const std::string&)> log,
                                          const zero::ShardedInit* sharded_init) {
  zero::ZeroOptions zo = zero_options(cfg);
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
  for (const models::RosterUnit& r : models::unit_roster(parts, trained)) {
    models::ParamUnit u = std::move(candidates.at(r.name));
    u.frozen = r.frozen;
    if (r.text_lr) u.lr_scale = te_scale;
    if (r.persistent) zo.persistent_units.push_back(r.name);
    units.push_back(std::move(u));
  }
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
