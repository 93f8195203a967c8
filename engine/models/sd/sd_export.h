#pragma once
// The SD family's export layouts (checkpoint/export.h lists the formats): what
// SdFamily::export_checkpoint carries out, and `zerostudio model convert`'s pipeline-to-single-
// file conversion.

#include <string>

#include "checkpoint/checkpoint.h"
#include "checkpoint/export.h"

namespace zs::checkpoint {

/// Exports `info` (a checkpoint of an SD-family run, version 2) to `out` in o.format.
ExportResult export_sd_checkpoint(const CheckpointInfo& info, const std::string& out, const ExportOptions& o);

/// Converts a diffusers pipeline folder (SD 1.x or SDXL) into one single-file checkpoint in the
/// original layout (UNet, VAE, text encoders), one tensor at a time.
ExportResult convert_to_single_file(const std::string& pipeline_dir, const std::string& out, const ExportOptions& options);

}  // namespace zs::checkpoint
