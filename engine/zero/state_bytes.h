#pragma once
// What the ZeRO optimizer reports about the model state it holds, and the named-tensor lists its
// checkpoints and tests exchange.

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>

namespace zs::zero {

/// Bytes of model state one rank holds on the compute device (ZeRO's Ψ accounting).
struct ModelStateBytes {
  std::int64_t parameters = 0;
  std::int64_t gradients = 0;
  std::int64_t optimizer_states = 0;
};

/// Bytes of model state one rank keeps off the compute device (ZeRO offload).
struct OffloadedBytes {
  std::int64_t parameters = 0;        ///< CPU memory
  std::int64_t gradients = 0;         ///< CPU memory (the fp32 gradients the CPU step reads)
  std::int64_t optimizer_states = 0;  ///< CPU memory (fp32 masters and Adam moments)
  std::int64_t nvme_bytes = 0;        ///< files under nvme_path
};

/// Tensors under their names, in a stable order.
using NamedTensors = std::vector<std::pair<std::string, at::Tensor>>;

}  // namespace zs::zero
