#include "config/config_loader.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <set>
#include <tuple>

#include "config/schema.h"
#include "config/validation.h"
#include "core/text.h"
#include "io/atomic_file.h"

namespace zs::config {

// ---------------------------------------------------------------------------------------------
// Problems

std::string ConfigProblem::to_string() const {
  std::string out;
  if (!where.file.empty()) {
    out += where.file;
    if (where.line > 0) out += ":" + std::to_string(where.line) + ":" + std::to_string(where.column);
    out += ": ";
  }
  if (!key.empty()) out += key + ": ";
  return out + message;
}

namespace {
std::string join_problems(const std::vector<ConfigProblem>& problems) {
  std::string out;
  for (const auto& p : problems) out += (out.empty() ? "" : "\n") + p.to_string();
  return out;
}
}  // namespace

ConfigError::ConfigError(std::vector<ConfigProblem> problems)
    : Error(ErrorKind::config, join_problems(problems)), problems_(std::move(problems)) {}

SourceLocation LoadedConfig::location_of(const std::string& path) const {
  for (std::string p = path;;) {
    if (auto it = locations.find(p); it != locations.end()) return it->second;
    const auto dot = p.rfind('.');
    if (dot == std::string::npos) break;
    p.resize(dot);
  }
  return SourceLocation{file, 0, 0};
}

SourceLocation location_of_node(const YAML::Node& node, const std::string& file) {
  const YAML::Mark mark = node.Mark();
  if (mark.line < 0) return {file, 0, 0};
  return {file, mark.line + 1, mark.column + 1};
}

// ---------------------------------------------------------------------------------------------
// Schema migrations: migrations[v] turns a version-v document into version v+1.

namespace {

/// Moves `section`.`from` to `section`.`to` where the document has the old key and not the new.
void rename_key(YAML::Node& root, const char* section, const char* from, const char* to) {
  if (!root[section] || !root[section].IsMap()) return;
  YAML::Node s = root[section];
  if (!s[from] || s[to]) return;
  s[to] = YAML::Clone(s[from]);
  s.remove(from);
}

const std::map<std::int64_t, std::function<void(YAML::Node&)>>& migrations() {
  static const std::map<std::int64_t, std::function<void(YAML::Node&)>> table = {
      // 1 -> 2 (Flux.1): the sampler is the family's (DDIM or FlowMatch Euler).
      {1, [](YAML::Node& root) { rename_key(root, "sampling", "ddim_steps", "steps"); }},
  };
  return table;
}

void migrate(YAML::Node& root, const std::string& file, std::vector<ConfigProblem>& problems) {
  if (!root.IsMap()) return;
  if (!root["version"]) {
    // No version: the current schema, but a key that was only renamed is still understood.
    rename_key(root, "sampling", "ddim_steps", "steps");
    return;
  }
  const YAML::Node node = root["version"];
  std::int64_t version = 0;
  try {
    version = node.as<std::int64_t>();
  } catch (const YAML::Exception&) {
    problems.push_back({location_of_node(node, file), "version", "must be a whole number such as 1"});
    return;
  }
  if (version > kSchemaVersion) {
    problems.push_back({location_of_node(node, file), "version",
                        "this file uses schema version " + std::to_string(version) +
                            ", but this ZeroStudio reads up to version " + std::to_string(kSchemaVersion) +
                            "; update ZeroStudio"});
    root.remove("version");  // reported once, not again as out of range
    return;
  }
  for (std::int64_t v = version; v < kSchemaVersion; ++v) {
    auto it = migrations().find(v);
    if (it != migrations().end()) it->second(root);
  }
  if (version >= 1) root["version"] = kSchemaVersion;
}

// ---------------------------------------------------------------------------------------------
// Scalar conversion

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

std::string quote(const std::string& s) { return "'" + s + "'"; }

std::optional<double> parse_number(const std::string& text) {
  if (text.empty()) return std::nullopt;
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (end != text.c_str() + text.size() || !std::isfinite(v)) return std::nullopt;
  return v;
}

std::optional<std::int64_t> parse_integer(const std::string& text) {
  std::int64_t v = 0;
  const char* first = text.data();
  const char* last = text.data() + text.size();
  if (!text.empty() && text[0] == '+') ++first;
  if (auto [ptr, ec] = std::from_chars(first, last, v); ec == std::errc() && ptr == last && first != last) return v;
  // DeepSpeed writes sizes as 5e8: accept a float literal that is a whole number.
  if (auto d = parse_number(text); d && std::floor(*d) == *d && std::fabs(*d) < 9.2e18)
    return static_cast<std::int64_t>(*d);
  return std::nullopt;
}

std::optional<bool> parse_bool(const std::string& text) {
  const std::string t = lower(text);
  if (t == "true" || t == "yes" || t == "on") return true;
  if (t == "false" || t == "no" || t == "off") return false;
  return std::nullopt;
}

bool is_null(const YAML::Node& node) {
  return !node || node.IsNull() || (node.IsScalar() && node.Tag() == "?" && (node.Scalar() == "~" || lower(node.Scalar()) == "null"));
}

std::string describe_range(const FieldSpec& f) {
  if (f.min && f.max) return "between " + format_bound(f, *f.min) + " and " + format_bound(f, *f.max);
  if (f.min) return ">= " + format_bound(f, *f.min);
  return "<= " + format_bound(f, *f.max);
}

bool out_of_range(const FieldSpec& f, double v) { return (f.min && v < *f.min) || (f.max && v > *f.max); }

std::string kind_name(FieldType t) {
  switch (t) {
    case FieldType::boolean: return "true or false";
    case FieldType::integer: return "a whole number";
    case FieldType::number: return "a number";
    case FieldType::string_list: return "a list of strings";
    case FieldType::number_list: return "a list of numbers";
    case FieldType::string_map: return "a map of strings";
    case FieldType::number_map: return "a map of numbers";
    default: return "a string";
  }
}

/// Converts `node` to the field's type; on failure returns nullopt and sets `error`.
std::optional<Value> convert(const FieldSpec& f, const YAML::Node& node, std::string& error) {
  if (is_null(node)) {
    if (f.nullable) return Value{};
    if (f.type == FieldType::string || f.type == FieldType::path) return Value{std::string()};
    error = "needs a value (expected " + kind_name(f.type) + ")";
    return std::nullopt;
  }
  const bool is_list = f.type == FieldType::string_list || f.type == FieldType::number_list ||
                       f.type == FieldType::string_map || f.type == FieldType::number_map;
  if (!is_list && !node.IsScalar()) {
    error = "expected " + kind_name(f.type) + ", got a " + (node.IsMap() ? "map" : "list");
    return std::nullopt;
  }
  switch (f.type) {
    case FieldType::boolean: {
      if (auto b = parse_bool(node.Scalar())) return Value{*b};
      error = "expected true or false, got " + quote(node.Scalar());
      return std::nullopt;
    }
    case FieldType::integer: {
      auto i = parse_integer(node.Scalar());
      if (!i) {
        error = "expected a whole number, got " + quote(node.Scalar());
        return std::nullopt;
      }
      if (out_of_range(f, static_cast<double>(*i))) {
        error = "must be " + describe_range(f) + " (got " + std::to_string(*i) + ")";
        return std::nullopt;
      }
      return Value{*i};
    }
    case FieldType::number: {
      auto d = parse_number(node.Scalar());
      if (!d) {
        error = "expected a number, got " + quote(node.Scalar());
        return std::nullopt;
      }
      if (out_of_range(f, *d)) {
        error = "must be " + describe_range(f) + " (got " + format_double(*d) + ")";
        return std::nullopt;
      }
      return Value{*d};
    }
    case FieldType::string: return Value{node.Scalar()};
    case FieldType::path: return Value{without_trailing_slash(node.Scalar())};  // "data/" = "data"
    case FieldType::choice: {
      const std::string got = node.Scalar();
      for (const auto& c : f.choices)
        if (lower(c) == lower(got)) return Value{c};
      error = "must be one of ";
      for (size_t i = 0; i < f.choices.size(); ++i) error += (i ? ", " : "") + f.choices[i];
      error += " (got " + quote(got) + ")";
      return std::nullopt;
    }
    case FieldType::string_list: {
      std::vector<std::string> out;
      if (node.IsScalar()) return Value{std::vector<std::string>{node.Scalar()}};
      if (!node.IsSequence()) {
        error = "expected a list of strings";
        return std::nullopt;
      }
      for (const auto& item : node) {
        if (!item.IsScalar()) {
          error = "expected a list of strings; item " + std::to_string(out.size() + 1) + " is not a string";
          return std::nullopt;
        }
        out.push_back(item.Scalar());
      }
      return Value{out};
    }
    case FieldType::string_map:
    case FieldType::number_map: {
      StringMap out;
      if (!node.IsMap()) {
        error = "expected " + kind_name(f.type) + " such as {key: value}";
        return std::nullopt;
      }
      for (const auto& kv : node) {
        if (!kv.first.IsScalar() || !(kv.second.IsScalar() || is_null(kv.second))) {
          error = "expected " + kind_name(f.type) + "; each key and value must be plain text";
          return std::nullopt;
        }
        const std::string value = is_null(kv.second) ? std::string() : kv.second.Scalar();
        if (f.type == FieldType::number_map && !parse_number(value)) {
          error = "the value of " + quote(kv.first.Scalar()) + " is not a number (got " + quote(value) + ")";
          return std::nullopt;
        }
        out.emplace_back(kv.first.Scalar(), value);
      }
      return Value{out};
    }
    case FieldType::number_list: {
      std::vector<double> out;
      if (!node.IsSequence()) {
        error = "expected a list of numbers such as [0.9, 0.999]";
        return std::nullopt;
      }
      for (const auto& item : node) {
        auto d = item.IsScalar() ? parse_number(item.Scalar()) : std::nullopt;
        if (!d) {
          error = "item " + std::to_string(out.size() + 1) + " is not a number";
          return std::nullopt;
        }
        if (out_of_range(f, *d)) {
          error = "item " + std::to_string(out.size() + 1) + " must be " + describe_range(f) + " (got " +
                  format_double(*d) + ")";
          return std::nullopt;
        }
        out.push_back(*d);
      }
      if (f.list_size && out.size() != *f.list_size) {
        error = "needs exactly " + std::to_string(*f.list_size) + " numbers (got " + std::to_string(out.size()) + ")";
        return std::nullopt;
      }
      return Value{out};
    }
  }
  return std::nullopt;
}

std::string did_you_mean(const std::string& path) {
  const auto suggestions = suggest_paths(path);
  if (suggestions.empty()) return "";
  return "; did you mean " + or_list(suggestions) + "?";
}

void flatten_map(const YAML::Node& map, const std::string& prefix, const std::string& file,
                 std::vector<ConfigLeaf>& leaves, std::vector<ConfigProblem>& problems,
                 std::map<std::string, SourceLocation>* sections) {
  for (const auto& kv : map) {
    const YAML::Node& key = kv.first;
    const YAML::Node& value = kv.second;
    const std::string name = key.IsScalar() ? key.Scalar() : std::string("?");
    const std::string path = prefix.empty() ? name : prefix + "." + name;
    const SourceLocation key_at = location_of_node(key, file);
    if (is_section(path)) {
      if (sections) (*sections)[path] = key_at;
      if (is_null(value)) continue;  // an empty section keeps its defaults
      if (!value.IsMap()) {
        problems.push_back({location_of_node(value, file), path,
                            "is a section: expected a map of its keys (see docs/CONFIG.md)"});
        continue;
      }
      flatten_map(value, path, file, leaves, problems, sections);
    } else if (find_field(path)) {
      // An empty value has no place of its own (yaml-cpp marks the next line): use the key's.
      SourceLocation at = is_null(value) ? key_at : location_of_node(value, file);
      if (at.line == 0) at = key_at;
      leaves.push_back({path, value, at, ""});
    } else {
      problems.push_back({key_at, path, "unknown key" + did_you_mean(path)});
    }
  }
}

/// Sorts problems by source (in order of first appearance), line and column, and throws them.
void throw_if_any(std::vector<ConfigProblem> problems) {
  if (problems.empty()) return;
  std::vector<std::string> sources;
  for (const auto& p : problems)
    if (std::find(sources.begin(), sources.end(), p.where.file) == sources.end()) sources.push_back(p.where.file);
  auto rank = [&](const ConfigProblem& p) {
    const auto index = std::find(sources.begin(), sources.end(), p.where.file) - sources.begin();
    return std::make_tuple(index, p.where.line, p.where.column);
  };
  std::stable_sort(problems.begin(), problems.end(),
                   [&](const ConfigProblem& a, const ConfigProblem& b) { return rank(a) < rank(b); });
  throw ConfigError(std::move(problems));
}

/// Converts and applies each leaf, then runs the cross-field rules; problems are collected, not thrown.
LoadedConfig resolve(LoadedConfig base, const std::vector<ConfigLeaf>& leaves, std::vector<ConfigProblem>& problems) {
  std::set<std::string> failed;
  for (const auto& leaf : leaves) {
    const FieldSpec* f = find_field(leaf.path);
    std::string error;
    if (!f) {
      problems.push_back({leaf.where, leaf.path, "unknown key" + did_you_mean(leaf.path)});
      continue;
    }
    if (auto v = convert(*f, leaf.value, error)) {
      f->set(base.config, *v);
      base.locations[leaf.path] = leaf.where;
    } else {
      if (!leaf.origin.empty()) error += " [from " + leaf.origin + "]";
      problems.push_back({leaf.where, leaf.path, error});
      failed.insert(leaf.path);
    }
  }
  // Cross-field rules run even when some values failed, so every problem shows at once;
  // a rule about a key whose value was refused would only repeat that problem.
  base.warnings.clear();
  for (auto& p : validate(base, &base.warnings))
    if (!failed.count(p.key)) problems.push_back(std::move(p));
  return base;
}

LoadedConfig load_from_text(const std::string& text, const std::string& file,
                            const std::vector<std::string>& overrides) {
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::ParserException& e) {
    throw ConfigError({{SourceLocation{file, e.mark.line + 1, e.mark.column + 1}, "",
                        "YAML syntax error: " + e.msg}});
  }
  std::vector<ConfigProblem> problems;
  std::vector<ConfigLeaf> leaves;
  LoadedConfig base;
  base.file = file;
  if (root && !root.IsNull() && !root.IsMap()) {
    problems.push_back({location_of_node(root, file), "", "the top level must be a map of keys such as `zero:`"});
  } else if (root && root.IsMap()) {
    migrate(root, file, problems);
    flatten_yaml(root, file, leaves, problems, &base.locations);
  }
  for (const auto& o : overrides) parse_override(o, leaves, problems);
  LoadedConfig loaded = resolve(std::move(base), leaves, problems);
  throw_if_any(std::move(problems));
  return loaded;
}

}  // namespace

