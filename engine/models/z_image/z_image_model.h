#pragma once
// A Z-Image model as a run trains it (models/trainable_model.h): the ZImageTransformer2DModel
// denoiser on 16-channel latents of Flux.1's VAE, conditioned as ZImagePipeline conditions it
// (diffusers src/diffusers/pipelines/z_image/pipeline_z_image.py: Qwen3-4B's hidden_states[-2] over
// the chat template, each prompt its own length), trained by rectified flow (diffusion/
// flow_matching.h) with the pipeline's scheduler (a static shift of 3). The transformer runs on the
// model's own time 1 − σ and predicts the negated velocity (the pipeline negates its output), so
// predict() returns −output; samples use the pipeline's guidance, cond + g·(cond − uncond), on for g > 0.
//
// Two kinds: a diffusers Z-Image folder (transformer/ trained from its weights; vae/ (AutoencoderKL),
// text_encoder/ (Qwen3), tokenizer/ frozen, read on first use), and the `z-image-tiny` preset: the
// same transformer, small, in pixel space (3 channels), with the quickstart's word tokenizer and a
// small CLIP text model standing in for Qwen3 (its last hidden state as the caption features).

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "diffusion/flow_matching.h"
#include "models/autoencoder_kl.h"
#include "models/transformer_pipeline_model.h"
#include "models/z_image/z_image_transformer.h"

namespace zs::models {

class ZImageModel final : public TransformerPipelineModel {
 public:
  /// The z-image-tiny preset for the quickstart's shapes, its word tokenizer built from
  /// `captions`, weights from `seed`.
  static ZImageModel build_tiny(const std::vector<std::string>& captions, std::uint64_t seed,
                                const UnitBuilt& on_unit = {});
  /// The transformer of `config` with random weights from `seed` and no frozen parts.
  static ZImageModel build_transformer_only(const ZImageConfig& config, std::uint64_t seed, const UnitBuilt& on_unit = {});
  /// A diffusers Z-Image folder (with `files`, the folder gives the configs, tokenizer and scheduler
  /// and whatever the files do not replace: ComfyUI's z_image*.safetensors transformer (models/
  /// z_image/z_image_single_file.h), Flux.1's ae.safetensors (LDM or diffusers names),
  /// qwen_3_4b.safetensors (transformers' names, with or without "model.")). Without
  /// `with_transformer` only the frozen parts. Throws zs::Error naming the file and what to do when
  /// a component, a shard or a key is missing.
  static ZImageModel load_pipeline(const std::string& dir, const UnitBuilt& on_unit = {}, bool with_transformer = true,
                                   const Files& files = {});
  /// A run's model folder written by save_folder().
  static ZImageModel load_folder(const std::string& dir, const UnitBuilt& on_unit = {});
  static bool has_saved_base(const std::string& dir);

  /// −transformer(noisy, 1 − t): the velocity the flow-matching objective and sampler use.
  at::Tensor predict(const at::Tensor& noisy, const at::Tensor& t, const TextConditioning& cond,
                     const at::Tensor& geometry) override;
  /// ZImagePipeline's: cond + scale·(cond − uncond) (no norm cap: cfg_normalization is off by default).
  at::Tensor combine_guidance(const at::Tensor& uncond, const at::Tensor& cond, double scale) const override;
  /// The pipeline guides for any scale above 0 (Z-Image-Turbo samples with 0: none).
  bool guides(double scale) const override { return scale > 0; }
  at::Tensor to_model_space(const at::Tensor& images, at::Generator& generator, data::LatentCache* cache = nullptr,
                            const std::vector<std::string>* keys = nullptr) override;
  at::Tensor to_images(const at::Tensor& samples) override;
  std::int64_t sample_size(std::int64_t resolution) const override;
  /// VAE down-sampling × the transformer's 2×2 patches.
  std::int64_t pixel_factor() const override;
  std::int64_t sample_channels() const override { return transformer->config().in_channels; }
  std::unique_ptr<diffusion::Objective> objective() const override;
  std::unique_ptr<diffusion::Sampler> sampler(std::int64_t steps, at::IntArrayRef sample_shape) const override;
  bool has_latent_space() const override { return vae_config_.has_value(); }

  /// The VAE, loaded (once) on first use: only to decode samples when the caches are complete.
  AutoencoderKLImpl& vae_model();

  ZImageTransformer2DModel transformer{nullptr};
  AutoencoderKL vae{nullptr};  ///< pipelines: frozen (vae_model())

 private:
  Names names() const override;
  DenoiserModule* transformer_module() const override { return transformer ? transformer.ptr().get() : nullptr; }
  torch::nn::Module* loaded_vae() const override { return module_of(vae); }
  nlohmann::json transformer_config_json() const override;
  const char* transformer_class() const override { return "ZImageTransformer2DModel"; }
  std::int64_t default_max_sequence_length() const override;
  at::Tensor prompt_states(QwenTextModelImpl& text, const std::string& caption, const at::Device& device,
                           bool streamed) override;

  std::optional<AutoencoderKLConfig> vae_config_;  ///< pipelines (read at load; the weights on first use)
};

}  // namespace zs::models
