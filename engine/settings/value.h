#pragma once
// Config values: the few types a trainer key can hold, and how they print.

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

namespace zs::config {

/// An ordered map of strings (YAML mapping order kept), e.g. `replacements: {a: b}`.
using StringMap = std::vector<std::pair<std::string, std::string>>;

/// A null (unset nullable key), bool, integer, float, string, string list, float list or string map.
using Value = std::variant<std::monostate, bool, std::int64_t, double, std::string,
                           std::vector<std::string>, std::vector<double>, StringMap>;

/// Shortest decimal text that reads back as exactly `v`, always with a '.' or exponent ("1.0", "0.0001", "5e-08").
std::string format_double(double v);

/// Value as YAML-flow text: `null`, `true`, `42`, `0.0001`, `cpu`, `[a, b]`, `{a: b}`.
std::string format_value(const Value& v);

// Conversions between trainer-struct members and Values (used by the schema's bindings).
inline Value to_value(bool v) { return v; }
inline Value to_value(std::int64_t v) { return v; }
inline Value to_value(double v) { return v; }
inline Value to_value(const std::string& v) { return v; }
inline Value to_value(const std::vector<std::string>& v) { return v; }
inline Value to_value(const std::vector<double>& v) { return v; }
inline Value to_value(const StringMap& v) { return v; }
template <class T>
Value to_value(const std::optional<T>& v) {
  return v ? to_value(*v) : Value{};
}

void from_value(const Value& v, bool& out);
void from_value(const Value& v, std::int64_t& out);
void from_value(const Value& v, double& out);
void from_value(const Value& v, std::string& out);
void from_value(const Value& v, std::vector<std::string>& out);
void from_value(const Value& v, std::vector<double>& out);
void from_value(const Value& v, StringMap& out);
template <class T>
void from_value(const Value& v, std::optional<T>& out) {
  if (std::holds_alternative<std::monostate>(v)) {
    out.reset();
  } else {
    T t{};
    from_value(v, t);
    out = t;
  }
}

}  // namespace zs::config
