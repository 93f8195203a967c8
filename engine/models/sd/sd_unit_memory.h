#pragma once
// The UNet's kinds of ZeRO unit (models/sd/unet_2d_condition.cpp) as the memory estimator counts
// them (models/unit_memory.h): resnets, transformers (or pieces of one) and the samplers. Its
// "io" unit is the shared io_unit_memory().

#include "models/unit_memory.h"

namespace zs::models {

const UnitMemory& resnet_unit_memory();
const UnitMemory& unet_transformer_unit_memory();
const UnitMemory& downsampler_unit_memory();
const UnitMemory& upsampler_unit_memory();

}  // namespace zs::models
