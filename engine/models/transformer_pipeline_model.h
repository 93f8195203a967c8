#pragma once
// What the flow-matching transformer families conditioned by a Qwen-style decoder share as a model
// a run trains (models/trainable_model.h): Qwen-Image (Qwen2.5-VL), Z-Image (Qwen3) and FLUX.2
// (Qwen3 for klein, Mistral-Small for dev). Each is two kinds: a diffusers pipeline folder — the
// transformer trained from its weights, the text encoder and VAE frozen and read on first use (a run
// whose caches hold every caption and image never reads them), the text encoder streamed layer by
// layer through a GPU from CPU memory — and the family's tiny preset: the same transformer, small,
// in pixel space, with the quickstart's word tokenizer and a small CLIP text model standing in for
// the decoder (its last hidden state as the caption features), trained in full from scratch.
//
// This class holds the conditioning (each caption encoded on its own, cached or remembered while
// parked), the frozen parts' loading, placing and parking, the LoRA and parameter plumbing, and the
// run's model folder (pipeline.json naming the pipeline and any single files). A family's model
// adds its transformer, its VAE, its prompt encoding, its predict() arrangement, its schedule and
// its loaders.

#include <cstdint>
#include <iosfwd>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "diffusion/flow_matching.h"
#include "models/clip_text_model.h"
#include "models/diffusers_folder.h"
#include "models/qwen_text/qwen_text_model.h"
#include "models/qwen_text/qwen_tokenizer.h"
#include "models/trainable_model.h"
#include "models/word_tokenizer.h"
#include "quant/base_quant.h"

namespace zs::models {

struct AttentionOptions;
struct ModelShape;

/// The estimator's view of a tiny preset's text side (ModelFamily::shape): its CLIP-style encoder
/// counted as frozen parameters and as a text encoder, pixel space in 2×2 patches, its frame as
/// the text tokens.
void describe_tiny_text(ModelShape& m, const ClipTextModel& encoder, std::int64_t lora_rank);
/// … and of a pipeline's frozen parts: the decoder of `text` (counted, never trained; loaded on
/// demand and on a GPU streamed layer by layer, so its largest layer is the piece on the device,
/// the token embedding staying in CPU memory) and a VAE of `vae_parameters` (kept in float32 when
/// `vae_fp32`: force_upcast); latents in 2×2 patches of an 8× VAE. Call under a MetaTensorScope.
void describe_pipeline_frozen_parts(ModelShape& m, const QwenTextConfig& text, std::int64_t vae_parameters, bool vae_fp32);
/// `model info` of such a family's diffusers pipeline folder `path`: its components (the tokenizer
/// as Qwen2's byte-level BPE, `tokenizer_kind` its flavour: "Qwen2", "Qwen2, Qwen3's chat tokens"),
/// then the transformer's `blocks`; with `check_text`, the text encoder's files' headers against its
/// config (it is read only when a caption needs it, so a mismatch is refused here, before a run
/// folder exists). Throws zs::Error naming an unreadable component.
void describe_decoder_pipeline(std::ostream& out, const std::string& path, const std::string& tokenizer_kind,
                               const std::string& blocks, bool check_text);

class TransformerPipelineModel : public TrainableModel {
 public:
  /// Single files in place of a pipeline folder's components (model.path, model.vae_path,
  /// model.text_encoder_path); empty: the folder's own.
  struct Files {
    std::string transformer, vae, text_encoder;
  };
  /// What a run's model folder names in its pipeline.json: the folder and the single files (empty
  /// path: the tiny preset). Throws zs::Error(checkpoint) naming pipeline.json when one is gone.
  struct PipelineRef {
    std::string path;
    Files files;
  };
  static PipelineRef pipeline_of(const std::string& dir);
  /// A diffusers pipeline folder of `family` ("Z-Image") with every component these models read
  /// (transformer, vae, text_encoder, tokenizer, scheduler); throws zs::Error(config) naming
  /// model_index.json and the one missing.
  static DiffusersFolder open_pipeline(const std::string& dir, const std::string& family);

  /// The run's settings the objective and the conditioning follow.
  struct Settings {
    diffusion::TimestepSampling timestep_sampling;
    std::int64_t max_sequence_length = 512;  ///< text tokens kept (model.max_sequence_length)
    /// model.text_encoder_precision: the decoder's Linear weights quantized as it loads on demand
    /// (train/frozen_cache's quantize_text_encoders cannot reach a part that is not loaded yet).
    quant::BaseFormat text_format = quant::BaseFormat::bf16;
  };
  /// training.timestep_sampling (and its parameters), model.max_sequence_length,
  /// model.text_encoder_precision.
  void configure(const config::TrainerConfig& cfg) override;
  const Settings& settings() const { return settings_; }

  /// Each caption encoded on its own (prompt_states()); a batch is padded with the mask.
  TextConditioning condition(const std::vector<std::string>& captions, const at::Device& device,
                             data::LatentCache* cache = nullptr) override;

