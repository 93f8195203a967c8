#pragma once
// The trainer schema: one entry per YAML key, the single source of truth for
// defaults, types, allowed values and documentation (docs/CONFIG.md is printed from it).

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "settings/trainer_config.h"
#include "settings/value.h"

namespace zs::config {

/// What a key holds.
enum class FieldType {
  boolean,      ///< true / false
  integer,      ///< whole number; 5e8 style is accepted when it is whole
  number,       ///< floating point
  string,       ///< free text
  path,         ///< a file or folder path (free text)
  choice,       ///< one of `choices` (matched case-insensitively, stored as listed)
  string_list,  ///< YAML sequence of strings
  number_list,  ///< YAML sequence of numbers
  string_map,   ///< YAML mapping of strings to strings (order kept)
  number_map,   ///< YAML mapping of strings to numbers (stored as text, order kept)
};

/// Name of a type as documented ("integer", "one of", ...).
std::string_view to_string(FieldType type);

/// One trainer key.
struct FieldSpec {
  std::string path;                  ///< dotted key path, e.g. "zero.offload_optimizer.device"
  FieldType type = FieldType::string;
  Value default_value;               ///< monostate only for nullable keys
  bool nullable = false;             ///< `null` is allowed (meaning documented in `doc`)
  std::vector<std::string> choices;  ///< for FieldType::choice
  std::optional<double> min;         ///< inclusive lower bound (numbers, and list items)
  std::optional<double> max;         ///< inclusive upper bound
  std::optional<size_t> list_size;   ///< exact length for lists
  std::string doc;                   ///< one or two sentences for the reference
  /// The key defines the run: a resumed run must have the checkpoint's value (the model, the
  /// data and what trains; not caches, workers or the learning rate). Set per section in
  /// schema.cpp, with exceptions marked on the key.
  bool defines_run = false;
  std::function<Value(const TrainerConfig&)> get;
  std::function<void(TrainerConfig&, const Value&)> set;

  // Chainable setters used while building the table.
  FieldSpec& range(std::optional<double> lo, std::optional<double> hi) { min = lo; max = hi; return *this; }
  FieldSpec& allow_null() { nullable = true; return *this; }
  FieldSpec& size(size_t n) { list_size = n; return *this; }
  FieldSpec& run_defining(bool on = true) { defines_run = on; return *this; }
};

/// A top-level section ("zero") or nested group ("zero.offload_optimizer") with its doc.
struct SectionSpec {
  std::string path;
  std::string doc;
};

/// All keys, in the order files and docs list them.
const std::vector<FieldSpec>& schema_fields();
/// All sections, in order.
const std::vector<SectionSpec>& schema_sections();

/// The key at `path`, or nullptr.
const FieldSpec* find_field(std::string_view path);
/// True when `path` names a section or group (a map of keys).
bool is_section(std::string_view path);

/// A bound of `field` as text: whole for integer keys ("1"), decimal otherwise ("0.0").
std::string format_bound(const FieldSpec& field, double bound);

/// Up to three known key or section paths closest to `path` (for "did you mean").
std::vector<std::string> suggest_paths(std::string_view path);

}  // namespace zs::config
