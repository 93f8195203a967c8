#include "io/json_file.h"

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

}  // namespace zs::io
