#pragma once
// Qwen-Image's denoiser, diffusers' QwenImageTransformer2DModel (src/diffusers/models/transformers/
// transformer_qwenimage.py): 2×2-packed latent tokens and Qwen2.5-VL text states (RMS-normed, then
// projected) through `num_layers` dual-stream MMDiT blocks (img_mod/txt_mod modulation, joint
// attention with RMS qk-norm and a text mask, img_mlp/txt_mlp), RoPE over (frame, row, column)
// with scale_rope (centred grid) and the text positions after the grid's largest index; output
// through AdaLayerNormContinuous and proj_out. Parameter names are diffusers'; every Linear is an
// AdaptedLinear (LoRA); attention goes through models::multi_head_attention (training.attention).

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>
#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>

#include "models/flux/flux_transformer.h"
#include "models/lora.h"
#include "models/param_unit.h"

namespace zs::models {

/// transformer/config.json of a QwenImageTransformer2DModel. The Edit-2511 / layered variants'
/// keys (zero_cond_t, use_additional_t_cond, use_layer3d_rope, guidance_embeds) are refused when true.
struct QwenImageConfig {
  std::int64_t patch_size = 2;
  std::int64_t in_channels = 64;
  std::int64_t out_channels = 16;
  std::int64_t num_layers = 60;
  std::int64_t attention_head_dim = 128;
  std::int64_t num_attention_heads = 24;
  std::int64_t joint_attention_dim = 3584;
  std::vector<std::int64_t> axes_dims_rope = {16, 56, 56};

  std::int64_t inner_dim() const { return attention_head_dim * num_attention_heads; }
  /// Parses a config.json object; `source` names the file in errors, which name the key.
  static QwenImageConfig from_json(const nlohmann::json& j, const std::string& source);
  static QwenImageConfig from_file(const std::string& path);
  nlohmann::json to_json() const;
};

// (The block, attention and RoPE classes: declared here by the implementation.)

class QwenImageTransformer2DModelImpl : public torch::nn::Module {
 public:
  /// With `on_unit`, each block is handed over as soon as it is built (ZeRO-3's sharded init:
  /// models/param_unit.h); "io" stays whole.
  explicit QwenImageTransformer2DModelImpl(QwenImageConfig config, const UnitBuilt& on_unit = {});
  const QwenImageConfig& config() const { return config_; }

  /// The velocity for packed latent tokens `hidden` [B, S, in_channels] (S = grid_h · grid_w) at
  /// `timestep` σ [B] in [0, 1] (scaled by 1000 inside), text states `context`
  /// [B, L, joint_attention_dim] with `context_mask` [B, L] (1 valid, 0 padding; undefined = all
  /// valid). Returns [B, S, patch²·out_channels].
  at::Tensor forward(const at::Tensor& hidden, const at::Tensor& context, const at::Tensor& context_mask,
                     const at::Tensor& timestep, std::int64_t grid_h, std::int64_t grid_w);

  /// ZeRO units in forward order: "io" (time_text_embed, txt_norm, img_in, txt_in, norm_out,
  /// proj_out), then "transformer_blocks.N"; parameters by their names here.
  std::vector<ParamUnit> units() const;
  /// Hooks around each block's forward (ZeRO stage 3): a block's main tensor is the joint
  /// sequence [B, L + S, dim] (text tokens first), unit 0 the whole forward's input and output.
  void set_unit_hooks(std::shared_ptr<UnitHooks> hooks) { hooks_ = std::move(hooks); }
  /// Activation checkpointing per block (the kept inputs in CPU memory with cpu_checkpointing).
  void set_gradient_checkpointing(bool on) { gradient_checkpointing_ = on; }
  void set_cpu_checkpointing(bool on) { cpu_checkpointing_ = on; }

  torch::nn::ModuleList transformer_blocks{nullptr};

 private:
  QwenImageConfig config_;
  std::shared_ptr<UnitHooks> hooks_;
  bool gradient_checkpointing_ = false, cpu_checkpointing_ = false;
};
TORCH_MODULE(QwenImageTransformer2DModel);

}  // namespace zs::models
