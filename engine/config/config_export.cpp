// Trainer config -> accelerate YAML and DeepSpeed JSON.
#include <filesystem>
#include <map>

#include <nlohmann/json.hpp>

#include "config/config_import.h"
#include "config/config_writer.h"
#include "io/atomic_file.h"

namespace zs::config {

using json = nlohmann::json;

json to_deepspeed_json(const TrainerConfig& c) {
  json j;
  const auto& t = c.training;
  j["train_batch_size"] = t.batch_size * t.gradient_accumulation_steps * c.launch.num_processes;
  j["train_micro_batch_size_per_gpu"] = t.batch_size;
  j["gradient_accumulation_steps"] = t.gradient_accumulation_steps;
  j["gradient_clipping"] = t.gradient_clipping;
  const auto& ls = c.loss_scaling;
  j["fp16"] = {{"enabled", c.precision == "fp16"},
               {"loss_scale", ls.loss_scale},
               {"initial_scale_power", ls.initial_scale_power},
               {"loss_scale_window", ls.loss_scale_window},
               {"hysteresis", ls.hysteresis},
               {"min_loss_scale", ls.min_loss_scale}};
  j["bf16"] = {{"enabled", c.precision == "bf16"}};
  const auto& o = c.optimizer;
  // DeepSpeed has no 8-bit AdamW or Adafactor of its own: those leave the block out (a script
  // passes its own optimizer to deepspeed.initialize then, as kohya's and OneTrainer's do).
  if (o.type == "AdamW")
    j["optimizer"] = {{"type", o.type},
                      {"params", {{"lr", o.lr}, {"betas", o.betas}, {"eps", o.eps}, {"weight_decay", o.weight_decay}}}};
  const auto& s = c.scheduler;
  if (s.type == "WarmupLR" || s.type == "WarmupDecayLR") {
    json p = {{"warmup_min_lr", s.warmup_min_lr},
              {"warmup_max_lr", o.lr},
              {"warmup_num_steps", s.warmup_steps},
              {"warmup_type", s.warmup_type}};
    if (s.type == "WarmupDecayLR") p["total_num_steps"] = c.schedule_steps();
    j["scheduler"] = {{"type", s.type}, {"params", p}};
  } else if (s.type == "cosine") {
    j["scheduler"] = {{"type", "WarmupCosineLR"},
                      {"params",
                       {{"total_num_steps", c.schedule_steps()},
                        {"warmup_num_steps", s.warmup_steps},
                        {"warmup_min_ratio", o.lr > 0 ? s.warmup_min_lr / o.lr : 0.0},
                        {"cos_min_ratio", o.lr > 0 ? s.min_lr / o.lr : 0.0},
                        {"warmup_type", s.warmup_type}}}};
  }
  const auto& z = c.zero;
  json zo = {{"stage", z.stage},
             {"reduce_bucket_size", z.reduce_bucket_size},
             {"allgather_bucket_size", z.allgather_bucket_size},
             {"contiguous_gradients", z.contiguous_gradients},
             {"stage3_prefetch_bucket_size", z.stage3_prefetch_bucket_size},
             {"stage3_param_persistence_threshold", z.stage3_param_persistence_threshold},
             {"stage3_max_live_parameters", z.stage3_max_live_parameters},
             {"stage3_max_reuse_distance", z.stage3_max_reuse_distance},
             {"stage3_gather_16bit_weights_on_model_save", z.stage3_gather_16bit_weights_on_model_save},
             {"sub_group_size", z.sub_group_size}};
  if (z.overlap_comm) zo["overlap_comm"] = *z.overlap_comm;
  json oo = {{"device", z.offload_optimizer.device},
             {"pin_memory", z.offload_optimizer.pin_memory},
             {"buffer_count", z.offload_optimizer.buffer_count}};
  if (!z.offload_optimizer.nvme_path.empty()) oo["nvme_path"] = z.offload_optimizer.nvme_path;
  zo["offload_optimizer"] = oo;
  json op = {{"device", z.offload_param.device},
             {"pin_memory", z.offload_param.pin_memory},
             {"buffer_count", z.offload_param.buffer_count},
             {"buffer_size", z.offload_param.buffer_size},
             {"max_in_cpu", z.offload_param.max_in_cpu}};
  if (!z.offload_param.nvme_path.empty()) op["nvme_path"] = z.offload_param.nvme_path;
  zo["offload_param"] = op;
  j["zero_optimization"] = zo;
  j["aio"] = {{"block_size", z.aio.block_size},
              {"queue_depth", z.aio.queue_depth},
              {"intra_op_parallelism", z.aio.intra_op_parallelism},
              {"single_submit", z.aio.single_submit},
              {"overlap_events", z.aio.overlap_events}};
  if (t.gradient_checkpointing)
    j["activation_checkpointing"] = {
        {"partition_activations", false}, {"cpu_checkpointing", t.cpu_checkpointing},
        {"contiguous_memory_optimization", false}};
  return j;
}

std::string to_accelerate_yaml(const TrainerConfig& c, const std::string& deepspeed_config_file) {
  // accelerate writes its keys sorted; so do we (std::map).
  std::map<std::string, std::string> ds;
  if (deepspeed_config_file.empty()) {
    ds["gradient_accumulation_steps"] = std::to_string(c.training.gradient_accumulation_steps);
    if (c.training.gradient_clipping > 0) ds["gradient_clipping"] = format_double(c.training.gradient_clipping);
    ds["offload_optimizer_device"] = c.zero.offload_optimizer.device;
    ds["offload_param_device"] = c.zero.offload_param.device;
    if (!c.zero.offload_optimizer.nvme_path.empty())
      ds["offload_optimizer_nvme_path"] = yaml_scalar(c.zero.offload_optimizer.nvme_path);
    if (!c.zero.offload_param.nvme_path.empty())
      ds["offload_param_nvme_path"] = yaml_scalar(c.zero.offload_param.nvme_path);
    ds["zero3_save_16bit_model"] = c.zero.stage3_gather_16bit_weights_on_model_save ? "true" : "false";
    ds["zero_stage"] = std::to_string(c.zero.stage);
  } else {
    ds["deepspeed_config_file"] = yaml_scalar(deepspeed_config_file);
  }
  ds["zero3_init_flag"] = c.zero.zero3_init_flag ? "true" : "false";

  std::map<std::string, std::string> top = {
      {"compute_environment", "LOCAL_MACHINE"},
      {"debug", "false"},
      {"distributed_type", "DEEPSPEED"},
      {"downcast_bf16", "'no'"},
      {"machine_rank", std::to_string(c.launch.machine_rank)},
      {"main_training_function", "main"},
      {"num_machines", std::to_string(c.launch.num_machines)},
      {"num_processes", std::to_string(c.launch.num_processes)},
      {"rdzv_backend", "static"},
      {"same_network", "true"},
      {"tpu_env", "[]"},
      {"tpu_use_cluster", "false"},
      {"tpu_use_sudo", "false"},
      {"use_cpu", c.launch.use_cpu ? "true" : "false"},
  };
  if (deepspeed_config_file.empty()) top["mixed_precision"] = c.precision == "fp32" ? "'no'" : c.precision;
  if (c.launch.num_machines > 1) {
    top["main_process_ip"] = yaml_scalar(c.launch.main_process_ip);
    top["main_process_port"] = std::to_string(c.launch.main_process_port);
  }
  std::string out;
  bool ds_written = false;
  for (const auto& [key, value] : top) {
    if (!ds_written && key > "deepspeed_config") {
      out += "deepspeed_config:\n";
      for (const auto& [k, v] : ds) out += "  " + k + ": " + v + "\n";
      ds_written = true;
    }
    out += key + ": " + value + "\n";
  }
  return out;
}

void write_launch_files(const TrainerConfig& config, const std::string& accelerate_yaml, const std::string& deepspeed_json) {
  namespace fs = std::filesystem;
  std::string json_ref;
  if (!deepspeed_json.empty()) {
    io::write_file_atomic(deepspeed_json, to_deepspeed_json(config).dump(2) + "\n");
    // The YAML points at the JSON relative to its own folder, which import also searches.
    json_ref = accelerate_yaml.empty() ? deepspeed_json
                                       : fs::relative(fs::absolute(deepspeed_json), fs::absolute(accelerate_yaml).parent_path()).string();
  }
  if (!accelerate_yaml.empty()) io::write_file_atomic(accelerate_yaml, to_accelerate_yaml(config, json_ref));
}

}  // namespace zs::config
