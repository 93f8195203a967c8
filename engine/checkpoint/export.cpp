#include "checkpoint/export.h"

#include "checkpoint/checkpoint.h"
#include "checkpoint/checkpoint_meta.h"
#include "config/config_loader.h"
#include "core/error.h"
#include "models/model_family.h"

namespace zs::checkpoint {

ExportResult export_checkpoint(const std::string& checkpoint, const std::string& out, const ExportOptions& o) {
  const CheckpointInfo info = open_checkpoint(checkpoint);
  if (!info.meta.contains("sharding"))
    throw Error(ErrorKind::checkpoint, checkpoint + ": saved by an older ZeroStudio (version 1); export reads version 2");
  // The run's config says which family's layouts apply.
  const CheckpointMeta meta = CheckpointMeta::from_json(info.meta, checkpoint);
  const config::TrainerConfig cfg =
      config::load_config_string(meta.config.empty() ? std::string("version: 1\n") : meta.config, checkpoint + "/meta.json")
          .config;
  return models::family_of(cfg).export_checkpoint(info, out, o);
}

}  // namespace zs::checkpoint
