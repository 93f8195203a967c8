#pragma once
// What a run trains: UNet + text encoder + tokenizer + noise schedule, saved as a
// diffusers-style folder (unet/, text_encoder/, tokenizer/, scheduler/) in the run's model/.

#include <string>
#include <vector>

#include <map>
#include <memory>

#include "diffusion/noise_schedule.h"
#include "models/attention.h"
#include "models/autoencoder_kl.h"
#include "models/clip_text_model.h"
#include "models/clip_tokenizer.h"
#include "models/frozen_parking.h"
#include "models/lora.h"
#include "models/model_family.h"
#include "models/sd/unet_2d_condition.h"
#include "models/trainable_model.h"
#include "models/word_tokenizer.h"

namespace zs::data {
class LatentCache;
}

namespace zs::models {

class ModelSource;

/// A run's reference to the pipeline model it trains (its model folder's pipeline.json).
struct PipelineRef {
  std::string path;             ///< diffusers folder or single file; empty: a preset model
  std::string config_path;      ///< a single file's companion folder
  std::string prediction_type;  ///< the run's (it replaces the scheduler config's)
};

class DiffusionModel final : public TrainableModel {
 public:
  /// The quickstart's tiny pixel-space model for `resolution`-pixel images, with a tokenizer
  /// built from `captions`. Weights come from `seed`.
  static DiffusionModel build_tiny(const std::vector<std::string>& captions, const std::string& prediction_type,
                                   std::uint64_t seed, const UnitBuilt& on_unit = {});
  /// A Stable Diffusion 1.x or SDXL model: a diffusers pipeline folder, or a single-file
  /// checkpoint with its companion `config_path` (models/sd/single_file_model.h). The UNet is
  /// trained from its weights; the VAE and CLIP text encoders are frozen; the scheduler config's
  /// prediction type is replaced by `prediction_type`.
  static DiffusionModel load_pipeline(const std::string& dir, const std::string& prediction_type,
                                      const std::string& config_path = "", const UnitBuilt& on_unit = {});
  /// A model folder written by save_folder() (configs and tokenizer, or the pipeline it came
  /// from; trained weights are loaded separately).
  /// Only a pipeline's frozen parts (VAE, text encoders, tokenizers), without its UNet: what
  /// `zerostudio cache` encodes with.
  static DiffusionModel load_frozen(const std::string& dir, const std::string& config_path = "");
  /// A run's model/ folder, or a tiny-preset model exported as a diffusers folder (unet/,
  /// text_encoder/ with their weights, its word tokenizer, scheduler/): the configs, and the
  /// weights where the folder has them.
  static DiffusionModel load_folder(const std::string& dir, const UnitBuilt& on_unit = {});
  /// Whether `dir` is a tiny-preset model folder load_folder reads (its word tokenizer's
  /// tokenizer/tokenizer.json and unet/config.json, no model_index.json): `zerostudio export
  /// --format diffusers` of a quickstart checkpoint, which model.path can name to train on.
  static bool is_preset_folder(const std::string& dir);
  /// Whether `dir` holds a model folder written by save_folder() (its unet/config.json).
  static bool is_model_folder(const std::string& dir);
  /// Whether save_base() wrote its weights into `dir`.
  static bool has_saved_base(const std::string& dir);
  /// A preset model's weights (UNet and text encoder) into `dir` beside save_folder()'s configs:
  /// the base a run's adapter-only checkpoints refer to. Nothing for a pipeline (its files are the base).
  void save_base(const std::string& dir) const override;
  /// Where a model folder written by save_folder() came from: its pipeline.json (the diffusers
  /// folder or single file, a single file's companion folder, the prediction type); an empty
  /// path for a model built from a preset. Throws zs::Error(checkpoint) naming the reference
  /// when the model it names is gone.
  static PipelineRef pipeline_of(const std::string& dir);
  /// Writes unet/config.json, text_encoder/config.json, tokenizer/tokenizer.json and
  /// scheduler/scheduler_config.json under `dir` (no weights).
  void save_folder(const std::string& dir) const override;

