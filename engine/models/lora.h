#pragma once
// LoRA: low-rank adapters on a model's Linear and Conv2d layers. An adapted layer computes
// W·x + b + scale·up(down(dropout(x))) with scale = alpha / rank; the base weights stay as they
// are (frozen when only adapters train). Adapters are not registered as module parameters, so
// the model's own parameter names, weight files and exports never see them: a LoraLayer names
// an adapter by its layer's module path ("down_blocks.0.attentions.0.transformer_blocks.0.attn1.to_q")
// and the adapter tensors "<path>.lora_down.weight" / "<path>.lora_up.weight".
//
// The UNet and the CLIP text encoders build their Linear and Conv2d layers as AdaptedLinear and
// AdaptedConv2d; without an adapter they are exactly torch::nn::Linear and Conv2d.

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>

#include "models/param_unit.h"

namespace zs::quant {
struct QuantizedWeight;
}

namespace zs::models {

/// How adapters start and scale (`lora.*` in the trainer config).
struct LoraOptions {
  std::int64_t rank = 16;
  double alpha = 16;     ///< scale = alpha / rank
  double dropout = 0;    ///< on the adapter's input, in training mode only
  /// "kaiming": down ~ Kaiming-uniform (a = √5, LibTorch's Linear default), up = 0 — what kohya's
  /// sd-scripts and peft do; "gaussian": down ~ N(0, 1/rank), up = 0 (peft's "gaussian").
  /// Either way the adapted model starts equal to the base.
  std::string init = "kaiming";
};

/// One layer's adapter.
struct LoraAdapter {
  at::Tensor down;  ///< Linear [rank, in]; Conv2d [rank, in, kh, kw] (the layer's kernel, stride, padding)
  at::Tensor up;    ///< Linear [out, rank]; Conv2d [out, rank, 1, 1]
  double alpha = 0;
  double dropout = 0;
  bool enabled = true;  ///< off: the layer computes its base alone
  std::int64_t rank() const { return down.size(0); }
  double scale() const { return alpha / static_cast<double>(rank()); }
  /// scale·up(down(dropout(x))) for a Linear layer's input x [..., in].
  at::Tensor linear_update(const at::Tensor& x, bool training) const;
  /// The same for a Conv2d layer's input [B, in, H, W]; `o`: the layer's stride, padding, dilation.
  at::Tensor conv_update(const at::Tensor& x, bool training, const torch::nn::detail::ConvNdOptions<2>& o) const;
};

class AdaptedLinearImpl : public torch::nn::LinearImpl {
 public:
  using torch::nn::LinearImpl::LinearImpl;
  at::Tensor forward(const at::Tensor& x);
  std::shared_ptr<LoraAdapter> lora;
  /// A frozen base kept quantized (model.base_precision; models/quantized_base.h): `weight` is
  /// then empty and forward dequantizes these codes to x's dtype for the layer's product alone
  /// (again in backward, which keeps only the codes).
  std::shared_ptr<quant::QuantizedWeight> quantized;
};
TORCH_MODULE(AdaptedLinear);

class AdaptedConv2dImpl : public torch::nn::Conv2dImpl {
 public:
  using torch::nn::Conv2dImpl::Conv2dImpl;
  at::Tensor forward(const at::Tensor& x);
  std::shared_ptr<LoraAdapter> lora;
};
TORCH_MODULE(AdaptedConv2d);

/// An adapted layer of a model.
struct LoraLayer {
  std::string name;                      ///< the layer's module path below the root
  std::shared_ptr<LoraAdapter> adapter;
  torch::nn::Module* layer = nullptr;    ///< the AdaptedLinearImpl or AdaptedConv2dImpl
  bool conv = false;
  /// The layer's weight (the base).
  at::Tensor& weight() const;
  /// (name + ".lora_down.weight", down), (name + ".lora_up.weight", up).
  std::vector<std::pair<std::string, at::Tensor>> tensors() const;
};

/// Whether module path `name` is selected by one of `targets`: a target names the path's last
/// components ("to_q", "to_out.0", "ff.net.2", "attn2.to_k", "proj_in", "conv1").
bool lora_target_matches(const std::string& name, const std::vector<std::string>& targets);

/// Default targets on a CLIP text encoder: its attention projections (q_proj, k_proj, v_proj,
/// out_proj). A family's denoiser targets are its own (ModelFamily::default_lora_targets).
std::vector<std::string> default_text_encoder_lora_targets();

/// Attaches an adapter to every adaptable layer of `root` whose path `targets` selects (a layer
/// with an adapter already keeps it), in module order, on the layer's device in `dtype`, with
/// weights drawn from `seed` (the same on every rank). Throws zs::Error(config) when a target
/// selects nothing, naming it. Returns every adapted layer of `root`.
std::vector<LoraLayer> attach_lora(torch::nn::Module& root, const std::vector<std::string>& targets,
                                   const LoraOptions& o, std::uint64_t seed, at::ScalarType dtype = at::kFloat);
/// Elements the adapters of rank `rank` on the layers of `root` that `targets` select would have
/// (rank × (in + out) for a Linear layer, rank × (in·kh·kw + out) for a convolution); `root` may
/// be built on the meta device (models are counted, not allocated).
std::int64_t lora_parameter_count(torch::nn::Module& root, const std::vector<std::string>& targets, std::int64_t rank);
/// Every adapted layer of `root`, in module order.
std::vector<LoraLayer> lora_layers(torch::nn::Module& root);
/// Every layer of `root` that can take an adapter (its adapter null where none is attached).
std::vector<LoraLayer> adaptable_layers(const torch::nn::Module& root);
/// Attaches `adapter` to the layer of `l`, replacing the one it had (null: detaches).
void set_adapter(const LoraLayer& l, std::shared_ptr<LoraAdapter> adapter);
/// The weight update of one adapted layer, scaled, in the shape of its weight.
at::Tensor lora_delta(const LoraLayer& l);
/// The same from the adapter alone (a 4-d down matrix: a convolution's [out, in, kh, kw]).
at::Tensor lora_delta(const LoraAdapter& a);
/// Adds every adapter's update into its layer's weight and removes the adapters. Throws
/// zs::Error(config) on a layer whose base is quantized (merge into the full-precision base).
void merge_lora(torch::nn::Module& root);
/// Removes every adapter of `root`.
void detach_lora(torch::nn::Module& root);
/// Turns every adapter of `root` on or off.
void set_lora_enabled(torch::nn::Module& root, bool on);

/// The optimizer unit of LoRA training on `root`: every adapter's down and up tensor, named
/// `prefix` + "<layer>.lora_down.weight" / ".lora_up.weight", made to require gradients, while
/// every base parameter of `root` is frozen (requires_grad off: no gradient, no optimizer
/// state). One unit for all of a part's adapters: they are small (SD 1.5's attention
/// projections at rank 16: 3.19 M elements, 0.37 % of its UNet's 859.5 M), so ZeRO keeps the unit
/// whole at stage 3 (name it in persistent_units) and shards its optimizer states and gradients
/// at stages 1-3 like any unit's. Throws
/// zs::Error(config) when `root` has no adapter.
ParamUnit lora_unit(torch::nn::Module& root, const std::string& name, const std::string& prefix);

}  // namespace zs::models
