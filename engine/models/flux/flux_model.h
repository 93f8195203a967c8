#pragma once
// A Flux.1 model as a run trains it (models/trainable_model.h): the FluxTransformer2DModel denoiser
// on 2×2-packed latent tokens, conditioned as FluxPipeline conditions it (diffusers
// src/diffusers/pipelines/flux/pipeline_flux.py: T5's last hidden state over max_sequence_length
// tokens, CLIP's pooled output, text ids all zero, image ids (0, row, column)), trained by rectified
// flow (diffusion/flow_matching.h) with the guidance embedding at training.guidance.
//
// Two kinds: a diffusers Flux pipeline folder (transformer/ trained from its weights; vae/,
// text_encoder/ (CLIP-L), text_encoder_2/ (T5 v1.1 XXL encoder), tokenizer/, tokenizer_2/
// (spiece.model) frozen), and the `flux-tiny` preset: the same transformer, small, in pixel space
// (3 channels packed 2×2 into 12-value tokens, no VAE), with the quickstart's word tokenizer and a
// small CLIP text model standing in for both encoders (its last hidden state as T5's states, its
// pooled output as CLIP-L's), trained in full from scratch.

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "diffusion/flow_matching.h"
#include "models/autoencoder_kl.h"
#include "models/clip_text_model.h"
#include "models/clip_tokenizer.h"
#include "models/flux/flux_transformer.h"
#include "models/frozen_parking.h"
#include "models/t5_encoder.h"
#include "models/t5_tokenizer.h"
#include "models/trainable_model.h"
#include "models/word_tokenizer.h"

namespace zs::models {

class FluxModel final : public TrainableModel {
 public:
  /// The flux-tiny preset for the quickstart's shapes, its word tokenizer built from `captions`,
  /// weights from `seed`.
  static FluxModel build_tiny(const std::vector<std::string>& captions, std::uint64_t seed,
                              const UnitBuilt& on_unit = {});
  /// The transformer of `config` with random weights from `seed` and no frozen parts: what a run
  /// whose caches are complete trains (bench_gpu_step measures full-size steps with it).
  static FluxModel build_transformer_only(const FluxConfig& config, std::uint64_t seed, const UnitBuilt& on_unit = {});
  /// A diffusers Flux pipeline folder. Without `with_transformer` only the frozen parts (what
  /// `zerostudio cache` encodes with). With `transformer_file`, the transformer comes from that
  /// Black Forest Labs single file (flux1-dev.safetensors, ComfyUI's copies) and `dir` gives the
  /// rest (its transformer/ may be absent). Throws zs::Error naming the file and what to do when
  /// a component, a shard or a key is missing.
  /// Weight files that stand in for a folder's own (the files ComfyUI users have:
  /// model.vae_path = ae.safetensors in BFL's autoencoder names or diffusers', model.text_encoder_path
  /// = clip_l.safetensors, model.text_encoder_2_path = t5xxl.safetensors); the folder then gives
  /// configs and tokenizers only. Empty: the folder's.
  struct Companions {
    std::string vae, text_encoder, text_encoder_2;
  };
  static FluxModel load_pipeline(const std::string& dir, const UnitBuilt& on_unit = {}, bool with_transformer = true,
                                 const std::string& transformer_file = "", const Companions& companions = {});
  /// What a run's model folder says it was trained from (its pipeline.json, written by
  /// save_folder): the pipeline folder, a BFL transformer file, companion weight files. An empty
  /// path for the flux-tiny preset. Throws zs::Error(checkpoint) naming pipeline.json and what to
  /// put back when a file it names is gone.
  struct PipelineRef {
    std::string path, transformer_file;
    Companions companions;
  };
  static PipelineRef pipeline_of(const std::string& dir);
  /// A run's model folder written by save_folder(): the pipeline it names (pipeline.json), or the
  /// tiny preset's configs and tokenizer with the base weights where save_base() wrote them.
  static FluxModel load_folder(const std::string& dir, const UnitBuilt& on_unit = {});
  /// Whether `dir` is a model folder save_folder() wrote (its transformer/config.json).
  static bool is_model_folder(const std::string& dir);
  static bool has_saved_base(const std::string& dir);

  /// The run's settings the objective and the conditioning follow.
  struct Settings {
    diffusion::TimestepSampling timestep_sampling;
    double guidance = 1.0;                  ///< training.guidance: the embedded guidance while training
    std::int64_t max_sequence_length = 512; ///< T5 tokens (model.max_sequence_length)
  };
  void set_settings(const Settings& s) { settings_ = s; }
  /// training.timestep_sampling (and its parameters), training.guidance, model.max_sequence_length.
  void configure(const config::TrainerConfig& cfg) override;
  const Settings& settings() const { return settings_; }

