#include "train/optimizer_setup.h"

#include "core/error.h"
#include "comm/communicator.h"
#include "models/sd/diffusion_model.h"
#include "models/lora.h"
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
  zo.offload_optimizer = zero::offload_from_name(z.offload_optimizer.device);
  zo.offload_param = zero::offload_from_name(z.offload_param.device);
  zo.optimizer_nvme_path = z.offload_optimizer.nvme_path;
  zo.param_nvme_path = z.offload_param.nvme_path;
  zo.sub_group_size = z.sub_group_size;
  zo.buffer_count = static_cast<int>(z.offload_optimizer.buffer_count);
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

std::unique_ptr<zero::ZeroOptimizer> make_optimizer(const config::TrainerConfig& cfg, models::DiffusionModel& model,
                                          comm::Communicator& comm, at::ScalarType compute, const at::Device& device,
                                          const std::string& run_tag,
                                          std::function<void(const std::string&)> log,
                                          const zero::ShardedInit* sharded_init) {
  zero::ZeroOptions zo = zero_options(cfg);
  std::vector<models::ParamUnit> units = model.unet->units();
  if (sharded_init) sharded_init->attach(units);
  for (auto& u : units)
    for (auto& [name, p] : u.parameters) name = "unet." + name;
  if (cfg.training.method == "lora") {
    // The UNet's units are its frozen base (moved, and at stage 3 partitioned and gathered, as
    // trained ones; no gradients or optimizer state); the adapters are one trained unit after
    // them, kept whole at stage 3.
    for (auto& u : units) u.frozen = true;
    units.push_back(models::lora_unit(*model.unet, "lora_unet", "unet."));
    zo.persistent_units.push_back("lora_unet");
  }
  // Trained text encoders: one unit each (after the UNet's, whose indices the hooks use), with
  // their own learning rate relative to the UNet's; frozen ones are not optimized or sharded.
  const double te_scale = cfg.optimizer.text_encoder_lr && cfg.optimizer.lr > 0 ? *cfg.optimizer.text_encoder_lr / cfg.optimizer.lr : 1.0;
  for (auto& [component, encoder] : model.text_encoders()) {
    // The whole encoder as one unit, named after its component.
    models::ParamUnit whole{component, {}};
    for (const auto& p : encoder->named_parameters()) whole.parameters.emplace_back(component + "." + p.key(), p.value());
    if (model.text_training == models::TextEncoderTraining::full) {
      whole.lr_scale = te_scale;
      units.push_back(std::move(whole));
    } else if (model.text_training == models::TextEncoderTraining::lora) {
      // The encoder's base as a frozen unit (kept whole: it runs once, before the UNet), then its adapters.
      whole.frozen = true;
      units.push_back(std::move(whole));
      zo.persistent_units.push_back(component);
      units.push_back(models::lora_unit(*encoder, "lora_" + component, component + "."));
      units.back().lr_scale = te_scale;
    } else {
      continue;
    }
    zo.persistent_units.push_back(units.back().name);
  }
  zo.compute_dtype = compute;
  zo.device = device;
  zo.run_tag = run_tag;
  zo.log = std::move(log);
  auto zero_opt = std::make_unique<zero::ZeroOptimizer>(std::move(units), comm, std::move(zo));
  model.unet->set_unit_hooks(zero_opt->unit_hooks());
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
