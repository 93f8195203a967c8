#pragma once
// The validation set of a run and its loss: a number comparable across steps and runs.

#include <cstdint>
#include <string>
#include <vector>

#include "data/dataset.h"
#include "settings/trainer_config.h"

namespace zs::diffusion {
class Objective;
}
namespace zs::comm {
class Communicator;
}
namespace zs::models {
class TrainableModel;
}
namespace zs::data {
class LatentCache;
}

namespace zs::train {

/// Whether the item at `path_in_dataset` (its path relative to the dataset folder) is held out
/// at `fraction`: CRC-32 of the path / 2³² < fraction, the same on every run and rank.
bool held_out(const std::string& path_in_dataset, double fraction);

/// The validation items: validation.path's dataset, or the items of `training` that
/// validation.fraction holds out (removed from `training`); empty without validation.
std::vector<data::DataItem> split_validation(const config::TrainerConfig& cfg, const std::string& data_root,
                                             std::vector<data::DataItem>& training, const data::MetadataOptions& options);

/// The objective's loss (models::TrainableModel::objective) over every item × validation
/// timestep (diffusion::Objective::validation_timestep), with item i's noise at timestep k drawn
/// from its own generator (seeded by validation.seed, i and k), captions as written, square center
/// crops, in eval mode and without gradients; the training random state is not touched. A
/// collective: every rank calls it with the same items and evaluates items rank, rank + N, … in
/// batches of training.batch_size (all ranks run as many batches, padded, so stage 3's gathers
/// meet). Equals a one-process evaluation of the same weights.
double validation_loss(models::TrainableModel& model, const diffusion::Objective& objective,
                       const std::vector<data::DataItem>& items, const config::TrainerConfig& cfg,
                       comm::Communicator& comm, const c10::Device& device, data::LatentCache* text_cache);

}  // namespace zs::train
