#pragma once
// Reading a JSON file with errors that name it.

#include <string>

#include <nlohmann/json.hpp>

namespace zs::io {

/// Parses the JSON file at `path`. Throws zs::Error(io) "PATH: cannot open the WHAT" when it
/// cannot be read, and zs::Error(config) "PATH: not valid JSON: ..." when it does not parse.
nlohmann::json read_json_file(const std::string& path, const std::string& what);
/// A diffusers config file's "_class_name" ("FluxPipeline", …), or "" when the file is absent,
/// unreadable or has none (a probe: never throws).
std::string json_class_name(const std::string& path);

}  // namespace zs::io
