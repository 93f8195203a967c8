#include "io/json_file.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"

namespace zs::io {

nlohmann::json read_json_file(const std::string& path, const std::string& what) {
  std::ifstream in(path);
  if (!in) throw Error(ErrorKind::io, path + ": cannot open the " + what);
  std::stringstream ss;
  ss << in.rdbuf();
  try {
    return nlohmann::json::parse(ss.str());
  } catch (const nlohmann::json::exception& e) {
    // parse_error, and out_of_range for a number beyond double's range (-1e400)
    throw Error(ErrorKind::config, path + ": not valid JSON: " + e.what());
  }
}

std::string json_class_name(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return "";
  try {
    const nlohmann::json j = read_json_file(path, "config");
    return j.is_object() ? j.value("_class_name", std::string()) : std::string();
  } catch (const std::exception&) {
    return "";
  }
}

namespace {

/// An integer JSON value within ±kMaxConfigCount (unsigned values past int64's range included).
std::int64_t bounded_count(const nlohmann::json& v, const char* key, const std::string& source) {
  const bool too_big = v.is_number_unsigned() ? v.get<std::uint64_t>() > static_cast<std::uint64_t>(kMaxConfigCount)
                                              : std::abs(v.get<std::int64_t>()) > kMaxConfigCount;
  if (too_big)
    throw Error(ErrorKind::config, source + ": " + key + ": " + v.dump() + " is beyond " + std::to_string(kMaxConfigCount) +
                                       ", the largest count ZeroStudio accepts in a model's config (a damaged or hostile file?)");
  return v.get<std::int64_t>();
}

}  // namespace

std::int64_t config_int(const nlohmann::json& j, const char* key, std::int64_t fallback, const std::string& source) {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  if (!j[key].is_number_integer())
    throw Error(ErrorKind::config, source + ": " + key + ": expected an integer, found " + j[key].dump());
  return bounded_count(j[key], key, source);
}

double config_number(const nlohmann::json& j, const char* key, double fallback, const std::string& source) {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  if (!j[key].is_number()) throw Error(ErrorKind::config, source + ": " + key + ": expected a number, found " + j[key].dump());
  return j[key].get<double>();
}

bool config_bool(const nlohmann::json& j, const char* key, bool fallback, const std::string& source) {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  if (!j[key].is_boolean())
    throw Error(ErrorKind::config, source + ": " + key + ": expected true or false, found " + j[key].dump());
  return j[key].get<bool>();
}

std::vector<std::int64_t> config_int_list(const nlohmann::json& j, const char* key, std::vector<std::int64_t> fallback,
                                          const std::string& source, const std::string& expected) {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  if (!j[key].is_array()) throw Error(ErrorKind::config, source + ": " + key + ": " + expected);
  std::vector<std::int64_t> out;
  for (const auto& v : j[key]) {
    if (!v.is_number_integer()) throw Error(ErrorKind::config, source + ": " + key + ": " + expected);
    out.push_back(bounded_count(v, key, source));
  }
  return out;
}

std::int64_t json_int(const nlohmann::json& j, const char* key, std::int64_t fallback, std::int64_t lo, std::int64_t hi,
                      const std::string& source, ErrorKind kind) {
  if (!j.is_object() || !j.contains(key) || j[key].is_null()) return fallback;
  const nlohmann::json& v = j[key];
  const bool fits = v.is_number_unsigned() ? v.get<std::uint64_t>() <= static_cast<std::uint64_t>(std::max<std::int64_t>(hi, 0)) &&
                                                 static_cast<std::int64_t>(v.get<std::uint64_t>()) >= lo
                    : v.is_number_integer() ? v.get<std::int64_t>() >= lo && v.get<std::int64_t>() <= hi
                                            : false;
  if (!fits)
    throw Error(kind, source + ": " + key + ": expected an integer from " + std::to_string(lo) + " to " + std::to_string(hi) +
                          ", found " + v.dump());
  return v.is_number_unsigned() ? static_cast<std::int64_t>(v.get<std::uint64_t>()) : v.get<std::int64_t>();
}

}  // namespace zs::io
