#include "models/peft_lora_config.h"

#include <cmath>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/safetensors.h"

namespace zs::models {

double PeftLoraConfig::scale() const { return use_rslora ? lora_alpha / std::sqrt(r) : lora_alpha / r; }

std::optional<PeftLoraConfig> read_peft_lora_config(const io::SafetensorsReader& reader, const std::string& component,
                                                    const std::string& file) {
  const auto& meta = reader.metadata();
  const auto it = meta.find(kLoraAdapterMetadataKey);
  if (it == meta.end()) return std::nullopt;
  const std::string where = file + ": " + kLoraAdapterMetadataKey;
  const nlohmann::json j = nlohmann::json::parse(it->second, nullptr, false);
  if (!j.is_object()) throw Error(ErrorKind::config, where + ": not a JSON object (PEFT's LoraConfig as diffusers writes it)");
  const std::string p = component + ".";
  if (!j.contains(p + "r") && !j.contains(p + "lora_alpha")) return std::nullopt;  // another component's
  auto number = [&](const std::string& key) {
    if (!j.contains(p + key) || !j[p + key].is_number())
      throw Error(ErrorKind::config, where + ": " + p + key + ": expected a number");
    const double v = j[p + key].get<double>();
    if (!(v > 0) || !std::isfinite(v)) throw Error(ErrorKind::config, where + ": " + p + key + ": must be positive");
    return v;
  };
  auto flag = [&](const std::string& key) { return j.contains(p + key) && j[p + key].is_boolean() && j[p + key].get<bool>(); };
  if (flag("use_dora"))
    throw Error(ErrorKind::config, where + ": " + p + "use_dora is true: DoRA adapters are not supported (ZeroStudio "
                                   "trains and reads plain LoRA); convert or retrain without DoRA");
  for (const char* key : {"rank_pattern", "alpha_pattern"})
    if (j.contains(p + key) && !j[p + key].is_null() && !j[p + key].empty())
      throw Error(ErrorKind::config, where + ": " + p + key + " gives some layers their own " +
                                     (std::string(key) == "rank_pattern" ? "rank" : "alpha") +
                                     ": per-layer patterns are not supported; use a file with one rank and alpha");
  PeftLoraConfig c;
  c.r = number("r");
  c.lora_alpha = number("lora_alpha");
  c.use_rslora = flag("use_rslora");
  return c;
}

std::map<std::string, std::string> peft_lora_metadata(const std::vector<PeftLoraLayer>& layers) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& l : layers) {
    const std::string p = l.component + ".";
    if (!j.contains(p + "r")) {
      j[p + "r"] = l.rank;
      j[p + "lora_alpha"] = l.rank;  // the scale is inside lora_B
      j[p + "use_dora"] = false;
      j[p + "use_rslora"] = false;
      j[p + "rank_pattern"] = nlohmann::json::object();
      j[p + "alpha_pattern"] = nlohmann::json::object();
      j[p + "target_modules"] = nlohmann::json::array();
      j[p + "lora_dropout"] = 0.0;
      j[p + "bias"] = "none";
    } else if (j[p + "r"].get<std::int64_t>() != l.rank) {
      return {};
    }
    j[p + "target_modules"].push_back(l.path);
  }
  if (j.empty()) return {};
  return {{kLoraAdapterMetadataKey, j.dump(2)}};
}

}  // namespace zs::models
