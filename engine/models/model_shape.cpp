#include "models/model_shape.h"

#include <algorithm>

#include "core/meta_tensors.h"
#include "models/clip_text_model.h"
#include "models/lora.h"
#include "models/model_family.h"
#include "models/param_unit.h"
#include "models/unit_memory.h"
#include "models/weights.h"
#include "settings/trainer_config.h"

namespace zs::models {

const UnitMemory& UnitShape::memory_model() const { return memory ? *memory : io_unit_memory(); }

std::int64_t ModelShape::largest_module() const {
  std::int64_t n = 0;
  for (const auto& u : units) n = std::max(n, u.largest_module);
  return n;
}

std::int64_t ModelShape::trainable_parameters() const {
  std::int64_t n = 0;
  for (const auto& u : units) n += u.parameters;
  return n;
}

ModelShape model_shape(const config::TrainerConfig& cfg) { return models::family_of(cfg).shape(cfg); }

std::string model_shape_key(const config::TrainerConfig& cfg) {
  // Keep in step with what the families' shape() read (their only inputs are these fields).
  std::string key = cfg.model.preset + '\n' + cfg.model.path + '\n' + cfg.model.config_path + '\n' +
                    cfg.training.method + '\n' + cfg.training.train_text_encoder + '\n' + std::to_string(cfg.lora.rank);
  for (const auto* list : {&cfg.lora.targets, &cfg.lora.text_encoder_targets}) {
    key += list->has_value() ? "\n[" : "\nnull";  // null: the family's default (the model above decides it)
    if (*list)
      for (const auto& t : **list) key += t + ',';
  }
  return key;
}

UnitShape clip_text_encoder_shape(const std::string& name, const models::ClipTextConfig& c,
                                  const std::vector<std::string>* lora_targets, std::int64_t rank) {
  const MetaTensorScope meta;
  models::ClipTextModel encoder(c);
  UnitShape u{name, &text_encoder_unit_memory()};
  u.parameters = models::parameter_count(*encoder);
  u.largest_module = c.vocab_size * c.hidden_size;
  u.in_channels = u.out_channels = c.hidden_size;
  u.heads = c.num_attention_heads;
  u.depth = c.num_hidden_layers;
  if (lora_targets) u.lora_parameters = models::lora_parameter_count(*encoder, *lora_targets, rank);
  return u;
}

std::vector<UnitShape> transformer_unit_shapes(const std::vector<models::ParamUnit>& units, std::int64_t in_channels,
                                               std::int64_t dim, std::int64_t heads, bool all_single) {
  std::vector<UnitShape> out;
  for (const models::ParamUnit& u : units) {
    UnitShape s{u.name};
    s.memory = u.name == "io"                                 ? &io_unit_memory()
               : all_single || u.name.rfind("single_", 0) == 0 ? &single_block_unit_memory()
                                                              : &joint_block_unit_memory();
    for (const auto& [n, t] : u.parameters) {
      s.parameters += t.numel();
      s.largest_module = std::max(s.largest_module, t.numel());
    }
    s.in_channels = u.name == "io" ? in_channels : dim;
    s.out_channels = dim;
    s.heads = heads;
    s.depth = 1;
    out.push_back(s);
  }
  return out;
}

}  // namespace zs::models
