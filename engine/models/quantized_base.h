#pragma once
// A frozen base kept quantized (model.base_precision, model.text_encoder_precision; issue 53):
// each Linear weight of a frozen unit becomes codes and scales (quant/base_quant.h) held by its
// layer (AdaptedLinearImpl::quantized), which dequantizes them to the compute dtype while it runs.
// In the optimizer's unit the weight's entry becomes two raw entries, "<weight>:codes" and
// "<weight>:scales" (ParamUnit::raw), so ZeRO lays out, shards, offloads and gathers the quantized
// bytes; the weight tensor itself is left empty.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "models/model_shape.h"
#include "models/param_unit.h"
#include "quant/base_quant.h"

namespace c10 {
class TensorImpl;
}
namespace torch::nn {
class Module;
}

namespace zs::models {

class AdaptedLinearImpl;

/// What quantizing gave: layers, and bytes before (in `from`'s element size) and after.
struct QuantizedBytes {
  std::size_t layers = 0;
  std::int64_t before = 0, after = 0;
  QuantizedBytes& operator+=(const QuantizedBytes& o) {
    layers += o.layers;
    before += o.before;
    after += o.after;
    return *this;
  }
};

class BaseQuantizer {
 public:
  /// Finds the Linear layers of `root` (the denoiser; AdaptedLinear) to quantize into `format`.
  BaseQuantizer(torch::nn::Module& root, quant::BaseFormat format);
  /// Quantizes every Linear weight among the parameters of the frozen unit `unit` and puts codes
  /// and scales in its place (raw entries). Biases, norms and everything not a Linear weight stay.
  QuantizedBytes quantize(ParamUnit& unit);

 private:
  quant::BaseFormat format_;
  std::unordered_map<const c10::TensorImpl*, AdaptedLinearImpl*> layers_;
};

/// Quantizes every Linear weight of `root` (a frozen text encoder) in place of its weight.
QuantizedBytes quantize_linears(torch::nn::Module& root, quant::BaseFormat format);

/// The quantized weights of `root`'s layers, by weight name below `root` ("attn.to_q.weight").
std::vector<std::pair<std::string, std::shared_ptr<const quant::QuantizedWeight>>> quantized_weights(
    const torch::nn::Module& root);

/// Codes and scales kept elsewhere for the weight `name` (below the root) whose placeholder is
/// `weight` (its shape and dtype; its values unread); nullptr when there are none.
using StoredQuantized =
    std::function<std::shared_ptr<quant::QuantizedWeight>(const std::string& name, const at::Tensor& weight)>;
/// Gives each Linear layer of `root` that `stored` has codes for those codes and scales in place
/// of its weight, as quantize_linears would have made them (`before` counts the weights in their
/// placeholders' element size).
QuantizedBytes adopt_quantized(torch::nn::Module& root, const StoredQuantized& stored);

/// The Linear weights among each unit's parameters (the ones BaseQuantizer would quantize), for
/// the estimator; `root` may be built on the meta device.
std::vector<LinearWeights> linear_weights(const torch::nn::Module& root, const std::vector<ParamUnit>& units);
/// Every Linear weight of `root` (what quantize_linears quantizes).
LinearWeights linear_weights(const torch::nn::Module& root);
/// Bytes of those weights in `format`: codes and scales (bf16: 2 bytes a weight).
std::int64_t quantized_bytes(const LinearWeights& w, quant::BaseFormat format);
/// Bytes a frozen unit holds with its Linear weights `w` in `format` and `other` elements (norms,
/// biases) in `compute_bytes` each, laid out as ZeroOptimizer lays out a unit with raw parameters
/// (each tensor 16-byte aligned). bf16: the unit unquantized, (w.elements + other) · compute_bytes.
std::int64_t quantized_unit_bytes(const LinearWeights& w, quant::BaseFormat format, std::int64_t other,
                                  std::int64_t compute_bytes);

/// Moves the quantized weights of `root`'s layers to `device` (Module::to moves parameters and
/// buffers only).
void move_quantized(torch::nn::Module& root, const at::Device& device);

}  // namespace zs::models
