#pragma once
// Export of a run's checkpoint: the run's config names the model family, whose layouts
// (checkpoint/export.h lists the formats) write it.

#include <string>

#include "checkpoint/export.h"

namespace zs::train {

/// Exports checkpoint folder `folder` to `out` (a file for safetensors, a folder for diffusers)
/// through the family of the run that saved it (models::ModelFamily::export_checkpoint). Throws
/// zs::Error naming the checkpoint or the output on any problem (no EMA in the checkpoint, an
/// unknown format, an existing output folder that is not empty).
checkpoint::ExportResult export_checkpoint(const std::string& folder, const std::string& out,
                                           const checkpoint::ExportOptions& options);

}  // namespace zs::train
