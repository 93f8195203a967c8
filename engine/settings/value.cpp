#include "settings/value.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <sstream>

namespace zs::config {

std::string format_double(double v) {
  if (std::isnan(v)) return ".nan";
  if (std::isinf(v)) return v > 0 ? ".inf" : "-.inf";
  char buf[40];
  if (std::floor(v) == v && std::fabs(v) < 1e15) {  // whole numbers read best without an exponent
    std::snprintf(buf, sizeof buf, "%.1f", v);
    return buf;
  }
  for (int precision = 1; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof buf, "%.*g", precision, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  std::string s = buf;
  if (s.find_first_of(".eE") == std::string::npos) s += ".0";
  return s;
}

namespace {
struct Formatter {
  std::string operator()(std::monostate) const { return "null"; }
  std::string operator()(bool b) const { return b ? "true" : "false"; }
  std::string operator()(std::int64_t i) const { return std::to_string(i); }
  std::string operator()(double d) const { return format_double(d); }
  std::string operator()(const std::string& s) const { return s.empty() ? "\"\"" : s; }
  std::string operator()(const std::vector<std::string>& list) const {
    std::string out = "[";
    for (size_t i = 0; i < list.size(); ++i) out += (i ? ", " : "") + (*this)(list[i]);
    return out + "]";
  }
  std::string operator()(const StringMap& map) const {
    std::string out = "{";
    for (size_t i = 0; i < map.size(); ++i) out += (i ? ", " : "") + (*this)(map[i].first) + ": " + (*this)(map[i].second);
    return out + "}";
  }
  std::string operator()(const std::vector<double>& list) const {
    std::string out = "[";
    for (size_t i = 0; i < list.size(); ++i) out += (i ? ", " : "") + format_double(list[i]);
    return out + "]";
  }
};

template <class T>
void assign(const Value& v, T& out) {
  if (const T* p = std::get_if<T>(&v)) out = *p;
}
}  // namespace

std::string format_value(const Value& v) { return std::visit(Formatter{}, v); }

void from_value(const Value& v, bool& out) { assign(v, out); }
void from_value(const Value& v, std::int64_t& out) { assign(v, out); }
void from_value(const Value& v, double& out) {
  if (const auto* i = std::get_if<std::int64_t>(&v)) out = static_cast<double>(*i);
  else assign(v, out);
}
void from_value(const Value& v, std::string& out) { assign(v, out); }
void from_value(const Value& v, std::vector<std::string>& out) { assign(v, out); }
void from_value(const Value& v, std::vector<double>& out) { assign(v, out); }
void from_value(const Value& v, StringMap& out) { assign(v, out); }

}  // namespace zs::config
