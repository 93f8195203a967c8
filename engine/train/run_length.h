#pragma once
// How long a run is, in optimizer steps: training.max_steps, or training.epochs × the steps of one
// epoch of the loader. The one place the trainer, `zerostudio config validate` and the wizard read.

#include <cstdint>
#include <string>
#include <vector>

#include "settings/trainer_config.h"

namespace zs::data {
struct DataItem;
}

namespace zs::train {

struct RunLength {
  std::int64_t steps = 0;            ///< optimizer steps of the whole run
  std::int64_t steps_per_epoch = 0;  ///< 0: not known (training.max_steps decides, no dataset read)
  std::int64_t epoch_batches = 0;    ///< global micro batches per epoch (the loader's batches_per_epoch)
  bool by_epochs = false;            ///< training.epochs decided `steps`
  std::int64_t images = 0;           ///< the training images it was counted for (0: not given)
  /// One line for people: "5 epochs × 13 steps per epoch (100 images × 1 repeats, 8 images per
  /// step) = 65 steps".
  std::string describe(const config::TrainerConfig& cfg) const;
};

/// Micro batches of all processes in one optimizer step: processes × gradient accumulation.
std::int64_t step_batches(const config::TrainerConfig& cfg, std::int64_t processes);

/// From the loader's global micro batches per epoch (data::DataLoader::batches_per_epoch, which
/// data::epoch_micro_batches pads to whole steps): epochs × epoch_batches / step_batches when
/// training.epochs is set (it takes precedence over training.max_steps), else training.max_steps.
RunLength run_length(const config::TrainerConfig& cfg, std::int64_t epoch_batches, std::int64_t processes);

/// The same before any loader runs: builds the loader the trainer would (reading image headers
/// for aspect buckets only) over `items` for launch.num_processes processes.
RunLength plan_run_length(const config::TrainerConfig& cfg, std::vector<data::DataItem> items);
/// The same for the dataset in `folder` (data.metadata's filters applied), or for the demo set
/// that data.generate would write there (data.generate_count square images) while it does not
/// exist. Throws zs::Error(data) when the folder cannot be read. Validation's hold-out is not
/// taken off (the trainer's count is after it).
RunLength plan_run_length(const config::TrainerConfig& cfg, const std::string& folder);

}  // namespace zs::train
