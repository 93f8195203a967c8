#pragma once
// The model a run trains, as the trainer, validation, sampling, the caches and the optimizer see
// it. Every family's model implements it (models/sd/diffusion_model.h: SD 1.x, SDXL and the tiny
// model); the family builds and loads it (ModelFamily::build, load_folder, load_frozen), so
// nothing outside the family's folder names its classes, components or files.

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>
#include <c10/util/ArrayRef.h>
#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include "models/frozen_parking.h"
#include "models/model_family.h"
#include "models/param_unit.h"

namespace torch::nn {
class Module;
}
namespace zs::config {
struct TrainerConfig;
}
namespace zs::data {
class LatentCache;
}
namespace zs::diffusion {
class Objective;
class Sampler;
}

namespace zs::models {

struct AttentionOptions;
struct LoraOptions;
class DenoiserModule;

/// One part of a model, for what every part gets alike (train mode, attention path, device).
struct ModelComponent {
  enum class Role {
    denoiser,      ///< the module that trains (a DenoiserModule)
    text_encoder,  ///< an encoder that can train (training.train_text_encoder)
    frozen,        ///< a part that never trains (Flux's T5, Qwen2.5-VL, the VAE)
  };
  torch::nn::Module* module = nullptr;  ///< nullptr: not loaded (skipped)
  Role role = Role::frozen;
  /// On a GPU it stays in CPU memory and passes through the device piece by piece (to() leaves it).
  bool streams_on_gpu = false;
};

/// The module a TORCH_MODULE holder holds, or nullptr when it holds none.
template <class Holder>
torch::nn::Module* module_of(const Holder& holder) {
  return holder ? holder.ptr().get() : nullptr;
}

class TrainableModel {
 public:
  virtual ~TrainableModel() = default;

  // ---- Conditioning and denoising -------------------------------------------------------------
  /// The conditioning for `captions` on `device`. With `cache` (frozen encoders only), each
  /// caption's outputs are read from and written to it, keyed by the caption's text; the result
  /// is the same either way.
  virtual TextConditioning condition(const std::vector<std::string>& captions, const at::Device& device,
                                     data::LatentCache* cache = nullptr) = 0;
  /// Classifier-free guidance's combination of the unconditional and conditional predictions at
  /// `scale`: uncond + scale·(cond − uncond) (diffusers' pipelines); a family may rescale it.
  virtual at::Tensor combine_guidance(const at::Tensor& uncond, const at::Tensor& cond, double scale) const;
  /// Whether sampling at `scale` runs the unconditional branch: any scale but 1 (where
  /// combine_guidance gives cond); a family whose pipeline guides otherwise says so (Z-Image: > 0).
  virtual bool guides(double scale) const { return scale != 1.0; }
  /// The denoiser's prediction for `noisy` [B, C, h, w] at timesteps `t` [B] under `cond`, with
  /// `geometry` [B, 6] (data::Batch::geometry, on any device) for families that condition on it.
  virtual at::Tensor predict(const at::Tensor& noisy, const at::Tensor& t, const TextConditioning& cond,
                             const at::Tensor& geometry) = 0;
  /// What the denoiser learns to denoise for images [B, 3, H, W] in [−1, 1] (pixels, or latents
  /// without gradients). With `cache` and one key per image, the encoder's outputs are read from
  /// and written to it (the result is the same, with the same random numbers).
  virtual at::Tensor to_model_space(const at::Tensor& images, at::Generator& generator,
                                    data::LatentCache* cache = nullptr,
                                    const std::vector<std::string>* keys = nullptr) = 0;
  /// Back from the denoiser's space to images in [−1, 1].
  virtual at::Tensor to_images(const at::Tensor& samples) = 0;
  /// The denoiser's spatial size for `resolution`-pixel images.
  virtual std::int64_t sample_size(std::int64_t resolution) const = 0;
  /// Image pixels per pixel at the denoiser's coarsest grid: image sides must be multiples of it.
  virtual std::int64_t pixel_factor() const = 0;
  /// Channels of the denoiser's input sample.
  virtual std::int64_t sample_channels() const = 0;
  /// The training objective (timesteps, noising, loss) of this model's schedule.
  virtual std::unique_ptr<diffusion::Objective> objective() const = 0;
  /// The sampler for samples of `sample_shape` [B, C, h, w] in `steps` steps (sampling.steps).
  virtual std::unique_ptr<diffusion::Sampler> sampler(std::int64_t steps, at::IntArrayRef sample_shape) const = 0;
  /// Whether the denoiser takes the guidance scale as an input (guidance-distilled models: Flux.1
  /// [dev]); sampling then gives it sampling.guidance_scale (set_sampling_guidance) instead of
  /// running classifier-free guidance.
  virtual bool embeds_guidance() const { return false; }
  /// The guidance predict() embeds from now on; negative: the training value again.
  virtual void set_sampling_guidance(double guidance) { (void)guidance; }
  /// The run's settings the model follows (the objective's timestep sampling, the embedded
  /// guidance while training, text lengths): called once the model is built or loaded.
  virtual void configure(const config::TrainerConfig& cfg) { (void)cfg; }

