#pragma once
// The single-file FLUX.2 transformer Black Forest Labs ships and ComfyUI loads (flux-2-klein-4b.safetensors,
// flux2-dev.safetensors: BFL's names, with or without ComfyUI's "model.diffusion_model." prefix), mapped
// onto diffusers' Flux2Transformer2DModel as diffusers' loaders/single_file_utils.py
// convert_flux2_transformer_checkpoint_to_diffusers does (0.42.1), one tensor at a time: img_in /
// txt_in are x_embedder / context_embedder; time_in.{in,out}_layer and guidance_in.{in,out}_layer the
// time_guidance_embed's linear_1 / linear_2; the three shared modulations' `lin` is `linear`;
// final_layer.linear is proj_out and final_layer.adaLN_modulation.1 is norm_out.linear with its two
// halves swapped (BFL's (shift, scale), diffusers' (scale, shift)); double_blocks.N.{img,txt}_attn.qkv
// hold to_q, to_k, to_v / add_{q,k,v}_proj as thirds of their rows, .proj is to_out.0 / to_add_out,
// .norm.{query,key}_norm.scale the q/k norms' weights, {img,txt}_mlp.{0,2} the SwiGLU's linear_in /
// linear_out; single_blocks.N.linear1 / linear2 are attn.to_qkv_mlp_proj / attn.to_out and
// .norm.{query,key}_norm.scale attn.norm_q / norm_k.

#include <optional>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "models/flux2/flux2_transformer.h"
#include "models/single_file_layout.h"

namespace zs::models {

/// Where the layout's keys start in a file with these names: "" or "model.diffusion_model."; nullopt
/// when the names are not a FLUX.2 transformer in BFL's layout (no double_stream_modulation_img.lin.weight).
std::optional<std::string> find_flux2_file_prefix(const std::vector<std::string>& names);

/// Where diffusers' tensor `name` (a parameter's full name) lives in BFL's layout (a name the layout
/// does not know comes back as it is).
SingleFilePlace flux2_file_place(const std::string& name);

/// BFL's layout of a Flux2Transformer2DModel of config `c`, sorted by key.
std::vector<SingleFileTensor> flux2_file_layout(const Flux2Config& c);

/// A single-file FLUX.2 transformer opened for reading (copies share the reader).
class Flux2File {
 public:
  /// Throws zs::Error(config) naming `path` when it cannot be read or is not in this layout.
  explicit Flux2File(const std::string& path);
  const std::string& path() const { return file_.path(); }
  const std::string& prefix() const { return file_.prefix(); }
  /// The configuration the file's names and shapes imply (block counts, width, heads from the q
  /// norm's width, text width, SwiGLU ratio, the guidance embedding if it has one; RoPE axes (32, 32,
  /// 32, 32) at θ 2000 as the releases', which hold for 128-wide heads only — other widths need
  /// model.config_path).
  Flux2Config config() const;
  /// `config_dir`/transformer/config.json when there is one (model.config_path), else config().
  Flux2Config config(const std::string& config_dir) const;
  /// Every tensor a transformer of `c` reads is in the file with its shape; throws zs::Error(config)
  /// naming the file and the first key missing or misshapen.
  void check(const Flux2Config& c) const;
  /// The diffusers tensor `name` of a transformer of config `c`; undefined when the file lacks it.
  at::Tensor tensor(const std::string& name, const Flux2Config& c) const;

 private:
  SingleFile file_;
};

}  // namespace zs::models
