#pragma once
// Reading a JSON file with errors that name it.

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace zs::io {

/// Parses the JSON file at `path`. Throws zs::Error(io) "PATH: cannot open the WHAT" when it
/// cannot be read, and zs::Error(config) "PATH: not valid JSON: ..." when it does not parse.
nlohmann::json read_json_file(const std::string& path, const std::string& what);
/// A diffusers config file's "_class_name" ("FluxPipeline", …), or "" when the file is absent,
/// unreadable or has none (a probe: never throws).
std::string json_class_name(const std::string& path);

/// The largest magnitude a count, length or size read from a model's JSON may have (2^24): larger
/// ones are refused before anything is allocated from them. The largest real value is far below
/// (vocabularies of ~250 k, context lengths of ~128 k, widths of ~16 k).
inline constexpr std::int64_t kMaxConfigCount = std::int64_t{1} << 24;

/// A config file's integer `key` (`source` names the file): `fallback` when absent or null; anything
/// else throws zs::Error(config) "SOURCE: KEY: expected an integer, found VALUE", and a value beyond
/// ±kMaxConfigCount "SOURCE: KEY: VALUE is beyond 16777216, the largest ... accepted".
std::int64_t config_int(const nlohmann::json& j, const char* key, std::int64_t fallback, const std::string& source);
/// A config file's number `key` (eps, θ, ratios): `fallback` when absent or null; anything else throws
/// zs::Error(config) "SOURCE: KEY: expected a number, found VALUE".
double config_number(const nlohmann::json& j, const char* key, double fallback, const std::string& source);
/// A config file's true/false `key`: `fallback` when absent or null; anything else throws
/// zs::Error(config) "SOURCE: KEY: expected true or false, found VALUE".
bool config_bool(const nlohmann::json& j, const char* key, bool fallback, const std::string& source);
/// A config file's list of integers `key`: `fallback` when absent or null; anything else throws
/// zs::Error(config) "SOURCE: KEY: EXPECTED"; each value is bounded as config_int's.
std::vector<std::int64_t> config_int_list(const nlohmann::json& j, const char* key, std::vector<std::int64_t> fallback,
                                          const std::string& source, const std::string& expected);

/// An integer `key` of a JSON object that ZeroStudio writes itself (queue.json, control.json):
/// `fallback` when absent or null; a value that is no integer, or lies outside [lo, hi], throws
/// zs::Error(kind) "SOURCE: KEY: expected an integer from LO to HI, found VALUE". (nlohmann's own
/// conversion of 1e56 or 3.5 to an integer is a cast: undefined behaviour, found by make fuzz.)
std::int64_t json_int(const nlohmann::json& j, const char* key, std::int64_t fallback, std::int64_t lo, std::int64_t hi,
                      const std::string& source, ErrorKind kind = ErrorKind::io);

}  // namespace zs::io
