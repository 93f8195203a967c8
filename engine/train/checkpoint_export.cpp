#include "train/checkpoint_export.h"

#include "checkpoint/checkpoint.h"
#include "checkpoint/checkpoint_meta.h"
#include "config/config_loader.h"
#include "core/error.h"
#include "models/model_family.h"

namespace zs::train {

checkpoint::ExportResult export_checkpoint(const std::string& folder, const std::string& out,
                                           const checkpoint::ExportOptions& o) {
  const checkpoint::CheckpointInfo info = checkpoint::open_checkpoint(folder);
  if (!info.meta.contains("sharding"))
    throw Error(ErrorKind::checkpoint, folder + ": saved by an older ZeroStudio (version 1); export reads version 2");
  // The run's config says which family's layouts apply.
  const checkpoint::CheckpointMeta meta = checkpoint::CheckpointMeta::from_json(info.meta, folder);
  const config::TrainerConfig cfg =
      config::load_config_string(meta.config.empty() ? std::string("version: 1\n") : meta.config, folder + "/meta.json")
          .config;
  return models::family_of(cfg).export_checkpoint(info, out, o);
}

}  // namespace zs::train