  // ---- What trains, as the optimizer sees it --------------------------------------------------
  /// Every parameter of the trainable parts by full name ("<component>.<name>"); text encoders
  /// only when they train in full. Under LoRA the denoiser's are the frozen base.
  virtual std::vector<std::pair<std::string, at::Tensor>> named_parameters() const = 0;
  /// The denoiser's ZeRO units in forward order ("io" first), parameters by their full name.
  /// With zero3_init_flag units may already hold shards.
  virtual std::vector<ParamUnit> denoiser_units() const = 0;
  /// Attaches LoRA adapters to the denoiser's `targets`; returns the layers adapted.
  virtual std::size_t attach_denoiser_lora(const std::vector<std::string>& targets, const LoraOptions& o,
                                           std::uint64_t seed) = 0;
  /// The denoiser's adapters as one unit, parameters by their full name (the unit's name is the
  /// one checkpoints use).
  virtual ParamUnit denoiser_adapters() = 0;
  /// Starts the denoiser's attached adapters from a LoRA file (lora.init_from); returns how many
  /// layers it set. Throws zs::Error naming the file and key where the file does not fit; families
  /// without a reader refuse (their configs refuse the key first).
  virtual std::size_t load_lora_file(const std::string& path);
  /// The text encoders that can train (in full or through LoRA: training.train_text_encoder) by
  /// component name, in the family's order. An encoder that never trains (Flux's T5) is not here.
  virtual std::vector<std::pair<std::string, std::shared_ptr<torch::nn::Module>>> text_encoder_modules() const = 0;
  /// How the text encoders train from now on (their weights require gradients under full only).
  virtual void set_text_training(TextEncoderTraining t) = 0;
  virtual TextEncoderTraining text_encoder_training() const = 0;
  bool text_encoders_trained() const { return text_encoder_training() != TextEncoderTraining::frozen; }
  /// Every part with its role, the denoiser first; what each part gets alike below follows it.
  virtual std::vector<ModelComponent> components() const = 0;
  /// The denoiser's module, components()'s denoiser (nullptr before it is built): its units'
  /// hooks and checkpointing.
  DenoiserModule* denoiser() const;
  /// Hooks around each unit's forward (ZeRO stage 3's gathers; models::UnitHooks).
  void set_unit_hooks(std::shared_ptr<UnitHooks> hooks);
  /// Activation checkpointing of the denoiser's units, the kept inputs in CPU memory with `to_cpu`.
  void set_gradient_checkpointing(bool on, bool to_cpu);
  /// Train mode for the denoiser, for the text encoders while they train; frozen parts never.
  void train(bool on);
  bool is_training() const;
  /// The attention path of every part: `training.attention`.
  virtual void set_attention(const AttentionOptions& o);

  // ---- Devices and the frozen parts -----------------------------------------------------------
  /// Everything to `device` but parts that stream on a GPU; without the denoiser when
  /// `with_denoiser` is false (the ZeRO optimizer moves it there unit by unit).
  virtual void to(const at::Device& device, bool with_denoiser = true);
  /// Frozen parts to the compute dtype (where their config allows); trained parts keep theirs.
  virtual void frozen_to(at::ScalarType compute) = 0;
  /// Frozen parts off the compute `device` for runs whose caches hold what they compute; the
  /// captions of `remember` are encoded first and kept (read from `text_cache` where it has them,
  /// so a family that loads its encoders on demand never loads them). Whatever still needs a part
  /// brings it back for that call only (counted in frozen_visits()).
  virtual void park_frozen(const at::Device& device, const std::vector<std::string>& remember = {},
                           data::LatentCache* text_cache = nullptr) = 0;
  bool frozen_parked() const { return parking_.parked(); }
  std::int64_t frozen_visits() const { return parking_.visits(); }
  /// Bytes of the frozen parts' weights (what park_frozen takes off the device).
  virtual std::int64_t frozen_bytes() const = 0;

  // ---- Where it came from, what a run folder keeps --------------------------------------------
  /// The pipeline folder or file the model was loaded from; empty for a model built from a preset.
  virtual const std::string& source_path() const = 0;
  /// Whether the denoiser works on an autoencoder's latents (what the latent cache holds).
  virtual bool has_latent_space() const = 0;
  /// The names of the text encoders' outputs a text cache keys on (data::LatentCache::text_key):
  /// by default the trainable encoders' components; a family adds what else shapes its outputs.
  virtual std::vector<std::string> text_components() const;
  /// The model's description (configs and tokenizers, no weights) under `dir`: the run's model/.
  virtual void save_folder(const std::string& dir) const = 0;
  /// A preset model's weights beside save_folder()'s configs: the base adapter-only checkpoints
  /// refer to. Nothing for a pipeline (its files are the base).
  virtual void save_base(const std::string& dir) const = 0;

 protected:
  /// The frozen parts' parking (park_frozen): the family's park_frozen and visits use it.
  FrozenParking parking_;
};

inline std::vector<std::string> TrainableModel::text_components() const {
  std::vector<std::string> out;
  for (const auto& [component, module] : text_encoder_modules()) out.push_back(component);
  return out;
}

}  // namespace zs::models
