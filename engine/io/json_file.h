#pragma once
// Reading a JSON file with errors that name it.

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace zs::io {

/// Parses the JSON file at `path`. Throws zs::Error(io) "PATH: cannot open the WHAT" when it
/// cannot be read, and zs::Error(config) "PATH: not valid JSON: ..." when it does not parse.
nlohmann::json read_json_file(const std::string& path, const std::string& what);
/// A diffusers config file's "_class_name" ("FluxPipeline", …), or "" when the file is absent,
/// unreadable or has none (a probe: never throws).
std::string json_class_name(const std::string& path);

/// A config file's integer `key` (`source` names the file): `fallback` when absent or null; anything
/// else throws zs::Error(config) "SOURCE: KEY: expected an integer, found VALUE".
std::int64_t config_int(const nlohmann::json& j, const char* key, std::int64_t fallback, const std::string& source);
/// A config file's list of integers `key`: `fallback` when absent or null; anything else throws
/// zs::Error(config) "SOURCE: KEY: EXPECTED".
std::vector<std::int64_t> config_int_list(const nlohmann::json& j, const char* key, std::vector<std::int64_t> fallback,
                                          const std::string& source, const std::string& expected);

}  // namespace zs::io
