#pragma once
// UNet2DConditionModel's configuration, read from diffusers' unet/config.json keys.

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace zs::models {

/// One ZeRO unit of the UNet besides io (a resnet, transformer or sampler), in forward order: the
/// walk over the blocks that both the module's constructor and the memory estimator follow.
struct UNetUnitPlan {
  enum class Kind { resnet, transformer, downsampler, upsampler };
  std::string block;            ///< "down_blocks.0", "mid_block", "up_blocks.2"
  std::string name;             ///< block + ".resnets.0", ".attentions.0", ".downsamplers.0", …
  Kind kind = Kind::resnet;
  std::int64_t in_channels = 0;   ///< resnets in up blocks: after the skip concatenation
  std::int64_t out_channels = 0;
  int level = 0;                  ///< down-sampling level at the unit's input
  std::size_t attention_config = 0;  ///< transformers: index into num_attention_heads / transformer_layers_per_block
  bool concat_input = false;      ///< up-block resnets: the input is a fresh concatenation
  /// Transformers: the transformer blocks [block_begin, block_end) this unit runs; the first
  /// piece also has the norm and proj_in, the last proj_out (one piece: the whole transformer,
  /// its residual included; several: the residual is added after the last).
  std::int64_t block_begin = 0, block_end = 0;
  bool projects_in = false, projects_out = false;
  /// The transformer's module prefix ("down_blocks.1.attentions.0"); `name` is that for the
  /// first piece and prefix + ".transformer_blocks.<k>" for the others.
  std::string module;
};

/// The subset of diffusers' UNet2DConditionModel config that SD 1.x/2.x-shaped UNets use.
struct UNetConfig {
  std::int64_t in_channels = 4;                       ///< channels of the sample (latent or pixels)
  std::int64_t out_channels = 4;
  std::int64_t sample_size = 64;                      ///< nominal spatial size (pixels of the sample)
  std::vector<std::int64_t> block_out_channels = {320, 640, 1280, 1280};
  std::vector<std::string> down_block_types = {"CrossAttnDownBlock2D", "CrossAttnDownBlock2D",
                                                "CrossAttnDownBlock2D", "DownBlock2D"};
  std::vector<std::string> up_block_types = {"UpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D",
                                              "CrossAttnUpBlock2D"};
  std::string mid_block_type = "UNetMidBlock2DCrossAttn";  ///< or "" for no mid block
  std::int64_t layers_per_block = 2;
  std::int64_t cross_attention_dim = 768;             ///< width of encoder_hidden_states
  /// Heads per block (diffusers reads `attention_head_dim` as the number of heads unless
  /// `num_attention_heads` is set). One entry per down block.
  std::vector<std::int64_t> num_attention_heads = {8, 8, 8, 8};
  std::vector<std::int64_t> transformer_layers_per_block = {1, 1, 1, 1};  ///< per down block
  std::int64_t norm_num_groups = 32;
  double norm_eps = 1e-5;
  bool use_linear_projection = false;                 ///< proj_in/out as Linear instead of 1x1 conv
  bool flip_sin_to_cos = true;
  std::int64_t freq_shift = 0;
  /// SDXL's added conditioning ("text_time": pooled text and size/crop ids through a second
  /// TimestepEmbedding, `add_embedding`, added to the time embedding).
  std::string addition_embed_type;
  std::int64_t addition_time_embed_dim = 0;
  std::int64_t projection_class_embeddings_input_dim = 0;
  /// Not part of diffusers' config: a transformer of several blocks (SDXL's 2 and 10) is split
  /// into one unit per block for ZeRO and checkpointing, so a unit's gradients, gathered weights
  /// and recomputed activations are one block's. False keeps each transformer one unit.
  bool split_transformer_blocks = true;

  /// Stable Diffusion 1.5's UNet (the defaults; 859,520,964 parameters) and SDXL base's
  /// (2,567,463,684), as in their diffusers unet/config.json.
  static UNetConfig sd15();
  static UNetConfig sdxl();
  /// Parses diffusers' config.json; `source` names the file in errors. Throws zs::Error(config)
  /// naming the key for anything this UNet cannot build (class embeddings, other added embeddings).
  static UNetConfig from_json(const nlohmann::json& j, const std::string& source);
  /// Reads and parses `path` (a unet/config.json).
  static UNetConfig from_file(const std::string& path);
  /// diffusers-compatible config.json content (loads with UNet2DConditionModel.from_config).
  nlohmann::json to_json() const;
  /// Checks channel/group divisibility and list lengths; throws zs::Error(config).
  void validate(const std::string& source) const;

  /// Total spatial down-sampling factor (2^(number of down blocks - 1)).
  std::int64_t downsample_factor() const;
  /// Every unit besides io, in the order forward runs them.
  std::vector<UNetUnitPlan> unit_plan() const;
};

}  // namespace zs::models
