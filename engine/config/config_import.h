#pragma once
// Importing accelerate's default_config.yaml and DeepSpeed JSON into a trainer config,
// and exporting a trainer config as both.

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "config/config_loader.h"
#include "settings/value.h"

namespace zs::config {

/// What to import. At least one of the two files must be given.
struct ImportRequest {
  std::string accelerate_yaml;  ///< accelerate's default_config.yaml; may be empty
  std::string deepspeed_json;   ///< DeepSpeed JSON; empty: the YAML's deepspeed_config_file, if any
  /// The trainer config to start from; its values resolve "auto" and fill what the files leave out.
  std::optional<LoadedConfig> base;
};

/// The imported config and what ZeroStudio did not use.
struct ImportResult {
  LoadedConfig loaded;
  std::vector<std::string> warnings;  ///< settings that were read but have no trainer key
  std::string deepspeed_json;         ///< the DeepSpeed file that was read (resolved path), if any
};

/// Imports as `accelerate launch` would read the files: keys that conflict between the YAML
/// and a DeepSpeed file are errors naming each key, unresolved "auto" values are errors,
/// fp16 and bf16 may not both be on. Throws ConfigError listing every problem.
ImportResult import_configs(const ImportRequest& request);

/// Leaves for the settings of a DeepSpeed JSON text. `context` supplies values for "auto"
/// and for deriving the micro batch from train_batch_size. Unused keys go to `warnings`.
void deepspeed_json_leaves(const std::string& text, const std::string& file, const TrainerConfig& context,
                           std::vector<ConfigLeaf>& leaves, std::vector<ConfigProblem>& problems,
                           std::vector<std::string>& warnings);

/// The config as DeepSpeed JSON (every ZeRO key written out).
nlohmann::json to_deepspeed_json(const TrainerConfig& config);

/// The config as accelerate YAML. With `deepspeed_config_file` non-empty the YAML points at
/// that file and leaves the settings that accelerate then forbids in the YAML out.
std::string to_accelerate_yaml(const TrainerConfig& config, const std::string& deepspeed_config_file = "");

/// Writes the config's launch and ZeRO settings as accelerate YAML and/or DeepSpeed JSON (either
/// path may be empty), atomically; with both, the YAML points at the JSON (relative path).
void write_launch_files(const TrainerConfig& config, const std::string& accelerate_yaml, const std::string& deepspeed_json);

}  // namespace zs::config
