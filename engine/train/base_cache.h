#pragma once
// A quantized base while it loads (model.base_precision, issue 53), and its copy in the cache
// folder so that a later run reads codes and scales instead of the full-precision weights and
// quantizing them again: one safetensors file per block unit,
// "<cache root>/base-<key>-<format>-v1/<unit>.safetensors", holding each Linear weight's
// "<weight>:codes" and "<weight>:scales" (names below the unit). The key is the denoiser's weight
// files (path, sizes, times), as the latent cache keys its VAE: a changed file simply misses. A
// unit whose file is missing or unreadable is read from the model files and quantized (then
// written, by the writing process); a file whose tensors do not fit the layers stops the run,
// naming it.

#include <cstddef>
#include <functional>
#include <memory>
#include <string>

#include "models/param_unit.h"
#include "models/quantized_base.h"
#include "quant/base_quant.h"
#include "settings/trainer_config.h"

namespace zs::io {
class SafetensorsReader;
}

namespace zs::train {

/// The cache folder of `cfg`'s quantized base (its denoiser's files and the format); "" when the
/// config keeps none (data.cache_quantized_base off, a bf16 base, no model files).
std::string quantized_base_dir(const config::TrainerConfig& cfg);

class QuantizedBaseLoad {
 public:
  /// `dir` "": no copy is read or kept. `writes`: this process keeps what it quantizes (one rank
  /// of several). `warn`: a copy that cannot be written (the run goes on without it).
  QuantizedBaseLoad(quant::BaseFormat format, std::string dir, bool writes,
                    std::function<void(const std::string&)> warn);
  ~QuantizedBaseLoad();
  QuantizedBaseLoad(const QuantizedBaseLoad&) = delete;
  QuantizedBaseLoad& operator=(const QuantizedBaseLoad&) = delete;

  /// The loader's callback: a unit's Linear weights from its cached file (left unread in the model
  /// files), else quantized as read. It refers to this object, which must outlive the load.
  models::UnitBuilt callback();

  models::QuantizedBytes quantized;  ///< quantized from the model files
  models::QuantizedBytes cached;     ///< read from the cache (`before`: the model files' bytes left unread)
  std::size_t units_written = 0;
  const std::string& dir() const { return dir_; }
  /// What happened, for the run's log ("" when nothing was quantized); `precision` as configured.
  std::string summary(const std::string& precision) const;

 private:
  bool supplies(const std::string& unit, const std::string& name);
  void built(const std::string& unit, torch::nn::Module& module);
  void write(const std::string& unit, const torch::nn::Module& module);

  quant::BaseFormat format_;
  std::string dir_;
  bool writes_;
  std::function<void(const std::string&)> warn_;
  std::string consulted_;  ///< the unit the loader asked `supplies` about last (it reads that unit)
  std::unique_ptr<io::SafetensorsReader> reader_;  ///< its cached file, when there is one
};

}  // namespace zs::train
