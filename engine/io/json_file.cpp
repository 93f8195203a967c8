#include "io/json_file.h"

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
  } catch (const nlohmann::json::parse_error& e) {
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

std::int64_t config_int(const nlohmann::json& j, const char* key, std::int64_t fallback, const std::string& source) {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  if (!j[key].is_number_integer())
    throw Error(ErrorKind::config, source + ": " + key + ": expected an integer, found " + j[key].dump());
  return j[key].get<std::int64_t>();
}

std::vector<std::int64_t> config_int_list(const nlohmann::json& j, const char* key, std::vector<std::int64_t> fallback,
                                          const std::string& source, const std::string& expected) {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  if (!j[key].is_array()) throw Error(ErrorKind::config, source + ": " + key + ": " + expected);
  std::vector<std::int64_t> out;
  for (const auto& v : j[key]) {
    if (!v.is_number_integer()) throw Error(ErrorKind::config, source + ": " + key + ": " + expected);
    out.push_back(v.get<std::int64_t>());
  }
  return out;
}

}  // namespace zs::io
