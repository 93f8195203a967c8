#pragma once
// What the memory estimator needs to know about a model: its ZeRO units in the optimizer's order
// with their parameter counts and the shapes their activations take, computed from the
// architecture's config alone (no weights are allocated, so SDXL costs nothing to describe).

#include <cstdint>
#include <string>
#include <vector>

namespace zs::config {
struct TrainerConfig;
}
namespace zs::models {
struct ClipTextConfig;
struct ParamUnit;
class UnitMemory;

/// The Linear weights of a unit or a frozen part, what model.base_precision and
/// model.text_encoder_precision quantize (models/quantized_base.h): elements, tensors, and the
/// blocks of 64 their scales count (FP8/int8 along rows: Σ rows·⌈in/64⌉; NF4 over each flattened
/// tensor: Σ ⌈n/64⌉).
struct LinearWeights {
  std::int64_t elements = 0, tensors = 0, row_blocks = 0, flat_blocks = 0;
  LinearWeights& operator+=(const LinearWeights& o) {
    elements += o.elements;
    tensors += o.tensors;
    row_blocks += o.row_blocks;
    flat_blocks += o.flat_blocks;
    return *this;
  }
};

/// One ZeRO unit (a resnet, transformer or sampler; `io` holds the small in/out layers).
struct UnitShape {
  std::string name;                  ///< the unit's name in the optimizer ("io", "down_blocks.0.resnets.0", …)
  /// How its activations and optimizer statistics grow (models/unit_memory.h), from the family
  /// that built it; nullptr: io_unit_memory().
  const UnitMemory* memory = nullptr;
  std::int64_t parameters = 0;       ///< elements
  std::int64_t largest_module = 0;   ///< parameters of its largest single layer (DeepSpeed's "largest layer")
  std::int64_t in_channels = 0;      ///< channels entering the unit (resnets: after the skip concat)
  std::int64_t out_channels = 0;
  int level = 0;                     ///< spatial size is the sample's divided by 2^level (at the input)
  std::int64_t heads = 0;            ///< transformer: attention heads
  std::int64_t lora_parameters = 0;  ///< text encoders: adapters the config's lora section puts on it
  std::int64_t depth = 0;            ///< transformer: blocks; text encoder: layers
  bool concat_input = false;         ///< up-block resnets: the input is a fresh concatenation
  /// Transformers: whether the unit has the norm and proj_in, and proj_out (a transformer split
  /// into one unit per block has them in its first and last piece; a whole one both).
  bool projects_in = true, projects_out = true;
  /// SD transformers: proj_in/out are 1×1 convolutions (use_linear_projection false), which
  /// Adafactor factors over their 1×1 kernel, keeping twice their size.
  bool conv_projection = false;
  /// Its Linear weights (transformer families; zero where the family does not count them, and the
  /// estimate then holds its base unquantized).
  LinearWeights linear;
  const UnitMemory& memory_model() const;
};

/// A model as the estimator sees it.
struct ModelShape {
  std::string name;                  ///< "tiny", "sd15", "sdxl" or the folder
  std::vector<UnitShape> units;      ///< trainable units, io first, as the optimizer flattens them
  std::int64_t sample_channels = 4;  ///< channels the UNet reads (4 latents, 3 pixels)
  int latent_factor = 8;             ///< image pixels per sample pixel (8 with a VAE, 1 in pixel space)
  std::int64_t out_channels = 4;
  std::int64_t context_tokens = 77;  ///< text conditioning length (a joint block's text tokens)
  std::int64_t context_dim = 768;
  std::int64_t time_embed_dim = 1280;
  std::int64_t frozen_parameters = 0;  ///< VAE and frozen text encoders (not trained, not sharded)
  /// The text encoders (their parameters are in frozen_parameters): what
  /// training.train_text_encoder full or lora trains.
  std::vector<UnitShape> text_encoders;
  std::int64_t lora_denoiser_parameters = 0;  ///< adapters the config's lora section puts on the UNet (0: none asked)
  std::string denoiser_adapters_name = "lora";  ///< the optimizer's unit name for those adapters (the family's)
  std::int64_t lora_text_parameters = 0;  ///< ... on the text encoders (train_text_encoder: lora)
  std::int64_t frozen_fp32_parameters = 0;  ///< of those, kept in fp32 (a VAE with force_upcast)
  /// Of the frozen parameters, those that stay in CPU memory and pass through a GPU one piece at a
  /// time when used (Flux's T5-XXL, block by block), and the largest such piece.
  std::int64_t frozen_streamed_parameters = 0;
  std::int64_t frozen_streamed_piece = 0;
  /// The family loads its frozen parts on first use (Qwen-Image): with complete caches a run never
  /// loads the streamed encoder at all (the VAE, to decode samples).
  bool frozen_on_demand = false;
  /// The Linear weights of the frozen text encoders (model.text_encoder_precision quantizes them),
  /// and of those the streamed encoder's and its largest piece's.
  LinearWeights frozen_text_linear, streamed_linear, streamed_piece_linear;
  /// Parameters of the denoiser's units.
  std::int64_t trainable_parameters() const;
  /// Parameters of the largest single layer of any unit (a 2560->1280 3x3 conv in SD 1.5 and SDXL).
  std::int64_t largest_module() const;
};

/// The model a trainer config trains, as its family describes it (models/model_family.h):
/// units, text encoders, frozen parts and the adapters the lora section would add. Throws
/// zs::Error naming the file when the model's config cannot be read.
ModelShape model_shape(const config::TrainerConfig& config);

/// Everything model_shape(config) reads, as one string: two configs with the same key have the
/// same shape (a cache key for callers that estimate often, such as the wizard). The model
/// (preset, path, config_path) and what trains (training.method, training.train_text_encoder,
/// lora.rank, lora.targets, lora.text_encoder_targets).
std::string model_shape_key(const config::TrainerConfig& config);

/// A CLIP text encoder (SD's, SDXL's two, Flux's CLIP-L) as the estimator counts it, built as
/// shapes only: its parameters, largest layer, width, heads and layers, and with `lora_targets`
/// (train_text_encoder: lora) the adapters of rank `rank` they would put on it.
UnitShape clip_text_encoder_shape(const std::string& name, const ClipTextConfig& c,
                                  const std::vector<std::string>* lora_targets, std::int64_t rank);

/// A flow-matching transformer's units (Flux, Qwen-Image, Z-Image) as the estimator counts them:
/// "io" (fed `in_channels`), and blocks `dim` wide with `heads` heads — single-stream where the
/// name starts with "single_" or every block is (`all_single`: Z-Image), joint (dual-stream) otherwise.
std::vector<UnitShape> transformer_unit_shapes(const std::vector<ParamUnit>& units, std::int64_t in_channels,
                                               std::int64_t dim, std::int64_t heads, bool all_single = false);

}  // namespace zs::models
