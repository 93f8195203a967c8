#include "train/run_directory.h"

#include <ctime>
#include <filesystem>

#include "core/error.h"
#include "core/install_paths.h"
#include "core/text.h"

namespace zs::train {

namespace fs = std::filesystem;

RunDirectory resolve_run_dir(const config::TrainerConfig& cfg, const RunDirRequest& request) {
  if (!request.run_dir.empty()) return {without_trailing_slash(request.run_dir), false};
  const bool in_the_run = request.resume == "latest" || request.resume == "auto";  // the run's own checkpoints
  if (!request.resume.empty() && !in_the_run)  // a checkpoint folder <run>/checkpoints/<tag>
    return {fs::path(without_trailing_slash(request.resume)).lexically_normal().parent_path().parent_path().string(), false};
  // The installed program keeps runs under ~/ZeroStudio/runs unless the config names a root.
  const std::string root = effective_runs_root(cfg.logging.runs_root);
  if (!cfg.logging.run_name.empty()) return {(fs::path(root) / cfg.logging.run_name).string(), false};
  if (in_the_run)
    throw Error(ErrorKind::config, "--resume " + request.resume + " needs the run: pass --run-dir DIR (or set logging.run_name)");
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  localtime_r(&now, &tm);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", &tm);
  return {(fs::path(root) / (request.name_hint + "-" + stamp)).string(), true};
}

}  // namespace zs::train
