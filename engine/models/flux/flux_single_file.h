#pragma once
// Black Forest Labs' single-file Flux transformer (flux1-dev.safetensors, flux1-schnell.safetensors,
// and ComfyUI's copies under "model.diffusion_model."): names and fused tensors mapped onto
// diffusers' FluxTransformer2DModel, as diffusers' loaders/single_file_utils.py
// convert_flux_transformer_checkpoint_to_diffusers does, one tensor at a time (a 24 GB file is
// never held whole): q, k, v are chunks of the fused qkv; a single block's q, k, v and MLP input
// are row ranges of linear1; final_layer.adaLN_modulation.1 holds (shift, scale) where diffusers'
// norm_out.linear holds (scale, shift).

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "models/flux/flux_transformer.h"

namespace zs::io {
class SafetensorsReader;
}

namespace zs::models {

/// A tensor of the file by its name there (an undefined tensor when absent).
using FileTensor = std::function<at::Tensor(const std::string& name)>;
/// The shape of a tensor of the file by its name (empty when absent).
using FileShape = std::function<std::vector<std::int64_t>(const std::string& name)>;

/// Where BFL's keys start in a file with these names: "" or "model.diffusion_model."; nullopt when
/// the names are not a BFL Flux transformer.
std::optional<std::string> find_bfl_flux_prefix(const std::vector<std::string>& names);
/// The same, throwing zs::Error(config) naming `file` when the names are not a BFL Flux transformer.
std::string bfl_flux_prefix(const std::vector<std::string>& names, const std::string& file);

/// The transformer config a BFL file implies: block counts from its names, widths from the
/// shapes, guidance_embeds from guidance_in; heads from the qk-norm width (the head dim).
FluxConfig bfl_flux_config(const std::vector<std::string>& names, const FileShape& shape, const std::string& prefix,
                           const std::string& file);

/// The diffusers tensor `name` of a FluxTransformer2DModel of config `c`, read from the BFL file
/// through `tensor` (keys behind `prefix`). An undefined tensor for a name the layout lacks. A
/// fused tensor (qkv, linear1, the final modulation) whose rows do not fit `c` throws
/// zs::Error(config) naming `where`, the key, its shape and the expected rows before it is cut.
at::Tensor bfl_flux_tensor(const std::string& name, const FileTensor& tensor, const FluxConfig& c,
                           const std::string& prefix, const std::string& where = "the Flux transformer file");

/// A Black Forest Labs transformer file opened for reading (copies share the mapping).
class BflFile {
 public:
  /// Throws zs::Error naming `path` when it cannot be read or is not a BFL Flux transformer.
  explicit BflFile(const std::string& path);
  const std::string& path() const;
  /// "" or "model.diffusion_model." (ComfyUI's copies).
  const std::string& prefix() const { return prefix_; }
  const std::vector<std::string>& names() const { return names_; }
  const io::SafetensorsReader& reader() const { return *reader_; }
  /// The configuration the file's names and shapes imply (bfl_flux_config).
  FluxConfig config() const;
  /// The configuration a run uses with this file: `config_dir`/transformer/config.json (the
  /// companion folder, model.config_path) when it exists, else config(). `train` and `model info`
  /// both read a single file through this.
  FluxConfig config(const std::string& config_dir) const;
  /// The diffusers tensor `name` of a transformer of config `c` (bfl_flux_tensor); undefined when absent.
  at::Tensor tensor(const std::string& name, const FluxConfig& c) const;

 private:
  std::shared_ptr<io::SafetensorsReader> reader_;
  std::string prefix_;
  std::vector<std::string> names_;
};

/// One tensor of BFL's layout for writing: its key (without a prefix), its shape, and which
/// diffusers tensors fill which of its rows (every mapping is along dimension 0: whole tensors,
/// q/k/v thirds of a fused qkv, row ranges of linear1, the swapped halves of the final modulation).
struct BflTensor {
  std::string key;
  std::vector<std::int64_t> shape;
  struct Part {
    std::string name;  ///< the diffusers parameter
    at::Tensor rows;   ///< int64 [its rows]: where they go in the BFL tensor
  };
  std::vector<Part> parts;
};

/// BFL's layout of a FluxTransformer2DModel of config `c`, sorted by key: the exact inverse of
/// bfl_flux_tensor (derived from it, so the two cannot disagree). Throws zs::Error(checkpoint)
/// when a diffusers parameter has no place in the layout.
std::vector<BflTensor> bfl_flux_layout(const FluxConfig& c);

/// The BFL tensor of `t`, assembled from the diffusers tensors `read` gives by name (float32).
at::Tensor assemble_bfl_tensor(const BflTensor& t, const std::function<at::Tensor(const std::string&)>& read);

}  // namespace zs::models
