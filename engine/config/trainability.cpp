#include "config/trainability.h"

#include <filesystem>

namespace zs::config {

namespace fs = std::filesystem;

std::string dataset_folder(const TrainerConfig& c, const std::string& run_dir) {
  return c.data.path.empty() ? (fs::path(run_dir) / "data").string() : c.data.path;
}

std::vector<ConfigProblem> trainability_problems(const LoadedConfig& loaded, const std::string& run_dir) {
  const TrainerConfig& c = loaded.config;
  std::vector<ConfigProblem> out;
  auto add = [&](const std::string& key, std::string message) {
    out.push_back({loaded.location_of(key), key, std::move(message)});
  };
  std::error_code ec;
  if (c.model.path.empty() && c.model.preset != "tiny" && c.model.preset != "flux-tiny" &&
      c.model.preset != "qwen-image-tiny")
    add("model.preset", c.model.preset + " describes the architecture for estimates only; set model.path to its "
                        "diffusers folder or single-file checkpoint to train it (or use preset tiny, flux-tiny or qwen-image-tiny)");
  else if (!c.model.path.empty() && !fs::exists(c.model.path, ec))
    add("model.path", "'" + c.model.path + "' does not exist yet; set it to your diffusers folder (with "
                      "model_index.json) or single-file checkpoint");
  if (c.data.path.empty() && c.data.generate == "none") {
    const std::string folder =
        run_dir.empty() ? (fs::path(c.logging.runs_root) / "<run>" / "data").string() : dataset_folder(c, run_dir);
    if (run_dir.empty())
      add("data.path", "empty: the run reads its images from the run's data/ folder (" + folder +
                           "); put your images with captions there before training, or set data.path");
    else if (!fs::is_directory(folder, ec) || fs::is_empty(folder, ec))
      add("data.path", "empty, so the dataset is the run's data/ folder, and " + folder +
                           (fs::is_directory(folder, ec) ? " is empty" : " does not exist") +
                           "; put your images with captions there, or set data.path to your dataset folder");
  }
  return out;
}

void require_trainable(const LoadedConfig& loaded, const std::string& run_dir) {
  auto problems = trainability_problems(loaded, run_dir);
  if (!problems.empty()) throw ConfigError(std::move(problems));
}

}  // namespace zs::config
