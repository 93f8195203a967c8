#pragma once
// UNet2DConditionModel in LibTorch with diffusers' module tree and parameter names, so a
// diffusers unet/diffusion_pytorch_model.safetensors loads by name.

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include "models/denoiser_module.h"
#include "models/param_unit.h"
#include "models/sd/unet_config.h"

namespace zs::models {

namespace detail {
struct UNetParts;  // the block modules, defined in unet_2d_condition.cpp
}


class UNet2DConditionModelImpl : public DenoiserModule {
 public:
  /// Builds the module tree (weights from LibTorch's default initialisation), handing each unit
  /// to `on_unit` when given.
  explicit UNet2DConditionModelImpl(UNetConfig config, const UnitBuilt& on_unit = {});
  ~UNet2DConditionModelImpl() override;

  /// sample [B, in_channels, H, W] (H, W divisible by config().downsample_factor()),
  /// timesteps [B] or [1] (integer or float), encoder_hidden_states [B, T, cross_attention_dim]
  /// -> predicted [B, out_channels, H, W]. SDXL-type UNets (addition_embed_type text_time) also
  /// need text_embeds [B, pooled width] and time_ids [B, 6] (original h, w, crop top, left,
  /// target h, w).
  at::Tensor forward(const at::Tensor& sample, const at::Tensor& timesteps, const at::Tensor& encoder_hidden_states,
                     const at::Tensor& text_embeds = {}, const at::Tensor& time_ids = {});

  const UNetConfig& config() const { return config_; }

  /// The parameter units in forward order: "io" (conv_in, time_embedding, conv_norm_out,
  /// conv_out) first, then every resnet, transformer (or transformer block, when
  /// config().split_transformer_blocks) and sampler in the order forward runs them.
  std::vector<ParamUnit> units() const override;

 private:
  UNetConfig config_;
  std::unique_ptr<detail::UNetParts> parts_;
  struct UnitSpec {
    std::string name;
    std::vector<std::string> prefixes;  // module prefixes whose parameters are the unit's
  };
  std::vector<UnitSpec> units_;  // index -> unit; 0 is io
};
TORCH_MODULE(UNet2DConditionModel);

/// diffusers' sinusoidal timestep embedding: timesteps [B] -> [B, dim].
at::Tensor timestep_embedding(const at::Tensor& timesteps, std::int64_t dim, bool flip_sin_to_cos, double freq_shift);

}  // namespace zs::models
