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

#include "diffusion/flow_matching.h"
#include "models/autoencoder_kl.h"
#include "models/clip_text_model.h"
#include "models/frozen_parking.h"
#include "models/qwen_text/qwen_text_model.h"
#include "models/qwen_text/qwen_tokenizer.h"
#include "models/trainable_model.h"
#include "models/word_tokenizer.h"
#include "models/z_image/z_image_transformer.h"
#include "quant/base_quant.h"

namespace zs::models {

class ZImageModel final : public TrainableModel {
 public:
  /// The z-image-tiny preset for the quickstart's shapes, its word tokenizer built from
  /// `captions`, weights from `seed`.
  static ZImageModel build_tiny(const std::vector<std::string>& captions, std::uint64_t seed,
                                const UnitBuilt& on_unit = {});
  /// The transformer of `config` with random weights from `seed` and no frozen parts.
  static ZImageModel build_transformer_only(const ZImageConfig& config, std::uint64_t seed, const UnitBuilt& on_unit = {});
  /// Single files in place of a folder's components (model.path, model.vae_path,
  /// model.text_encoder_path): ComfyUI's z_image*.safetensors transformer (models/z_image/
  /// z_image_single_file.h), Flux.1's ae.safetensors (LDM or diffusers names), qwen_3_4b.safetensors
  /// (transformers' names, with or without "model."). Empty: the folder's own.
  struct Files {
    std::string transformer, vae, text_encoder;
  };
  /// A diffusers Z-Image folder (with `files`, the folder gives the configs, tokenizer and scheduler
  /// and whatever the files do not replace). Without `with_transformer` only the frozen parts.
  /// Throws zs::Error naming the file and what to do when a component, a shard or a key is missing.
  static ZImageModel load_pipeline(const std::string& dir, const UnitBuilt& on_unit = {}, bool with_transformer = true,
                                   const Files& files = {});
  /// What a run's model folder names in its pipeline.json: the folder and the single files (empty
  /// path: the tiny preset). Throws zs::Error(checkpoint) when one of them is gone.
  struct PipelineRef {
    std::string path;
    Files files;
  };
  static PipelineRef pipeline_of(const std::string& dir);
  /// A run's model folder written by save_folder().
  static ZImageModel load_folder(const std::string& dir, const UnitBuilt& on_unit = {});
  static bool has_saved_base(const std::string& dir);

  struct Settings {
    diffusion::TimestepSampling timestep_sampling;
    std::int64_t max_sequence_length = 512;  ///< ZImagePipeline's
    quant::BaseFormat text_format = quant::BaseFormat::bf16;
  };
  void configure(const config::TrainerConfig& cfg) override;
  const Settings& settings() const { return settings_; }

  TextConditioning condition(const std::vector<std::string>& captions, const at::Device& device,
                             data::LatentCache* cache = nullptr) override;
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

  std::vector<std::pair<std::string, at::Tensor>> named_parameters() const override;
  std::vector<ParamUnit> denoiser_units() const override;
  static constexpr const char* kDenoiserAdapters = "lora_transformer";
  std::size_t attach_denoiser_lora(const std::vector<std::string>& targets, const LoraOptions& o,
                                   std::uint64_t seed) override;
  ParamUnit denoiser_adapters() override;
  /// lora.init_from: diffusers', musubi-tuner's and ai-toolkit's (and DiffSynth's) Z-Image LoRA files.
  std::size_t load_lora_file(const std::string& path) override;
  std::vector<std::pair<std::string, std::shared_ptr<torch::nn::Module>>> text_encoder_modules() const override;
  std::vector<std::string> text_components() const override;
  void set_text_training(TextEncoderTraining t) override;
  TextEncoderTraining text_encoder_training() const override { return text_training_; }
  std::vector<ModelComponent> components() const override;
  void set_attention(const AttentionOptions& o) override;
  void to(const at::Device& device, bool with_denoiser = true) override;
  void frozen_to(at::ScalarType compute) override;
  void park_frozen(const at::Device& device, const std::vector<std::string>& remember = {},
                   data::LatentCache* text_cache = nullptr) override;
  std::int64_t frozen_bytes() const override;
  const std::string& source_path() const override { return pipeline_; }
  bool has_latent_space() const override { return vae_config_.has_value(); }
  void save_folder(const std::string& dir) const override;
  void save_base(const std::string& dir) const override;

  /// Pipelines load their frozen parts on first use: a run whose caches hold every caption and
  /// image never reads Qwen3-4B, and the VAE only to decode samples.
  QwenTextModelImpl& text_model();
  AutoencoderKLImpl& vae_model();

  ZImageTransformer2DModel transformer{nullptr};
  QwenTextModel text_encoder{nullptr};  ///< pipelines: Qwen3, frozen (text_model())
  ClipTextModel tiny_text{nullptr};     ///< the tiny preset's encoder ("text_encoder")
  WordTokenizer word_tokenizer;         ///< the tiny preset's
  std::shared_ptr<QwenTokenizer> tokenizer;  ///< pipelines
  AutoencoderKL vae{nullptr};           ///< pipelines: frozen (vae_model())
  diffusion::FlowScheduleConfig schedule;

 private:
  std::vector<torch::nn::Module*> frozen_parts(bool text, bool image) const;
  void place_frozen(torch::nn::Module& part, bool streams);
  Settings settings_;
  TextEncoderTraining text_training_ = TextEncoderTraining::full;
  std::string pipeline_;
  Files files_;  ///< absolute paths of the single files the pipeline's components came from
  std::optional<AutoencoderKLConfig> vae_config_;  ///< pipelines (read at load; the weights on first use)
  std::vector<std::string> text_files_, vae_files_;
  std::optional<at::ScalarType> frozen_dtype_;
  at::Device frozen_home_ = at::kCPU;
  std::shared_ptr<AttentionOptions> attention_;
};

}  // namespace zs::models