void flatten_yaml(const YAML::Node& root, const std::string& file, std::vector<ConfigLeaf>& leaves,
                  std::vector<ConfigProblem>& problems, std::map<std::string, SourceLocation>* sections) {
  if (root && root.IsMap()) flatten_map(root, "", file, leaves, problems, sections);
}

void parse_override(const std::string& text, std::vector<ConfigLeaf>& leaves, std::vector<ConfigProblem>& problems) {
  const SourceLocation where{"--set " + text, 0, 0};
  const auto eq = text.find('=');
  if (eq == std::string::npos || eq == 0) {
    problems.push_back({where, "", "expected key.path=value, e.g. --set zero.stage=2"});
    return;
  }
  const std::string path = text.substr(0, eq);
  const std::string raw = text.substr(eq + 1);
  const FieldSpec* field = find_field(path);
  if (!field) {
    problems.push_back({where, path,
                        is_section(path) ? "is a section; set one of its keys, e.g. " + path + ".<key>=value"
                                         : "unknown key" + did_you_mean(path)});
    return;
  }
  YAML::Node value;
  try {
    value = YAML::Load(raw);
  } catch (const YAML::Exception&) {
    value = YAML::Node(raw);
  }
  const bool textual = field->type == FieldType::string || field->type == FieldType::path ||
                       field->type == FieldType::choice;
  if (textual && value && !value.IsScalar() && !raw.empty()) value = YAML::Node(raw);
  leaves.push_back({path, value, where, ""});
}

LoadedConfig apply_leaves(LoadedConfig base, const std::vector<ConfigLeaf>& leaves) {
  std::vector<ConfigProblem> problems;
  LoadedConfig loaded = resolve(std::move(base), leaves, problems);
  throw_if_any(std::move(problems));
  return loaded;
}

LoadedConfig load_config_file(const std::string& path, const std::vector<std::string>& overrides) {
  return load_from_text(io::read_file(path), path, overrides);
}

LoadedConfig load_config_string(const std::string& yaml, const std::string& name,
                                const std::vector<std::string>& overrides) {
  return load_from_text(yaml, name, overrides);
}

}  // namespace zs::config
