#pragma once
// One rank's memory figures, as the metrics event's "ranks" entries carry them: gathered from
// every rank as one row of integers (pack/unpack keep the order in one place) and written as
// JSON with the keys of train/event_types.h.

#include <array>
#include <cstdint>

#include <nlohmann/json.hpp>

#include "train/event_types.h"

namespace zs::train {

struct RankFigures {
  std::int64_t rss_bytes = 0;            ///< the process's resident memory
  std::int64_t gpu_allocated_bytes = 0;  ///< CUDA caching allocator: in use now (0 without CUDA)
  std::int64_t gpu_reserved_bytes = 0;   ///< ... held from the driver
  std::int64_t gpu_peak_bytes = 0;       ///< ... highest in use
  struct Bytes {
    std::int64_t parameters = 0, gradients = 0, optimizer_states = 0;
  };
  Bytes model_state;                 ///< on the device (ZeroOptimizer::model_state)
  Bytes offloaded;                   ///< in CPU memory (ZeroOptimizer::offloaded)
  std::int64_t nvme_bytes = 0;       ///< in NVMe files
  std::int64_t checkpointed_device = 0;  ///< gradient checkpointing: peak bytes of kept inputs on the device
  std::int64_t checkpointed_cpu = 0;     ///< ... waiting in CPU memory (cpu_checkpointing)

  static constexpr std::size_t kFields = 13;
  /// The figures as one row, in a fixed order (what all_gather moves).
  std::array<std::int64_t, kFields> pack() const {
    return {rss_bytes, gpu_allocated_bytes, gpu_reserved_bytes, gpu_peak_bytes, model_state.parameters,
            model_state.gradients, model_state.optimizer_states, offloaded.parameters, offloaded.gradients,
            offloaded.optimizer_states, nvme_bytes, checkpointed_device, checkpointed_cpu};
  }
  /// The figures of a row written by pack().
  static RankFigures unpack(const std::int64_t* v) {
    RankFigures f;
    f.rss_bytes = v[0];
    f.gpu_allocated_bytes = v[1];
    f.gpu_reserved_bytes = v[2];
    f.gpu_peak_bytes = v[3];
    f.model_state = {v[4], v[5], v[6]};
    f.offloaded = {v[7], v[8], v[9]};
    f.nvme_bytes = v[10];
    f.checkpointed_device = v[11];
    f.checkpointed_cpu = v[12];
    return f;
  }
  /// The metrics event's entry for rank `rank`.
  nlohmann::json to_json(int rank) const {
    return {{event::rank, rank},
            {event::rss_bytes, rss_bytes},
            {event::gpu_allocated_bytes, gpu_allocated_bytes},
            {event::gpu_reserved_bytes, gpu_reserved_bytes},
            {event::gpu_peak_bytes, gpu_peak_bytes},
            {"model_state", {{"parameters", model_state.parameters}, {"gradients", model_state.gradients},
                             {"optimizer_states", model_state.optimizer_states}}},
            {"offloaded", {{"parameters", offloaded.parameters}, {"gradients", offloaded.gradients},
                           {"optimizer_states", offloaded.optimizer_states}, {"nvme_bytes", nvme_bytes}}},
            // Gradient checkpointing: the peak bytes of kept unit inputs, by where they waited.
            {"checkpointed_inputs", {{"device", checkpointed_device}, {"cpu", checkpointed_cpu}}}};
  }
};

}  // namespace zs::train
