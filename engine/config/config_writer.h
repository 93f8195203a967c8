#pragma once
// Writing a TrainerConfig back to YAML in schema order.

#include <string>

#include "settings/trainer_config.h"

namespace zs::config {

struct WriteOptions {
  bool with_docs = false;      ///< a `# ...` comment with each key's documentation
  bool only_changed = false;   ///< leave out keys that equal their default
};

/// The config as trainer YAML (loads back to an equal config).
std::string to_yaml(const TrainerConfig& config, const WriteOptions& options = {});

/// Writes to_yaml() to `path` atomically; throws zs::Error(io) naming the file.
void save_config(const TrainerConfig& config, const std::string& path, const WriteOptions& options = {});

/// A string as a YAML scalar: plain where that reads back as the same string, else double-quoted.
std::string yaml_scalar(const std::string& s);

}  // namespace zs::config
