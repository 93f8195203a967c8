#include "config/trainability.h"

#include <algorithm>
#include <filesystem>

#include "core/text.h"
#include "models/model_family.h"

namespace zs::config {

namespace fs = std::filesystem;

std::string dataset_folder(const TrainerConfig& c, const std::string& run_dir) {
  return c.data.path.empty() ? (fs::path(run_dir) / "data").string() : c.data.path;
}

namespace {

std::string model_files_message(const TrainerConfig& c) {
  const std::string problem = models::model_files_problem(c);
  if (problem.empty()) return "";
  return "'" + c.model.path + "' cannot be trained from: " + problem +
         "\n  (replace or re-download what is named; `zerostudio model info " + c.model.path + "` lists every component)";
}

}  // namespace

std::vector<ConfigProblem> trainability_problems(const LoadedConfig& loaded, const std::string& run_dir,
                                                 ModelFiles files) {
  const TrainerConfig& c = loaded.config;
  std::vector<ConfigProblem> out;
  auto add = [&](const std::string& key, std::string message) {
    out.push_back({loaded.location_of(key), key, std::move(message)});
  };
  std::error_code ec;
  const std::vector<std::string> tiny = models::presets_training_without_path();
  if (c.model.path.empty() && std::find(tiny.begin(), tiny.end(), c.model.preset) == tiny.end())
    add("model.preset", c.model.preset + " describes the architecture for estimates only; set model.path to its "
                        "diffusers folder or single-file checkpoint to train it (or use preset " + or_list(tiny) + ")");
  else if (!c.model.path.empty() && !fs::exists(c.model.path, ec))
    add("model.path", "'" + c.model.path + "' does not exist yet; set it to your diffusers folder (with "
                      "model_index.json) or single-file checkpoint");
  else if (!c.model.path.empty() && files == ModelFiles::read)
    if (std::string m = model_files_message(c); !m.empty()) add("model.path", std::move(m));
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

void require_readable_model(const LoadedConfig& loaded) {
  const TrainerConfig& c = loaded.config;
  if (c.model.path.empty()) return;
  std::error_code ec;
  std::string m = fs::exists(c.model.path, ec) ? model_files_message(c) : "'" + c.model.path + "' does not exist";
  if (!m.empty()) throw ConfigError({{loaded.location_of("model.path"), "model.path", std::move(m)}});
}

}  // namespace zs::config
