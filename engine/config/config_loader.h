#pragma once
// Loading trainer YAML: parse, migrate, apply --set overrides, convert by the schema,
// validate, and report every problem at once with its line and column.

#include <map>
#include <string>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "config/problem.h"
#include "settings/trainer_config.h"

namespace zs::config {

/// A config together with where each explicitly set key came from.
struct LoadedConfig {
  TrainerConfig config = TrainerConfig::defaults();
  std::string file;                                  ///< main file, empty for an in-memory config
  std::map<std::string, SourceLocation> locations;   ///< keys and sections set explicitly
  std::vector<std::string> warnings;                 ///< notes that are not errors

  /// True when `path` was set by the file or an override (not a default).
  bool is_set(const std::string& path) const { return locations.count(path) != 0; }
  /// Where `path` was set; else where its section was; else the file itself.
  SourceLocation location_of(const std::string& path) const;
};

/// One value to apply on top of a config: from a YAML file, an override or an import.
struct ConfigLeaf {
  std::string path;      ///< trainer key path
  YAML::Node value;      ///< scalar or sequence
  SourceLocation where;  ///< where the value was written
  std::string origin;    ///< the key as the source spells it, when it differs (e.g. "deepspeed_config.zero_stage")
};

/// Reads and validates a trainer YAML file, then applies `overrides` ("key.path=value", as `--set`).
/// Throws ConfigError listing every problem, or zs::Error(io) when the file cannot be read.
LoadedConfig load_config_file(const std::string& path, const std::vector<std::string>& overrides = {});

/// Same as load_config_file for YAML text; `name` labels its problems.
LoadedConfig load_config_string(const std::string& yaml, const std::string& name,
                                const std::vector<std::string>& overrides = {});

/// Applies `leaves` in order on top of `base` (later ones win), converting each by the schema,
/// then validates the result. Throws ConfigError with every problem.
LoadedConfig apply_leaves(LoadedConfig base, const std::vector<ConfigLeaf>& leaves);

/// Splits a YAML map into leaves by the schema; unknown keys and misplaced sections become problems.
void flatten_yaml(const YAML::Node& root, const std::string& file, std::vector<ConfigLeaf>& leaves,
                  std::vector<ConfigProblem>& problems, std::map<std::string, SourceLocation>* sections = nullptr);

/// Parses "key.path=value" into a leaf (label "--set key.path=value"); problems go to `problems`.
void parse_override(const std::string& text, std::vector<ConfigLeaf>& leaves, std::vector<ConfigProblem>& problems);

/// The location of a YAML node (1-based), or line 0 when it has none.
SourceLocation location_of_node(const YAML::Node& node, const std::string& file);

}  // namespace zs::config
