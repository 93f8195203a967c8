// DeepSpeed JSON -> trainer leaves.
#include <cmath>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "config/config_import.h"

namespace zs::config {

namespace {

using json = nlohmann::json;

// DeepSpeed key -> trainer key, for values that map one to one.
const std::map<std::string, std::string>& direct_keys() {
  static const std::map<std::string, std::string> m = {
      {"train_micro_batch_size_per_gpu", "training.batch_size"},
      {"gradient_accumulation_steps", "training.gradient_accumulation_steps"},
      {"gradient_clipping", "training.gradient_clipping"},
      {"fp16.loss_scale", "loss_scaling.loss_scale"},
      {"fp16.initial_scale_power", "loss_scaling.initial_scale_power"},
      {"fp16.loss_scale_window", "loss_scaling.loss_scale_window"},
      {"fp16.hysteresis", "loss_scaling.hysteresis"},
      {"fp16.min_loss_scale", "loss_scaling.min_loss_scale"},
      {"optimizer.params.lr", "optimizer.lr"},
      {"optimizer.params.betas", "optimizer.betas"},
      {"optimizer.params.eps", "optimizer.eps"},
      {"optimizer.params.weight_decay", "optimizer.weight_decay"},
      {"scheduler.params.warmup_min_lr", "scheduler.warmup_min_lr"},
      {"scheduler.params.warmup_num_steps", "scheduler.warmup_steps"},
      {"scheduler.params.warmup_type", "scheduler.warmup_type"},
      {"zero_optimization.stage", "zero.stage"},
      {"zero_optimization.offload_optimizer.device", "zero.offload_optimizer.device"},
      {"zero_optimization.offload_optimizer.nvme_path", "zero.offload_optimizer.nvme_path"},
      {"zero_optimization.offload_optimizer.pin_memory", "zero.offload_optimizer.pin_memory"},
      {"zero_optimization.offload_optimizer.buffer_count", "zero.offload_optimizer.buffer_count"},
      {"zero_optimization.offload_param.device", "zero.offload_param.device"},
      {"zero_optimization.offload_param.nvme_path", "zero.offload_param.nvme_path"},
      {"zero_optimization.offload_param.pin_memory", "zero.offload_param.pin_memory"},
      {"zero_optimization.offload_param.buffer_count", "zero.offload_param.buffer_count"},
      {"zero_optimization.offload_param.buffer_size", "zero.offload_param.buffer_size"},
      {"zero_optimization.offload_param.max_in_cpu", "zero.offload_param.max_in_cpu"},
      {"zero_optimization.reduce_bucket_size", "zero.reduce_bucket_size"},
      {"zero_optimization.allgather_bucket_size", "zero.allgather_bucket_size"},
      {"zero_optimization.overlap_comm", "zero.overlap_comm"},
      {"zero_optimization.contiguous_gradients", "zero.contiguous_gradients"},
      {"zero_optimization.stage3_prefetch_bucket_size", "zero.stage3_prefetch_bucket_size"},
      {"zero_optimization.stage3_param_persistence_threshold", "zero.stage3_param_persistence_threshold"},
      {"zero_optimization.stage3_max_live_parameters", "zero.stage3_max_live_parameters"},
      {"zero_optimization.stage3_max_reuse_distance", "zero.stage3_max_reuse_distance"},
      {"zero_optimization.stage3_gather_16bit_weights_on_model_save",
       "zero.stage3_gather_16bit_weights_on_model_save"},
      {"zero_optimization.sub_group_size", "zero.sub_group_size"},
      {"aio.block_size", "zero.aio.block_size"},
      {"aio.queue_depth", "zero.aio.queue_depth"},
      {"aio.intra_op_parallelism", "zero.aio.intra_op_parallelism"},
      {"aio.thread_count", "zero.aio.intra_op_parallelism"},
      {"aio.single_submit", "zero.aio.single_submit"},
      {"aio.overlap_events", "zero.aio.overlap_events"},
  };
  return m;
}

// Keys whose "auto" is filled from the trainer config (as accelerate and transformers do).
bool auto_allowed(const std::string& key) {
  static const std::set<std::string> exact = {
      "train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps", "gradient_clipping",
      "fp16.enabled", "bf16.enabled", "zero_optimization.reduce_bucket_size",
      "zero_optimization.stage3_prefetch_bucket_size", "zero_optimization.stage3_param_persistence_threshold"};
  return exact.count(key) || key.rfind("optimizer.params.", 0) == 0 || key.rfind("scheduler.params.", 0) == 0;
}

/// The 1-based line and column of byte `pos` of `text`.
SourceLocation location_at(const std::string& text, const std::string& file, size_t pos) {
  int line = 1, column = 1;
  for (size_t i = 0; i < pos && i < text.size(); ++i) {
    if (text[i] == '\n') { ++line; column = 1; } else { ++column; }
  }
  return {file, line, column};
}

/// Finds the line and column of a dotted key in JSON text by following its parts in order.
SourceLocation locate(const std::string& text, const std::string& file, const std::string& dotted) {
  size_t pos = 0;
  for (size_t start = 0;;) {
    const auto dot = dotted.find('.', start);
    const std::string part = "\"" + dotted.substr(start, dot - start) + "\"";
    const auto found = text.find(part, pos);
    if (found == std::string::npos) return {file, 0, 0};
    pos = found;
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  return location_at(text, file, pos);
}

YAML::Node to_yaml_node(const json& j) {
  if (j.is_array()) {
    YAML::Node seq(YAML::NodeType::Sequence);
    for (const auto& item : j) seq.push_back(to_yaml_node(item));
    return seq;
  }
  if (j.is_string()) return YAML::Node(j.get<std::string>());
  if (j.is_boolean()) return YAML::Node(j.get<bool>() ? "true" : "false");
  if (j.is_null()) return YAML::Node(YAML::NodeType::Null);
  if (j.is_number_integer()) return YAML::Node(std::to_string(j.get<std::int64_t>()));
  if (j.is_number()) return YAML::Node(format_double(j.get<double>()));
  return YAML::Node(j.dump());
}

void flatten_json(const json& j, const std::string& prefix, std::vector<std::pair<std::string, json>>& out) {
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string key = prefix.empty() ? it.key() : prefix + "." + it.key();
    if (it->is_object() && !it->empty()) flatten_json(*it, key, out);
    else out.emplace_back(key, *it);
  }
}

std::optional<double> number_of(const json& j) {
  if (j.is_number()) return j.get<double>();
  return std::nullopt;
}

}  // namespace

void deepspeed_json_leaves(const std::string& text, const std::string& file, const TrainerConfig& context,
                           std::vector<ConfigLeaf>& leaves, std::vector<ConfigProblem>& problems,
                           std::vector<std::string>& warnings) {
  json root;
  try {
    root = json::parse(text);
  } catch (const json::parse_error& e) {
    // e.byte counts from 1
    problems.push_back({location_at(text, file, e.byte > 0 ? e.byte - 1 : 0), "", std::string("invalid JSON: ") + e.what()});
    return;
  } catch (const json::exception& e) {
    // out_of_range: a number beyond a double's range (3e1000); the parser gives no position
    problems.push_back({{file, 1, 1}, "", std::string("invalid JSON: ") + e.what()});
    return;
  }
  if (!root.is_object()) {
    problems.push_back({{file, 1, 1}, "", "a DeepSpeed config must be a JSON object"});
    return;
  }
  std::vector<std::pair<std::string, json>> entries;
  flatten_json(root, "", entries);
  std::map<std::string, json> values(entries.begin(), entries.end());
  auto has = [&](const std::string& k) { return values.count(k) && !values[k].is_null(); };
  auto is_auto = [&](const std::string& k) { return has(k) && values[k].is_string() && values[k] == "auto"; };
  auto add = [&](const std::string& ds_key, const std::string& trainer_key, const YAML::Node& node) {
    leaves.push_back({trainer_key, node, locate(text, file, ds_key), ds_key});
  };

  std::vector<std::string> unused;
  for (const auto& [key, value] : entries) {
    if (value.is_null()) continue;
    if (value.is_string() && value == "auto") {
      if (!auto_allowed(key))
        problems.push_back({locate(text, file, key), key,
                            "\"auto\" can only be filled in for batch sizes, gradient accumulation, clipping, "
                            "fp16/bf16, optimizer and scheduler parameters and bucket sizes; write a value"});
      continue;  // resolved from the trainer config: the base value stays
    }
    if (auto it = direct_keys().find(key); it != direct_keys().end()) {
      add(key, it->second, to_yaml_node(value));
    } else if (key == "fp16.enabled" || key == "bf16.enabled" || key == "train_batch_size" ||
               key == "optimizer.type" || key == "scheduler.type" || key == "scheduler.params.warmup_max_lr" ||
               key == "scheduler.params.cos_min_ratio" || key == "scheduler.params.warmup_min_ratio" ||
               key == "scheduler.params.total_num_steps") {
      // handled below
    } else if (key.rfind("activation_checkpointing", 0) == 0) {
      if (key != "activation_checkpointing" && key != "activation_checkpointing.cpu_checkpointing")
        unused.push_back(key);
    } else {
      unused.push_back(key);
    }
  }

  // Precision: fp16 and bf16 may not both be on.
  const bool fp16 = has("fp16.enabled") && values["fp16.enabled"] == true;
  const bool bf16 = has("bf16.enabled") && values["bf16.enabled"] == true;
  if (fp16 && bf16) {
    problems.push_back({locate(text, file, "bf16.enabled"), "precision",
                        "fp16.enabled and bf16.enabled are both true; turn one of them off"});
  } else if (fp16 || bf16) {
    add(fp16 ? "fp16.enabled" : "bf16.enabled", "precision", YAML::Node(fp16 ? "fp16" : "bf16"));
  } else if ((has("fp16.enabled") && values["fp16.enabled"] == false) &&
             (!has("bf16.enabled") || values["bf16.enabled"] == false)) {
    add("fp16.enabled", "precision", YAML::Node("fp32"));
  }

  // activation_checkpointing present (even with every option false) turns checkpointing on.
  if (root.contains("activation_checkpointing") && !root["activation_checkpointing"].is_null())
    add("activation_checkpointing", "training.gradient_checkpointing", YAML::Node("true"));
  if (has("activation_checkpointing.cpu_checkpointing") && values["activation_checkpointing.cpu_checkpointing"].is_boolean())
    add("activation_checkpointing.cpu_checkpointing", "training.cpu_checkpointing",
        YAML::Node(values["activation_checkpointing.cpu_checkpointing"].get<bool>() ? "true" : "false"));

  // Optimizer type: AdamW (DeepSpeed's Adam defaults to adam_w_mode).
  if (has("optimizer.type")) {
    const std::string type = values["optimizer.type"].is_string() ? values["optimizer.type"].get<std::string>() : "";
    if (type != "AdamW" && type != "Adam")
      warnings.push_back("optimizer.type " + values["optimizer.type"].dump() + " is not supported; optimizer.type stays as the trainer config says (AdamW, AdamW8bit or Adafactor)");
  }

  // Scheduler type and the values that depend on the peak learning rate.
  const double lr = number_of(has("optimizer.params.lr") ? values["optimizer.params.lr"] : json())
                        .value_or(context.optimizer.lr);
  if (has("scheduler.type")) {
    const std::string type = values["scheduler.type"].is_string() ? values["scheduler.type"].get<std::string>() : "";
    const std::map<std::string, std::string> names = {
        {"WarmupLR", "WarmupLR"}, {"WarmupDecayLR", "WarmupDecayLR"}, {"WarmupCosineLR", "cosine"}};
    if (auto it = names.find(type); it != names.end()) add("scheduler.type", "scheduler.type", YAML::Node(it->second));
    else warnings.push_back("scheduler.type " + values["scheduler.type"].dump() + " is not supported; the trainer's scheduler.type stays");
  }
  if (auto peak = number_of(has("scheduler.params.warmup_max_lr") ? values["scheduler.params.warmup_max_lr"] : json())) {
    if (!has("optimizer.params.lr") || is_auto("optimizer.params.lr"))
      add("scheduler.params.warmup_max_lr", "optimizer.lr", YAML::Node(format_double(*peak)));
    else if (*peak != lr)
      warnings.push_back("scheduler.params.warmup_max_lr (" + format_double(*peak) + ") differs from optimizer.params.lr (" +
                         format_double(lr) + "); ZeroStudio uses optimizer.lr as the peak");
  }
  for (const auto& [ratio_key, trainer_key] : {std::pair<std::string, std::string>{"scheduler.params.cos_min_ratio", "scheduler.min_lr"},
                                               {"scheduler.params.warmup_min_ratio", "scheduler.warmup_min_lr"}})
    if (auto ratio = number_of(has(ratio_key) ? values[ratio_key] : json()))
      add(ratio_key, trainer_key, YAML::Node(format_double(*ratio * lr)));

  // total_num_steps equal to max_steps is what an unset scheduler.total_steps means: keep it unset.
  if (auto total = number_of(has("scheduler.params.total_num_steps") ? values["scheduler.params.total_num_steps"] : json())) {
    if (context.scheduler.total_steps || *total != static_cast<double>(context.training.max_steps))
      add("scheduler.params.total_num_steps", "scheduler.total_steps", to_yaml_node(values["scheduler.params.total_num_steps"]));
  }

  auto count = [](double v) {
    return std::floor(v) == v ? std::to_string(static_cast<long long>(v)) : format_double(v);
  };
  // train_batch_size: check it against micro x accumulation x world, or derive the micro batch.
  if (auto total = number_of(has("train_batch_size") ? values["train_batch_size"] : json())) {
    const auto accum = number_of(has("gradient_accumulation_steps") ? values["gradient_accumulation_steps"] : json())
                           .value_or(static_cast<double>(context.training.gradient_accumulation_steps));
    const double world = static_cast<double>(context.launch.num_processes);
    const auto micro_json = has("train_micro_batch_size_per_gpu") ? values["train_micro_batch_size_per_gpu"] : json();
    const SourceLocation at = locate(text, file, "train_batch_size");
    if (!has("train_micro_batch_size_per_gpu")) {
      const double micro = *total / (accum * world);
      if (micro < 1 || std::floor(micro) != micro)
        problems.push_back({at, "training.train_batch_size",
                            "train_batch_size " + count(*total) + " is not divisible by gradient_accumulation_steps " +
                                count(accum) + " x processes " + count(world) + " [from train_batch_size]"});
      else
        add("train_batch_size", "training.batch_size", YAML::Node(std::to_string(static_cast<std::int64_t>(micro))));
    } else {
      const double micro = number_of(micro_json).value_or(static_cast<double>(context.training.batch_size));
      if (micro * accum * world != *total)
        problems.push_back({at, "training.train_batch_size",
                            "train_batch_size " + count(*total) + " must equal train_micro_batch_size_per_gpu " +
                                count(micro) + " x gradient_accumulation_steps " + count(accum) +
                                " x processes " + count(world) + " = " + count(micro * accum * world)});
    }
  }

  if (!unused.empty()) {
    std::string list;
    for (const auto& k : unused) list += (list.empty() ? "" : ", ") + k;
    warnings.push_back(file + ": ZeroStudio does not use these DeepSpeed settings: " + list);
  }
}

}  // namespace zs::config
