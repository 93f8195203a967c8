#pragma once
// What the transformer families' single-file layouts share (Z-Image's ComfyUI file, FLUX.2's BFL
// file; Flux.1's predates it): a file opened once with its names behind the family's prefix and
// their shapes, a layout derived from the diffusers model's own parameters through the family's
// name mapping (so reader and writer cannot disagree), the whole-file check against a config, and
// the assembly of a layout tensor from diffusers tensors for --format single-file.

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>

namespace zs::io {
class SafetensorsReader;
}

namespace zs::models {

/// Where a diffusers parameter lives in a single-file layout: its key there, which third of a fused
/// qkv's rows it is (−1: the whole tensor), and whether its two halves of rows are swapped (a
/// modulation stored as (shift, scale) where diffusers has (scale, shift)).
struct SingleFilePlace {
  std::string key;
  int third = -1;
  bool swapped = false;
};
using SingleFilePlacer = std::function<SingleFilePlace(const std::string& diffusers_name)>;

/// One tensor of a layout: its key (no prefix) and the diffusers parameters stacked along its rows,
/// in order (one for a renamed tensor, three for a fused qkv, none for a tensor the model never
/// reads, written as ones); `swapped` as SingleFilePlace's.
struct SingleFileTensor {
  std::string key;
  std::vector<std::int64_t> shape;
  std::vector<std::string> parts;
  bool swapped = false;
};

/// The layout of `skeleton` (a diffusers model, on the meta device) under `place`, sorted by key.
/// Throws zs::Error(checkpoint) naming `family` when a fused key lacks one of q, k, v.
std::vector<SingleFileTensor> single_file_layout(const torch::nn::Module& skeleton, const SingleFilePlacer& place,
                                                 const std::string& family);

/// The layout tensor `t` from the diffusers tensors `read` gives by name (float32).
at::Tensor assemble_single_file_tensor(const SingleFileTensor& t, const std::function<at::Tensor(const std::string&)>& read);

/// A single-file transformer opened for reading (copies share the reader).
class SingleFile {
 public:
  /// `find_prefix` says where the layout's keys start ("", "model.diffusion_model.") or that the
  /// names are not this layout, then zs::Error(config) says `not_this_layout` after the path.
  SingleFile(const std::string& path,
             const std::function<std::optional<std::string>(const std::vector<std::string>&)>& find_prefix,
             const std::string& not_this_layout);
  const std::string& path() const;
  const std::string& prefix() const { return prefix_; }
  /// The names behind the prefix (without it).
  const std::vector<std::string>& names() const { return names_; }
  bool has(const std::string& key) const { return shapes_.count(key) > 0; }
  /// The shape of `key` (no prefix), of rank `rank`; throws zs::Error(config) naming the file and
  /// the key as `model` ("a FLUX.2 transformer") has it.
  std::vector<std::int64_t> dims(const std::string& key, std::size_t rank, const std::string& model) const;
  /// Every tensor of `layout` but those the model never reads is in the file with its shape; throws
  /// zs::Error(config) naming the file and the first key missing (as `model` — "a Z-Image transformer
  /// with …" — has it) or misshapen.
  void check(const std::vector<SingleFileTensor>& layout, const std::string& model) const;
  /// The diffusers tensor placed at `place` (a fused qkv's third of `rows_each` rows, swapped halves
  /// put back); undefined when the file lacks its key.
  at::Tensor tensor(const SingleFilePlace& place, std::int64_t rows_each) const;

 private:
  std::shared_ptr<io::SafetensorsReader> reader_;
  std::string prefix_;
  std::vector<std::string> names_;
  std::map<std::string, std::vector<std::int64_t>> shapes_;
};

/// `config_dir`/transformer/config.json when there is one (model.config_path: it describes the
/// single file's model), else nullopt (the file's names and shapes imply the configuration).
std::optional<std::string> folder_transformer_config(const std::string& config_dir);

}  // namespace zs::models
