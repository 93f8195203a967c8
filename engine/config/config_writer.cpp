#include "config/config_writer.h"

#include <algorithm>
#include <cstdlib>

#include "config/schema.h"
#include "io/atomic_file.h"

namespace zs::config {

std::string yaml_scalar(const std::string& s) {
  auto lower = s;
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
  static const char* const kSpecial[] = {"", "~", "null", "true", "false", "yes", "no", "on", "off", "y", "n"};
  bool plain = std::none_of(std::begin(kSpecial), std::end(kSpecial), [&](const char* w) { return lower == w; });
  if (plain) {
    char* end = nullptr;
    std::strtod(s.c_str(), &end);
    if (end == s.c_str() + s.size()) plain = false;  // would read back as a number
  }
  if (plain) {
    const std::string safe_first = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_/.(";
    plain = safe_first.find(s[0]) != std::string::npos && s.back() != ' ' &&
            std::all_of(s.begin(), s.end(), [](unsigned char c) {
              return std::isalnum(c) || c >= 0x80 || std::string_view("_-./ ()+@=").find(c) != std::string_view::npos;
            });
  }
  if (plain) return s;
  std::string out = "\"";
  for (char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      default: out += c;
    }
  }
  return out + "\"";
}

namespace {

std::string value_text(const Value& v, const std::string& indent) {
  if (const auto* s = std::get_if<std::string>(&v)) return " " + yaml_scalar(*s);
  if (const auto* list = std::get_if<std::vector<std::string>>(&v)) {
    if (list->empty()) return " []";
    std::string out;
    for (const auto& item : *list) out += "\n" + indent + "  - " + yaml_scalar(item);
    return out;
  }
  if (const auto* map = std::get_if<StringMap>(&v)) {
    if (map->empty()) return " {}";
    std::string out;
    for (const auto& [k, val] : *map) {
      char* end = nullptr;
      std::strtod(val.c_str(), &end);
      const bool number = !val.empty() && end == val.c_str() + val.size();
      out += "\n" + indent + "  " + yaml_scalar(k) + ": " + (number ? val : yaml_scalar(val));
    }
    return out;
  }
  return " " + format_value(v);
}

}  // namespace

std::string to_yaml(const TrainerConfig& config, const WriteOptions& options) {
  std::string out = "# ZeroStudio trainer config. Every key is documented in docs/CONFIG.md\n"
                    "# (or run `zerostudio config schema --markdown`).\n";
  std::vector<std::string> open;  // sections currently open, outermost first
  const auto defaults = TrainerConfig::defaults();
  for (const auto& f : schema_fields()) {
    const Value v = f.get(config);
    if (options.only_changed && f.path != "version" && v == f.get(defaults)) continue;
    std::vector<std::string> parts;
    for (size_t start = 0;;) {
      const auto dot = f.path.find('.', start);
      parts.push_back(f.path.substr(start, dot - start));
      if (dot == std::string::npos) break;
      start = dot + 1;
    }
    const std::vector<std::string> sections(parts.begin(), parts.end() - 1);
    size_t common = 0;
    while (common < open.size() && common < sections.size() && open[common] == sections[common]) ++common;
    open.resize(common);
    for (size_t i = common; i < sections.size(); ++i) {
      if (i == 0) out += "\n";
      out += std::string(2 * i, ' ') + sections[i] + ":\n";
      open.push_back(sections[i]);
    }
    const std::string indent(2 * sections.size(), ' ');
    if (options.with_docs) out += indent + "# " + f.doc + "\n";
    out += indent + parts.back() + ":" + value_text(v, indent) + "\n";
  }
  return out;
}

void save_config(const TrainerConfig& config, const std::string& path, const WriteOptions& options) {
  io::write_file_atomic(path, to_yaml(config, options));
}

}  // namespace zs::config