  TextConditioning condition(const std::vector<std::string>& captions, const at::Device& device,
                             data::LatentCache* cache = nullptr) override;
  /// Packs `noisy` [B, C, h, w] into tokens, runs the transformer at σ `t` [B] (with the embedded
  /// guidance where the model has it) and unpacks the velocity. `geometry` is not used.
  at::Tensor predict(const at::Tensor& noisy, const at::Tensor& t, const TextConditioning& cond,
                     const at::Tensor& geometry) override;
  /// Pixels (the tiny preset), or the VAE's posterior sample, shifted and scaled (AutoencoderKL's
  /// to_model_latents), without gradients; with `cache`, posteriors as DiffusionModel keeps them.
  at::Tensor to_model_space(const at::Tensor& images, at::Generator& generator, data::LatentCache* cache = nullptr,
                            const std::vector<std::string>* keys = nullptr) override;
  at::Tensor to_images(const at::Tensor& samples) override;
  std::int64_t sample_size(std::int64_t resolution) const override;
  /// VAE down-sampling × the 2×2 packing.
  std::int64_t pixel_factor() const override;
  std::int64_t sample_channels() const override { return transformer->config().in_channels / 4; }
  std::unique_ptr<diffusion::Objective> objective() const override;
  std::unique_ptr<diffusion::Sampler> sampler(std::int64_t steps, at::IntArrayRef sample_shape) const override;
  bool embeds_guidance() const override { return transformer->config().guidance_embeds; }
  void set_sampling_guidance(double g) override { sampling_guidance_ = g; }

  std::vector<std::pair<std::string, at::Tensor>> named_parameters() const override;
  std::vector<ParamUnit> denoiser_units() const override;
  /// The unit name of the transformer's LoRA adapters, as checkpoints name it.
  static constexpr const char* kDenoiserAdapters = "lora_transformer";
  std::size_t attach_denoiser_lora(const std::vector<std::string>& targets, const LoraOptions& o,
                                   std::uint64_t seed) override;
  ParamUnit denoiser_adapters() override;
  /// text_encoder (CLIP-L, or the tiny preset's encoder): the one that can train. T5 never does.
  std::vector<std::pair<std::string, std::shared_ptr<torch::nn::Module>>> text_encoder_modules() const override;
  /// text_encoder, and for pipelines "text_encoder_2@<max_sequence_length>" (T5's rows depend on it).
  std::vector<std::string> text_components() const override;
  void set_text_training(TextEncoderTraining t) override;
  TextEncoderTraining text_encoder_training() const override { return text_training_; }
  /// transformer, text_encoder (CLIP-L or the tiny encoder), text_encoder_2 (T5-XXL, streamed on a
  /// GPU from CPU memory), vae.
  std::vector<ModelComponent> components() const override;
  void frozen_to(at::ScalarType compute) override;
  /// Frozen parts (VAE, frozen text encoders) to CPU memory while the run's caches hold what they
  /// compute; on the CPU they stay where they are. The captions of `remember` are encoded first.
  void park_frozen(const at::Device& device, const std::vector<std::string>& remember = {},
                   data::LatentCache* text_cache = nullptr) override;
  std::int64_t frozen_bytes() const override;

  const std::string& source_path() const override { return pipeline_; }
  bool has_latent_space() const override { return static_cast<bool>(vae); }
  void save_folder(const std::string& dir) const override;
  void save_base(const std::string& dir) const override;

  FluxTransformer2DModel transformer{nullptr};
  ClipTextModel clip{nullptr};           ///< "text_encoder": CLIP-L, or the tiny preset's encoder
  T5EncoderModel t5{nullptr};            ///< "text_encoder_2" (pipelines)
  WordTokenizer word_tokenizer;          ///< the tiny preset's
  std::shared_ptr<ClipTokenizer> clip_tokenizer;  ///< pipelines
  std::shared_ptr<T5Tokenizer> t5_tokenizer;      ///< pipelines
  AutoencoderKL vae{nullptr};            ///< pipelines: frozen
  diffusion::FlowScheduleConfig schedule;

 private:
  TextConditioning encode(const std::vector<std::string>& captions, const at::Device& device);
  std::vector<torch::nn::Module*> frozen_parts(bool text, bool image) const;
  Settings settings_;
  double sampling_guidance_ = -1;  ///< < 0: training.guidance (set_sampling_guidance)
  TextEncoderTraining text_training_ = TextEncoderTraining::full;
  std::string pipeline_;
  std::string transformer_file_;  ///< a BFL single file the transformer came from (else the pipeline's)
  Companions companions_;
};

}  // namespace zs::models