  /// Text conditioning for `captions`: [B, T, hidden] on `device`.
  at::Tensor encode_text(const std::vector<std::string>& captions, const at::Device& device);
  /// The full conditioning (SDXL adds the pooled embedding). With `cache` (frozen encoders only),
  /// each caption's outputs are read from and written to it, keyed by the caption's text; the
  /// result is the same either way.
  TextConditioning condition(const std::vector<std::string>& captions, const at::Device& device,
                             data::LatentCache* cache = nullptr) override;
  /// The UNet's prediction for `noisy` [B, C, h, w] at timesteps `t` [B] under `cond`, with
  /// `geometry` [B, 6] (data::Batch::geometry, on any device) as SDXL's time ids; models without
  /// added conditioning ignore it.
  at::Tensor predict(const at::Tensor& noisy, const at::Tensor& t, const TextConditioning& cond,
                     const at::Tensor& geometry) override;
  /// What the UNet learns to denoise for images [B, 3, H, W] in [−1, 1]: the images themselves
  /// (pixel models) or VAE latents (a posterior sample × scaling_factor, without gradients).
  /// With `cache` and one key per image, posteriors are read from and written to the cache
  /// (the sample is drawn afresh either way, with the same random numbers).
  at::Tensor to_model_space(const at::Tensor& images, at::Generator& generator, data::LatentCache* cache = nullptr,
                            const std::vector<std::string>* keys = nullptr) override;
  /// Back from the UNet's space to images in [−1, 1] (the VAE decoder for latent models).
  at::Tensor to_images(const at::Tensor& samples) override;
  /// The UNet's spatial size for `resolution`-pixel images.
  std::int64_t sample_size(std::int64_t resolution) const override;
  /// Image pixels per pixel at the UNet's bottom (VAE × UNet down-sampling): image sides must
  /// be multiples of it.
  std::int64_t pixel_factor() const override;
  /// Every parameter of the trainable parts, named "unet.<diffusers name>" and
  /// "text_encoder.<HF name>" / "text_encoder_2.<HF name>" (text encoders only when they train in
  /// full). Under LoRA the UNet's are the frozen base.
  std::vector<std::pair<std::string, at::Tensor>> named_parameters() const override;
  // The denoiser as the trainer and the optimizer see it (what every family's model offers).
  /// The denoiser's ZeRO units in forward order ("io" first), parameters named by their full
  /// name ("unet.<diffusers name>"). With zero3_init_flag units may already hold shards.
  std::vector<ParamUnit> denoiser_units() const override;
  /// The unit name of the denoiser's LoRA adapters ("lora_unet", as checkpoints name it).
  static constexpr const char* kDenoiserAdapters = "lora_unet";
  /// Attaches LoRA adapters to the denoiser's `targets`; returns the layers adapted.
  std::size_t attach_denoiser_lora(const std::vector<std::string>& targets, const LoraOptions& o,
                                   std::uint64_t seed) override;
  /// The denoiser's adapters as one unit (kDenoiserAdapters), parameters by their full name.
  ParamUnit denoiser_adapters() override;
  /// unet, text_encoder (and SDXL's text_encoder_2), vae.
  std::vector<ModelComponent> components() const override;
  /// Channels of the denoiser's input sample (latent or pixel).
  std::int64_t sample_channels() const override { return unet->config().in_channels; }
  /// DDPM noise under the scheduler config (ε or v), and DDIM for samples.
  std::unique_ptr<diffusion::Objective> objective() const override;
  std::unique_ptr<diffusion::Sampler> sampler(std::int64_t steps, at::IntArrayRef sample_shape) const override;

  /// The text encoders by component name: text_encoder, and SDXL's text_encoder_2.
  std::vector<std::pair<std::string, ClipTextModel>> text_encoders() const;
  /// How the text encoders train from now on: their weights require gradients under full only
  /// (LoRA's adapters are made trainable by models::lora_unit).
  void set_text_training(TextEncoderTraining t) override;
  TextEncoderTraining text_encoder_training() const override { return text_training; }
  std::vector<std::pair<std::string, std::shared_ptr<torch::nn::Module>>> text_encoder_modules() const override;
  /// Frozen parts of a pipeline to the compute dtype (the VAE stays fp32 when its config says
  /// force_upcast); the trained parts keep theirs (the optimizer casts them).
  void frozen_to(at::ScalarType compute) override;

  /// Frozen parts (a pipeline's VAE and frozen text encoders) off the compute `device`, for runs
  /// whose caches hold what those parts compute: on a GPU they wait in CPU memory; on the CPU,
  /// where the device is CPU memory, their weights are released and read again from `pipeline`
  /// when needed. Whatever still needs them (sampling's decoder, an input the caches miss)
  /// brings them back for that call only (counted in frozen_visits). The captions of
  /// `remember` (sampling's prompts, "" for guidance) are encoded first and kept, so sampling
  /// needs no encoder. No effect on models without frozen parts.
  void park_frozen(const at::Device& device, const std::vector<std::string>& remember = {},
                   data::LatentCache* text_cache = nullptr) override;
  /// Bytes of the frozen parts' weights (what park_frozen takes off the device).
  std::int64_t frozen_bytes() const override;
  const std::string& source_path() const override { return pipeline; }
  bool has_latent_space() const override { return static_cast<bool>(vae); }

  UNet2DConditionModel unet{nullptr};
  ClipTextModel text_encoder{nullptr};
  WordTokenizer tokenizer;                     ///< the tiny model's word tokenizer
  diffusion::ScheduleConfig schedule;
  AutoencoderKL vae{nullptr};                  ///< latent models: frozen
  std::shared_ptr<ClipTokenizer> clip_tokenizer;  ///< pipelines: used instead of `tokenizer`
  ClipTextModel text_encoder_2{nullptr};          ///< SDXL: CLIPTextModelWithProjection, frozen
  std::shared_ptr<ClipTokenizer> clip_tokenizer_2;  ///< SDXL: its tokenizer (pads with "!")
  TextEncoderTraining text_training = TextEncoderTraining::full;  ///< pipelines: frozen unless set
  std::string pipeline;                        ///< the diffusers folder or single file a pipeline model came from
  std::string config_path;                     ///< a single file's companion folder (tokenizers, configs)

 private:
  friend class FrozenVisit;
  /// The CLIP encoders' conditioning for `captions` (SD 1.x: the last hidden state; SDXL: both
  /// penultimate states side by side and the pooled projection), with gradients when enabled.
  TextConditioning encode_clip(const std::vector<std::string>& captions, const at::Device& device);
  static void load_frozen_parts(DiffusionModel& m, const ModelSource& p, bool sdxl, const std::string& dir,
                                const std::string& config_path);
  std::vector<std::pair<std::string, torch::nn::Module*>> frozen_parts(bool text, bool image) const;
  void send_away(bool text, bool image);
  void bring_back(bool text, bool image);
  int visiting_[2] = {0, 0};  // FrozenVisit depth: text encoders, VAE
};

}  // namespace zs::models
