// TrainerConfig's members that read the schema (settings/trainer_config.h declares them).

#include "config/schema.h"
#include "settings/trainer_config.h"

namespace zs::config {

TrainerConfig TrainerConfig::defaults() {
  TrainerConfig c;
  for (const auto& f : schema_fields()) f.set(c, f.default_value);
  return c;
}

bool operator==(const TrainerConfig& a, const TrainerConfig& b) {
  for (const auto& f : schema_fields())
    if (f.get(a) != f.get(b)) return false;
  return true;
}

}  // namespace zs::config