  std::vector<std::pair<std::string, at::Tensor>> named_parameters() const override;
  std::vector<ParamUnit> denoiser_units() const override;
  /// The unit name of the transformer's LoRA adapters, as checkpoints name it.
  static constexpr const char* kDenoiserAdapters = "lora_transformer";
  std::size_t attach_denoiser_lora(const std::vector<std::string>& targets, const LoraOptions& o,
                                   std::uint64_t seed) override;
  ParamUnit denoiser_adapters() override;
  /// The family's LoRA files (models/transformer_lora_file.h) onto the attached adapters.
  std::size_t load_lora_file(const std::string& path) override;
  /// The tiny preset's encoder (trains in full); none for pipelines: their decoder never trains.
  std::vector<std::pair<std::string, std::shared_ptr<torch::nn::Module>>> text_encoder_modules() const override;
  /// text_encoder@<max_sequence_length> for pipelines (the kept rows depend on it).
  std::vector<std::string> text_components() const override;
  void set_text_training(TextEncoderTraining t) override;
  TextEncoderTraining text_encoder_training() const override { return text_training_; }
  /// transformer, the tiny preset's text_encoder or a pipeline's decoder (streamed on a GPU from
  /// CPU memory; loaded on first use), vae (loaded on first use).
  std::vector<ModelComponent> components() const override;
  void set_attention(const AttentionOptions& o) override;
  void to(const at::Device& device, bool with_denoiser = true) override;
  void frozen_to(at::ScalarType compute) override;
  void park_frozen(const at::Device& device, const std::vector<std::string>& remember = {},
                   data::LatentCache* text_cache = nullptr) override;
  std::int64_t frozen_bytes() const override;
  const std::string& source_path() const override { return pipeline_; }
  /// transformer/ and scheduler/ configs; pipeline.json for pipelines, the tiny preset's tokenizer
  /// and encoder config otherwise.
  void save_folder(const std::string& dir) const override;
  /// The tiny preset's base weights (pipelines keep theirs where they are).
  void save_base(const std::string& dir) const override;

  /// The pipeline's decoder, loaded (once) on first use: its files' headers were checked at load.
  QwenTextModelImpl& text_model();

  QwenTextModel text_encoder{nullptr};       ///< pipelines: frozen (text_model())
  ClipTextModel tiny_text{nullptr};          ///< the tiny preset's encoder ("text_encoder")
  WordTokenizer word_tokenizer;              ///< the tiny preset's
  std::shared_ptr<QwenTokenizer> tokenizer;  ///< pipelines
  diffusion::FlowScheduleConfig schedule;

 protected:
  /// What messages name: "Z-Image", "Z-Image's text encoder (Qwen3-4B)", "z-image-tiny".
  struct Names {
    const char* family;
    const char* encoder;
    const char* tiny_preset;
  };
  virtual Names names() const = 0;
  /// The transformer (nullptr before it is built or for a frozen-only load).
  virtual DenoiserModule* transformer_module() const = 0;
  /// The VAE once loaded (nullptr before its first use and for the tiny preset).
  virtual torch::nn::Module* loaded_vae() const = 0;
  /// The transformer's config.json and class name for the run's model folder.
  virtual nlohmann::json transformer_config_json() const = 0;
  virtual const char* transformer_class() const = 0;
  /// model.max_sequence_length's default: the pipeline's.
  virtual std::int64_t default_max_sequence_length() const { return 512; }
  /// One caption's rows [n, D] from the pipeline's decoder on `device` (streamed: its weights stay
  /// in CPU memory and pass through the device layer by layer).
  virtual at::Tensor prompt_states(QwenTextModelImpl& text, const std::string& caption, const at::Device& device,
                                   bool streamed) = 0;

  /// The frozen parts loaded so far: the VAE (`image`) and the decoder (`text`); none for the tiny preset.
  std::vector<torch::nn::Module*> frozen_parts(bool text, bool image) const;
  /// A frozen part just loaded: to the dtype and place the run gave the frozen parts.
  void place_frozen(torch::nn::Module& part, bool streams);
  /// A pipeline folder's text encoder files (or `files.text_encoder`) and the single files, absolute.
  void set_sources(const std::string& pipeline, const Files& files);
  /// The dtype frozen parts run in (frozen_to()'s, else float32).
  at::ScalarType frozen_dtype() const { return frozen_dtype_.value_or(at::kFloat); }

  Settings settings_;
  TextEncoderTraining text_training_ = TextEncoderTraining::full;
  std::string pipeline_;
  Files files_;  ///< absolute paths of the single files the pipeline's components came from
  std::vector<std::string> text_files_, vae_files_;
  std::optional<at::ScalarType> frozen_dtype_;   ///< frozen_to()'s
  at::Device frozen_home_ = at::kCPU;            ///< to()'s device
  std::shared_ptr<AttentionOptions> attention_;  ///< set_attention()'s, for the parts loaded on first use
};

}  // namespace zs::models
