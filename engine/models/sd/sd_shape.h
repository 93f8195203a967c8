#pragma once
// The SD family's shape arithmetic: a UNet's ZeRO units and parameter counts from its config.

#include <cstdint>

#include "models/model_shape.h"
#include "models/sd/unet_config.h"

namespace zs::models {

/// The UNet's units, in the order UNet2DConditionModel::units() gives them, with parameter
/// counts from the config (diffusers' module tree; SDXL's text_time embedding included).
models::ModelShape unet_shape(const UNetConfig& config);
/// Parameters of a UNet with this config (the sum over unet_shape's units).
std::int64_t unet_parameter_count(const UNetConfig& config);

}  // namespace zs::models
