#include "config/zero_settings.h"

#include "models/model_family.h"

namespace zs::config {

zero::ZeroOptions zero_options(const TrainerConfig& cfg) {
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

bool zero3_init_applies(const TrainerConfig& cfg) {
  const bool lora_on_preset = models::resolve_trained_parts(cfg).lora && cfg.model.path.empty();
  return cfg.zero.stage == 3 && cfg.zero.zero3_init_flag && !lora_on_preset;
}

bool builds_into_shards(const TrainerConfig& cfg) { return zero3_init_applies(cfg) && !quantizes_while_loading(cfg); }

bool quantizes_while_loading(const TrainerConfig& cfg) {
  return cfg.model.base_precision != "bf16" && !cfg.model.path.empty() && models::resolve_trained_parts(cfg).lora;
}

}  // namespace zs::config
