#pragma once
// Where a run lives: the one function that decides a run's folder, used by the trainer, the
// train and launch commands and the GUI, so they always agree.

#include <string>

#include "settings/trainer_config.h"

namespace zs::train {

/// What decides a run's folder.
struct RunDirRequest {
  std::string run_dir;            ///< --run-dir; wins when set
  std::string resume;             ///< "", "latest", "auto" or a checkpoint folder
  std::string name_hint = "run";  ///< the config file's stem, for generated names
};

struct RunDirectory {
  std::string path;
  /// Named after the clock (NAME_HINT-YYYYmmdd-HHMMSS): processes started apart would get
  /// different folders, so several ranks must be given the path instead.
  bool generated = false;
};

/// --run-dir; else the resumed checkpoint's run (<run>/checkpoints/<tag>); else
/// ROOT / logging.run_name; else ROOT / NAME_HINT-YYYYmmdd-HHMMSS, where ROOT is
/// logging.runs_root (the installed program reads its default as ~/ZeroStudio/runs:
/// core/install_paths.h).
/// Throws zs::Error(config) for --resume latest or auto with neither --run-dir nor logging.run_name.
RunDirectory resolve_run_dir(const config::TrainerConfig& config, const RunDirRequest& request);

}  // namespace zs::train
