#include "train/run_length.h"

#include <algorithm>
#include <filesystem>

#include "data/dataset.h"
#include "train/frozen_cache.h"

namespace zs::train {

std::int64_t step_batches(const config::TrainerConfig& cfg, std::int64_t processes) {
  return std::max<std::int64_t>(processes, 1) * cfg.training.gradient_accumulation_steps;
}

RunLength run_length(const config::TrainerConfig& cfg, std::int64_t epoch_batches, std::int64_t processes) {
  RunLength r;
  r.epoch_batches = epoch_batches;
  const std::int64_t per_step = step_batches(cfg, processes);
  // The loader pads its epoch to whole steps, so this division is exact.
  r.steps_per_epoch = (epoch_batches + per_step - 1) / per_step;
  r.by_epochs = cfg.training.epochs.has_value();
  r.steps = r.by_epochs ? *cfg.training.epochs * r.steps_per_epoch : cfg.training.max_steps;
  return r;
}

RunLength plan_run_length(const config::TrainerConfig& cfg, std::vector<data::DataItem> items) {
  data::LoaderOptions lo = loader_options(cfg);
  lo.num_workers = 0;
  lo.num_shards = cfg.launch.num_processes;
  const data::DataLoader loader(std::move(items), lo);  // never started: nothing is decoded
  RunLength r = run_length(cfg, loader.batches_per_epoch(), cfg.launch.num_processes);
  r.images = static_cast<std::int64_t>(loader.size());
  return r;
}

RunLength plan_run_length(const config::TrainerConfig& cfg, const std::string& folder) {
  std::error_code ec;
  if (cfg.data.generate == "shapes" && !std::filesystem::exists(folder, ec)) {
    const std::int64_t processes = cfg.launch.num_processes;
    RunLength r = run_length(cfg,
                             data::epoch_micro_batches({cfg.data.generate_count}, cfg.training.batch_size,
                                                       cfg.data.repeats, step_batches(cfg, processes)),
                             processes);
    r.images = cfg.data.generate_count;
    return r;
  }
  return plan_run_length(cfg, data::scan_dataset(folder, metadata_options(cfg.data)));
}

std::string RunLength::describe(const config::TrainerConfig& cfg) const {
  const std::int64_t per_step = cfg.training.batch_size * (steps_per_epoch ? epoch_batches / steps_per_epoch : 0);
  const std::string epoch = std::to_string(steps_per_epoch) + " steps per epoch (" + std::to_string(images) +
                            " images × " + std::to_string(cfg.data.repeats) + " repeats, " + std::to_string(per_step) +
                            " images per step)";
  if (by_epochs) return std::to_string(*cfg.training.epochs) + " epochs × " + epoch + " = " + std::to_string(steps) + " steps";
  return std::to_string(steps) + " steps (training.max_steps); " + epoch;
}

}  // namespace zs::train
