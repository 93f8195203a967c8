#pragma once
// A Qwen-Image model as a run trains it (models/trainable_model.h): the QwenImageTransformer2DModel
// denoiser on 2×2-packed latent tokens, conditioned as QwenImagePipeline conditions it (diffusers
// src/diffusers/pipelines/qwenimage/pipeline_qwenimage.py: Qwen2.5-VL's last hidden state over the
// prompt template, the template's first 34 tokens dropped, each prompt its own length with the
// mask), trained by rectified flow (diffusion/flow_matching.h) with Qwen-Image's scheduler; samples
// use true classifier-free guidance with the pipeline's norm rescale.
//
// Two kinds: a diffusers Qwen-Image folder (transformer/ trained from its weights; vae/
// (AutoencoderKLQwenImage), text_encoder/ (Qwen2.5-VL-7B-Instruct, its language model), tokenizer/
// frozen), and the `qwen-image-tiny` preset: the same transformer, small, in pixel space (3
// channels packed 2×2), with the quickstart's word tokenizer and a small CLIP text model standing
// in for Qwen2.5-VL (its last hidden state as the text states), trained in full from scratch.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "diffusion/flow_matching.h"
#include "models/qwen_image/qwen_text_encoder.h"
#include "models/qwen_image/qwen_transformer.h"
#include "models/qwen_image/qwen_vae.h"
#include "models/transformer_pipeline_model.h"

namespace zs::models {

class QwenImageModel final : public TransformerPipelineModel {
 public:
  /// The qwen-image-tiny preset for the quickstart's shapes, its word tokenizer built from
  /// `captions`, weights from `seed`.
  static QwenImageModel build_tiny(const std::vector<std::string>& captions, std::uint64_t seed,
                                   const UnitBuilt& on_unit = {});
  /// The transformer of `config` with random weights from `seed` and no frozen parts: what a run
  /// whose caches are complete trains (bench_gpu_step measures full-size steps with it).
  static QwenImageModel build_transformer_only(const QwenImageConfig& config, std::uint64_t seed,
                                               const UnitBuilt& on_unit = {});
  /// A diffusers Qwen-Image folder. Without `with_transformer` only the frozen parts (what
  /// `zerostudio cache` encodes with). Throws zs::Error naming the file and what to do when a
  /// component, a shard or a key is missing.
  static QwenImageModel load_pipeline(const std::string& dir, const UnitBuilt& on_unit = {},
                                      bool with_transformer = true);
  /// A run's model folder written by save_folder(): the pipeline it names, or the tiny preset's
  /// configs and tokenizer with the base weights where save_base() wrote them.
  static QwenImageModel load_folder(const std::string& dir, const UnitBuilt& on_unit = {});
  static bool has_saved_base(const std::string& dir);

  /// Packs `noisy` [B, C, h, w] into tokens, runs the transformer at σ `t` [B] with the text
  /// mask and unpacks the velocity. `geometry` is not used.
  at::Tensor predict(const at::Tensor& noisy, const at::Tensor& t, const TextConditioning& cond,
                     const at::Tensor& geometry) override;
  /// QwenImagePipeline's true CFG: uncond + s·(cond − uncond), rescaled per token to the
  /// conditional prediction's norm over channels.
  at::Tensor combine_guidance(const at::Tensor& uncond, const at::Tensor& cond, double scale) const override;
  /// Pixels (the tiny preset), or the VAE's posterior sample normalised per channel
  /// (QwenVaeConfig::to_model_latents), without gradients; with `cache`, posteriors cached.
  at::Tensor to_model_space(const at::Tensor& images, at::Generator& generator, data::LatentCache* cache = nullptr,
                            const std::vector<std::string>* keys = nullptr) override;
  at::Tensor to_images(const at::Tensor& samples) override;
  std::int64_t sample_size(std::int64_t resolution) const override;
  /// VAE down-sampling × the 2×2 packing.
  std::int64_t pixel_factor() const override;
  std::int64_t sample_channels() const override { return transformer->config().in_channels / 4; }
  std::unique_ptr<diffusion::Objective> objective() const override;
  std::unique_ptr<diffusion::Sampler> sampler(std::int64_t steps, at::IntArrayRef sample_shape) const override;
  bool has_latent_space() const override { return vae_config_.has_value(); }

  /// The VAE, loaded (once) on first use: only to decode samples when the caches are complete.
  QwenVaeImpl& vae_model();

  QwenImageTransformer2DModel transformer{nullptr};
  QwenVae vae{nullptr};  ///< pipelines: frozen (vae_model())

 private:
  Names names() const override;
  DenoiserModule* transformer_module() const override { return transformer ? transformer.ptr().get() : nullptr; }
  torch::nn::Module* loaded_vae() const override { return module_of(vae); }
  nlohmann::json transformer_config_json() const override;
  const char* transformer_class() const override { return "QwenImageTransformer2DModel"; }
  /// Qwen2.5-VL's last hidden state over the prompt template, the template's first 34 rows dropped.
  at::Tensor prompt_states(QwenTextModelImpl& text, const std::string& caption, const at::Device& device,
                           bool streamed) override;

  std::optional<QwenVaeConfig> vae_config_;  ///< pipelines (read at load; the weights on first use)
};

}  // namespace zs::models
