#pragma once
// The single-file Z-Image transformer ComfyUI users have (z_image_turbo_bf16.safetensors, the
// original Tongyi-MAI layout, with or without ComfyUI's "model.diffusion_model." prefix), mapped onto
// diffusers' ZImageTransformer2DModel as diffusers' loaders/single_file_utils.py
// convert_z_image_transformer_checkpoint_to_diffusers does (0.42.1), one tensor at a time:
// x_embedder. / final_layer. are all_x_embedder.2-1. / all_final_layer.2-1.; attention.qkv holds
// to_q, to_k, to_v as thirds of its rows; attention.out is to_out.0; q_norm / k_norm are norm_q /
// norm_k; the file's unused top-level norm_final.weight is not read (diffusers drops it).

#include <optional>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "models/single_file_layout.h"
#include "models/z_image/z_image_transformer.h"

namespace zs::models {

/// Where the layout's keys start in a file with these names: "" or "model.diffusion_model."; nullopt
/// when the names are not a Z-Image transformer in the single-file layout (no layers.0.attention.qkv.weight).
std::optional<std::string> find_z_image_file_prefix(const std::vector<std::string>& names);

/// The single-file layout of a ZImageTransformer2DModel of config `c`, sorted by key (the layout's
/// unused norm_final.weight among them, with no diffusers parts: written as ones).
std::vector<SingleFileTensor> z_image_file_layout(const ZImageConfig& c);

/// A single-file Z-Image transformer opened for reading (copies share the reader).
class ZImageFile {
 public:
  /// Throws zs::Error(config) naming `path` when it cannot be read or is not in this layout.
  explicit ZImageFile(const std::string& path);
  const std::string& path() const { return file_.path(); }
  const std::string& prefix() const { return file_.prefix(); }
  /// The configuration the file's names and shapes imply (block counts, width, heads from the q
  /// norm's width, caption width; the rest as Tongyi-MAI's released config: axes (32, 48, 48) over
  /// axes_lens (1536, 512, 512), which hold for 128-wide heads only — other widths need
  /// model.config_path).
  ZImageConfig config() const;
  /// `config_dir`/transformer/config.json when there is one (model.config_path), else config().
  ZImageConfig config(const std::string& config_dir) const;
  /// Every tensor a transformer of `c` reads is in the file with its shape; throws zs::Error(config)
  /// naming the file and the first key missing or misshapen (a file without its refiner blocks, say).
  void check(const ZImageConfig& c) const;
  /// The diffusers tensor `name` of a transformer of config `c`; undefined when the file lacks it.
  at::Tensor tensor(const std::string& name, const ZImageConfig& c) const;

 private:
  SingleFile file_;
};

}  // namespace zs::models
