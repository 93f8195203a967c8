#include "train/checkpoint_export.h"

#include "checkpoint/checkpoint.h"
#include "checkpoint/checkpoint_meta.h"
#include "config/config_loader.h"
#include "core/error.h"
#include "io/safetensors.h"
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
  checkpoint::ExportResult r = models::family_of(cfg).export_checkpoint(info, out, o);
  // A run on a published fp8 file has no higher-precision base: say what the merge went into.
  if (o.merge && info.meta.contains("base_model"))
    if (const std::string fp8 = io::first_fp8_file(info.meta["base_model"].value("path", "")); !fp8.empty())
      r.notes.push_back("the base holds fp8 weights (" + fp8 + "): layers merged from such a file are its decoded fp8 "
                        "values, not a higher-precision base; a bf16 file of the same model gives the merge its full precision");
  return r;
}

}  // namespace zs::train
