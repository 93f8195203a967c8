#pragma once
// Trainability: what keeps a valid config from training here and now. A config can be valid
// and still not trainable yet (the model folder is not downloaded, the images are not in
// place): `config validate`, `config init` and the wizard show these as warnings, `train` and
// `launch` refuse to start with them, `estimate` and `config import` do not look.

#include <string>
#include <vector>

#include "config/config_loader.h"

namespace zs::config {

/// Whether trainability_problems reads the model's files (headers, indexes, configs, tokenizers).
enum class ModelFiles { read, skip };

/// Every trainability problem of `loaded.config`:
///   - model.preset other than tiny without model.path (such presets are only estimated);
///   - a model.path that does not exist;
///   - with `files` read: a model whose files cannot be trained from, short of reading tensor
///     data (models::model_files_problem: a truncated or missing shard, a missing component, a
///     broken config.json or tokenizer), so it is refused before a run folder exists;
///   - with data.path empty and data.generate none, the dataset is the run's data/ folder: it
///     must exist and hold files (`run_dir` empty: the run is not known yet, so it is named as
///     logging.runs_root/<run>/data and reported as a problem to check).
/// Located through `loaded.location_of`.
std::vector<ConfigProblem> trainability_problems(const LoadedConfig& loaded, const std::string& run_dir,
                                                ModelFiles files = ModelFiles::read);

/// The dataset folder a run reads: data.path, or `run_dir`/data when it is empty (where the
/// demo data is generated too, and where README tells users to put their images).
std::string dataset_folder(const TrainerConfig& config, const std::string& run_dir);

/// Throws ConfigError with every trainability problem (no-op when there is none).
void require_trainable(const LoadedConfig& loaded, const std::string& run_dir);

/// Throws ConfigError when model.path is set and its files cannot be trained from (the model
/// part of trainability_problems: `zerostudio cache` and the queue, which need no dataset check).
void require_readable_model(const LoadedConfig& loaded);

}  // namespace zs::config
