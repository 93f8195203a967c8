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
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "diffusion/flow_matching.h"
#include "models/clip_text_model.h"
#include "models/frozen_parking.h"
#include "models/qwen_image/qwen_text_encoder.h"
#include "models/qwen_text/qwen_tokenizer.h"
#include "models/qwen_image/qwen_transformer.h"
#include "models/qwen_image/qwen_vae.h"
#include "models/trainable_model.h"
#include "models/word_tokenizer.h"
#include "quant/base_quant.h"

namespace zs::models {

class QwenImageModel final : public TrainableModel {
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
  /// The pipeline folder a run's model folder names (its pipeline.json); "" for the tiny preset.
  /// Throws zs::Error(checkpoint) naming pipeline.json when the folder is gone.
  static std::string pipeline_of(const std::string& dir);
  /// A run's model folder written by save_folder(): the pipeline it names, or the tiny preset's
  /// configs and tokenizer with the base weights where save_base() wrote them.
  static QwenImageModel load_folder(const std::string& dir, const UnitBuilt& on_unit = {});
  static bool has_saved_base(const std::string& dir);

  /// The run's settings the objective and the conditioning follow.
  struct Settings {
    diffusion::TimestepSampling timestep_sampling;
    std::int64_t max_sequence_length = 512;  ///< text tokens kept (model.max_sequence_length)
    /// model.text_encoder_precision: Qwen2.5-VL's Linear weights quantized as it loads on demand
    /// (train/frozen_cache's quantize_text_encoders cannot reach a part that is not loaded yet).
    quant::BaseFormat text_format = quant::BaseFormat::bf16;
  };
  /// training.timestep_sampling (and its parameters), model.max_sequence_length,
  /// model.text_encoder_precision.
  void configure(const config::TrainerConfig& cfg) override;
  const Settings& settings() const { return settings_; }

  /// Each caption encoded on its own (its own length); a batch is padded with the mask.
  TextConditioning condition(const std::vector<std::string>& captions, const at::Device& device,
                             data::LatentCache* cache = nullptr) override;
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

  std::vector<std::pair<std::string, at::Tensor>> named_parameters() const override;
  std::vector<ParamUnit> denoiser_units() const override;
  /// The unit name of the transformer's LoRA adapters, as checkpoints name it.
  static constexpr const char* kDenoiserAdapters = "lora_transformer";
  std::size_t attach_denoiser_lora(const std::vector<std::string>& targets, const LoraOptions& o,
                                   std::uint64_t seed) override;
  ParamUnit denoiser_adapters() override;
  /// DiffSynth-Studio's, diffusers' or musubi-tuner's LoRA file (qwen_lora_file.h) onto the attached
  /// adapters, each layer's function kept (up rescaled from the file's scale to the run's alpha/rank).
  std::size_t load_lora_file(const std::string& path) override;
  /// The tiny preset's encoder (trains in full); none for pipelines: Qwen2.5-VL never trains.
  std::vector<std::pair<std::string, std::shared_ptr<torch::nn::Module>>> text_encoder_modules() const override;
  /// text_encoder@<max_sequence_length> for pipelines (the kept rows depend on it).
  std::vector<std::string> text_components() const override;
  void set_text_training(TextEncoderTraining t) override;
  TextEncoderTraining text_encoder_training() const override { return text_training_; }
  /// transformer, the tiny preset's text_encoder or a pipeline's Qwen2.5-VL (streamed on a GPU
  /// from CPU memory; loaded on first use), vae (loaded on first use).
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
  /// image (and the sample prompts) never reads Qwen2.5-VL's 7 B parameters, and the VAE only to
  /// decode samples. These load them (once) and return them.
  QwenTextModelImpl& text_model();
  QwenVaeImpl& vae_model();

  QwenImageTransformer2DModel transformer{nullptr};
  QwenTextModel text_encoder{nullptr};   ///< pipelines: Qwen2.5-VL's language model, frozen (text_model())
  ClipTextModel tiny_text{nullptr};      ///< the tiny preset's encoder ("text_encoder")
  WordTokenizer word_tokenizer;          ///< the tiny preset's
  std::shared_ptr<QwenTokenizer> tokenizer;  ///< pipelines
  QwenVae vae{nullptr};                  ///< pipelines: frozen (vae_model())
  diffusion::FlowScheduleConfig schedule;

 private:
  /// One caption's rows [1, n, D] (pipelines: n its kept tokens; the tiny preset: its word frame).
  at::Tensor encode_one(const std::string& caption, const at::Device& device);
  std::vector<torch::nn::Module*> frozen_parts(bool text, bool image) const;
  /// A frozen part just loaded: to the dtype and place the run gave the frozen parts.
  void place_frozen(torch::nn::Module& part, bool streams);
  Settings settings_;
  TextEncoderTraining text_training_ = TextEncoderTraining::full;
  std::string pipeline_;
  std::optional<QwenVaeConfig> vae_config_;   ///< pipelines (read at load; the weights on first use)
  std::vector<std::string> text_files_, vae_files_;
  std::optional<at::ScalarType> frozen_dtype_;  ///< frozen_to()'s
  at::Device frozen_home_ = at::kCPU;           ///< to()'s device
  std::shared_ptr<AttentionOptions> attention_;  ///< set_attention()'s
};

}  // namespace zs::models
