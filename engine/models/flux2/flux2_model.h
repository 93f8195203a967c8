#pragma once
// A FLUX.2 model as a run trains it (models/transformer_pipeline_model.h): the Flux2Transformer2DModel
// denoiser (models/flux2/flux2_transformer.h) on the pipelines' latent space — AutoencoderKLFlux2's
// 32-channel latents 2×2-patchified to 128 channels and normalized by the VAE's BatchNorm statistics
// (Flux2Pipeline._patchify_latents, then (x − mean) / sqrt(var + eps)); one token per position of
// that grid — conditioned as the pipelines condition it: [klein] (diffusers pipelines/flux2/
// pipeline_flux2_klein.py) Qwen3's hidden states 9, 18 and 27 over the chat template with thinking
// off, padded to max_sequence_length and all attended to (models/flux2/flux2_text.h); [dev]
// (pipeline_flux2.py) Mistral-Small-3.1's states 10, 20 and 30. Trained by rectified flow (the
// velocity noise − x0, as train_dreambooth_lora_flux2_klein.py), σ passed to the transformer as the
// pipelines pass it (float32 σ·1000, then / 1000). Sampling takes the scheduler's sigmas with
// compute_empirical_mu's shift (diffusion::flux2_empirical_mu).
//
// Guidance, by checkpoint: klein 4B / 9B (model_index.json "is_distilled": true) are step-distilled
// (4 steps) and never guide; the klein base checkpoints (FLUX.2-klein-base-4B / -9B, is_distilled
// false) use true classifier-free guidance, neg + g·(cond − neg) for g > 1 (50 steps, g 4); [dev]
// embeds the guidance value in the transformer (guidance_embeds; the pipeline's default 4) and runs
// no unconditional branch.
//
// Two kinds: a diffusers FLUX.2 folder (transformer/ trained from its weights; vae/, text_encoder/,
// tokenizer/ frozen and read on first use — the VAE's BatchNorm statistics at once, so a run whose
// caches are complete never loads the VAE but to decode samples), and the `flux2-tiny` preset: a
// klein-shaped transformer, small, in pixel space (3 channels 2×2-patchified to 12, no
// normalization), with the quickstart's word tokenizer and a small CLIP text model standing in for
// Qwen3 (its last hidden state as the stacked states).

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "diffusion/flow_matching.h"
#include "models/autoencoder_kl.h"
#include "models/flux2/flux2_transformer.h"
#include "models/transformer_pipeline_model.h"

namespace zs::models {

class Flux2Model final : public TransformerPipelineModel {
 public:
  /// The flux2-tiny preset for the quickstart's shapes, its word tokenizer built from `captions`,
  /// weights from `seed`.
  static Flux2Model build_tiny(const std::vector<std::string>& captions, std::uint64_t seed, const UnitBuilt& on_unit = {});
  /// The transformer of `config` with random weights from `seed` and no frozen parts.
  static Flux2Model build_transformer_only(const Flux2Config& config, std::uint64_t seed, const UnitBuilt& on_unit = {});
  /// A diffusers FLUX.2 folder (Flux2KleinPipeline or Flux2Pipeline); with `files.transformer`, BFL's
  /// single-file transformer (models/flux2/flux2_single_file.h) in place of the folder's. Without
  /// `with_transformer` only the frozen parts. Throws zs::Error naming the file and what to do when a component, a
  /// shard or a key is missing, or when the VAE is not AutoencoderKLFlux2 (Flux.1's, say).
  static Flux2Model load_pipeline(const std::string& dir, const UnitBuilt& on_unit = {}, bool with_transformer = true,
                                  const Files& files = {});
  /// A run's model folder written by save_folder().
  static Flux2Model load_folder(const std::string& dir, const UnitBuilt& on_unit = {});
  static bool has_saved_base(const std::string& dir);

  /// training.guidance (the embedded guidance [dev] trains with) beside the shared settings.
  void configure(const config::TrainerConfig& cfg) override;
  /// The transformer on `noisy` [B, C, h, w] as h·w tokens at σ `t` [B] with the stacked text
  /// states (no mask: the pipelines attend to the padding too), unpacked to [B, C, h, w].
  at::Tensor predict(const at::Tensor& noisy, const at::Tensor& t, const TextConditioning& cond,
                     const at::Tensor& geometry) override;
  /// True CFG only for the klein base checkpoints (and the tiny preset), for scales above 1.
  bool guides(double scale) const override;
  bool embeds_guidance() const override { return transformer->config().guidance_embeds; }
  void set_sampling_guidance(double g) override { sampling_guidance_ = g; }
  /// Pixels patchified (the tiny preset), or the VAE's posterior sample patchified and normalized
  /// by its BatchNorm statistics; with `cache`, posteriors cached.
  at::Tensor to_model_space(const at::Tensor& images, at::Generator& generator, data::LatentCache* cache = nullptr,
                            const std::vector<std::string>* keys = nullptr) override;
  at::Tensor to_images(const at::Tensor& samples) override;
  std::int64_t sample_size(std::int64_t resolution) const override;
  /// VAE down-sampling × the 2×2 patchification.
  std::int64_t pixel_factor() const override;
  std::int64_t sample_channels() const override { return transformer->config().in_channels; }
  std::unique_ptr<diffusion::Objective> objective() const override;
  std::unique_ptr<diffusion::Sampler> sampler(std::int64_t steps, at::IntArrayRef sample_shape) const override;
  bool has_latent_space() const override { return vae_config_.has_value(); }

  /// Whether the checkpoint is step-distilled (model_index.json's is_distilled: klein 4B / 9B).
  bool distilled() const { return distilled_; }
  /// The VAE, loaded (once) on first use.
  AutoencoderKLImpl& vae_model();

  Flux2Transformer2DModel transformer{nullptr};
  AutoencoderKL vae{nullptr};  ///< pipelines: frozen (vae_model())

 private:
  Names names() const override;
  DenoiserModule* transformer_module() const override { return transformer ? transformer.ptr().get() : nullptr; }
  torch::nn::Module* loaded_vae() const override { return module_of(vae); }
  nlohmann::json transformer_config_json() const override;
  const char* transformer_class() const override { return "Flux2Transformer2DModel"; }
  at::Tensor prompt_states(QwenTextModelImpl& text, const std::string& caption, const at::Device& device,
                           bool streamed) override;

  std::optional<AutoencoderKLConfig> vae_config_;  ///< pipelines (read at load; the weights on first use)
  at::Tensor bn_mean_, bn_var_;                    ///< the VAE's BatchNorm statistics (read at load)
  bool distilled_ = false;
  bool mistral_ = false;            ///< [dev]: Mistral-Small's states 10, 20, 30
  double training_guidance_ = 1.0;  ///< training.guidance
  double sampling_guidance_ = -1;   ///< < 0: training.guidance (set_sampling_guidance)
};

/// The flow schedule FLUX.2's released schedulers give (FlowMatchEulerDiscreteScheduler with dynamic
/// shifting, exponential time shift, base 0.5 / max 1.15 over 256…4096 tokens, static shift 3) with
/// the pipelines' empirical mu: the tiny preset's.
diffusion::FlowScheduleConfig flux2_schedule();

}  // namespace zs::models
