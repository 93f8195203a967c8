#pragma once
// Loading and saving a module's parameters (and buffers) by name from/to safetensors files.

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <torch/nn/module.h>

#include "models/param_unit.h"

namespace zs::io {
class SafetensorsReader;
}

namespace zs::models {

/// Safetensors files opened together (a sharded component), kept open while loading.
struct WeightFiles {
  explicit WeightFiles(const std::vector<std::string>& files);
  ~WeightFiles();  // (the readers are complete in weights.cpp only)
  WeightFiles(WeightFiles&&) noexcept;
  /// The tensor `name` from the first file that has it; undefined when none does.
  at::Tensor find(const std::string& name) const;
  std::vector<std::unique_ptr<io::SafetensorsReader>> owned;
  std::vector<const io::SafetensorsReader*> view;
};

/// What a load found beyond the module's own names.
struct LoadReport {
  std::vector<std::string> unexpected;  ///< names in the file that the module does not have
};

/// Copies every parameter and buffer of `module` from `reader` (name = `prefix` + module name),
/// converting dtype. A missing name or a shape mismatch throws zs::Error(checkpoint) naming the
/// file and every offending tensor, and leaves the module unchanged.
LoadReport load_weights(torch::nn::Module& module, const io::SafetensorsReader& reader, const std::string& prefix = "");

/// Other names a tensor may have in a file (older conventions); tried when the name is absent.
using NameAliases = std::function<std::vector<std::string>(const std::string&)>;

/// The same over several files (a sharded checkpoint: each name is looked up in every file), with
/// optional aliases. A linear weight stored as a 1x1 conv [out, in, 1, 1] is accepted.
LoadReport load_weights(torch::nn::Module& module, const std::vector<const io::SafetensorsReader*>& readers,
                        const std::string& prefix = "", const NameAliases& aliases = {});

/// Where a loader finds a tensor: the tensor for a module's parameter or buffer name (converted
/// as needed), or an undefined tensor when there is none.
using TensorLookup = std::function<at::Tensor(const std::string& name)>;
/// The same from `lookup` (a single-file checkpoint's renamed and reshaped tensors); errors name
/// `where`. Names for which `skip` says true are left as they are.
void load_weights(torch::nn::Module& module, const TensorLookup& lookup, const std::string& where,
                  const std::function<bool(const std::string&)>& skip = {});

/// Whether `path` is a regular file.
bool weights_file_exists(const std::string& path);

/// A model `Module` (a TORCH_MODULE holder built as Module(config, on_unit)) with its weights
/// from `lookup`; errors name `where`. With `on_unit`, each unit is loaded as soon as it is built
/// (except the names on_unit.supplies) and handed over, so the whole model never exists at once
/// in the file's precision (ZeRO-3's sharded init, a base quantized as it loads).
template <class Module, class Config>
Module load_units(const Config& config, const TensorLookup& lookup, const std::string& where, const UnitBuilt& on_unit) {
  std::set<std::string> handed;  // full names of what on_unit was given
  UnitBuilt load_then_hand;
  if (on_unit)
    load_then_hand = [&](const std::string& unit, const std::string& prefix, torch::nn::Module& module) {
      load_weights(module, [&](const std::string& n) { return lookup(prefix + "." + n); }, where + " (" + unit + ")",
                   [&](const std::string& n) { return on_unit.supplies(unit, n); });
      for (const auto& item : module.named_parameters(true)) handed.insert(prefix + "." + item.key());
      for (const auto& item : module.named_buffers(true)) handed.insert(prefix + "." + item.key());
      on_unit(unit, prefix, module);
    };
  Module m(config, load_then_hand);
  load_weights(*m, lookup, where, [&](const std::string& name) { return handed.count(name) > 0; });
  return m;
}

/// The same from the safetensors file `file` when it exists (a run's model folder holding a
/// preset's base); without it, Module(config, on_unit) with fresh weights (a checkpoint's shards
/// fill them).
template <class Module, class Config>
Module load_units_if_saved(const Config& config, const std::string& file, const UnitBuilt& on_unit) {
  if (!weights_file_exists(file)) return Module(config, on_unit);
  const WeightFiles r({file});
  return load_units<Module>(config, [&](const std::string& n) { return r.find(n); }, file, on_unit);
}

/// Rows [index·n, (index+1)·n) of `t` [parts·n, ...], a fused tensor of a single-file layout (q, k
/// and v in one, or a modulation's two halves), where n = `rows_each`. A tensor whose first
/// dimension is not exactly parts·n (or that has no dimension) throws zs::Error(config) naming
/// `where` (the file), `key`, its shape and the expected rows, before anything is cut.
at::Tensor fused_rows(const at::Tensor& t, std::int64_t parts, std::int64_t index, std::int64_t rows_each,
                      const std::string& key, const std::string& where);

/// "[a, b, c]": a shape as the loaders' messages write it.
std::string shape_text(at::IntArrayRef shape);

/// How many numbered blocks a single-file layout's names hold under `head` ("layers.",
/// "double_blocks."): the highest N of "<head>N.…" plus one; 0 when none.
std::int64_t numbered_blocks(const std::vector<std::string>& names, const std::string& head);

/// Checks that `t`'s first dimension has `rows` rows (the same refusal as fused_rows).
void expect_rows(const at::Tensor& t, std::int64_t rows, const std::string& key, const std::string& where);

/// Elements of every parameter of `module` (shapes only: meta tensors count too).
std::int64_t parameter_count(const torch::nn::Module& module);

/// Writes the module's parameters and buffers to `path` atomically, in their dtypes or, for the
/// parameters, in `dtype` when given.
void save_weights(const torch::nn::Module& module, const std::string& path, const std::string& prefix = "",
                  const std::map<std::string, std::string>& metadata = {},
                  std::optional<at::ScalarType> dtype = std::nullopt);

}  // namespace zs::models
