#pragma once
// TrainerConfig: the typed form of a trainer YAML file.
//
// settings/ holds only these plain types (namespace zs::config), below every layer that reads
// them: the model families take a TrainerConfig, and config/ — which reads, checks and writes
// it — asks the families. Defaults, allowed values and documentation live in the schema
// (config/schema.cpp), not here: build a config with TrainerConfig::defaults()
// (config/config_defaults.cpp) or load one with load_config().
// Members are zero-initialised only so that a default-constructed struct is never garbage.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "settings/value.h"

namespace zs::config {

/// Current version of the trainer YAML schema (the `version:` key).
inline constexpr std::int64_t kSchemaVersion = 2;

struct ModelConfig {
  std::string preset;           ///< architecture preset: tiny | sd15 | sdxl
  std::string path;             ///< diffusers folder or single file; empty: build from the preset
  std::string config_path;      ///< a single file's companion folder: tokenizers, configs
  std::string prediction_type;  ///< epsilon | v_prediction
  std::optional<std::int64_t> max_sequence_length;  ///< Flux's T5 tokens; null: the family's default
  std::string vae_path;             ///< Flux: a VAE weight file (ae.safetensors) instead of the folder's
  std::string text_encoder_path;    ///< Flux: CLIP-L's weight file instead of the folder's
  std::string text_encoder_2_path;  ///< Flux: T5-XXL's weight file instead of the folder's
  std::string base_precision;          ///< the frozen denoiser base's storage: bf16 | fp8 | int8 | nf4
  std::string text_encoder_precision;  ///< the frozen text encoders' storage: bf16 | fp8 | int8 | nf4
};

/// Options of the metadata-JSON dataset layout (metadata/**/*.json with tags, score, path).
struct DataMetadataConfig {
  std::int64_t consider_every_nth{};          ///< keep every nth JSON file (1: all)
  double shuffle_tag_p{};                     ///< probability of shuffling an example's tags
  std::vector<std::string> blacklist_tags;    ///< drop images with any of these tags
  std::vector<std::string> non_caption_tags;  ///< tags left out of the caption
  StringMap replacements;                     ///< substring replacements applied to each tag, in order
  std::string tag_separator;                  ///< joins the tags into the caption
  std::optional<double> abs_min_score;        ///< drop images scoring below this
  std::optional<double> min_score;            ///< drop images whose score + tag bonuses is below this
  std::vector<double> score_tags;             ///< thresholds: score above T adds the tag "scrT" (highest only)
  StringMap tag_bonus_scores;                 ///< tag -> score bonus (numbers as text) for min_score
};

struct DataConfig {
  std::string path;              ///< dataset folder; empty: the run's data/ folder
  std::string generate;          ///< none | shapes
  std::int64_t generate_count{};  ///< images generated when generate is shapes
  std::int64_t resolution{};     ///< training size in pixels (square)
  std::int64_t repeats{};        ///< each image this many times per epoch (kohya's num_repeats)
  double flip_p{};               ///< probability of a horizontal flip
  double caption_dropout{};      ///< probability of an empty caption (classifier-free guidance)
  std::int64_t num_workers{};    ///< decoding threads
  bool aspect_buckets{};         ///< batches of one aspect-ratio bucket instead of square crops
  std::int64_t bucket_step{};    ///< bucket sides are multiples of this
  bool cache_latents{};          ///< pipelines: keep VAE posteriors on disk and reuse them
  bool cache_text_embeddings{};  ///< pipelines: keep the frozen text encoders' outputs per caption
  bool cache_quantized_base{};   ///< a quantized base's codes on disk, read instead of its model files
  std::string latent_cache_dir;  ///< where; empty: logging.runs_root/.latent-cache
  bool allow_external_paths{};   ///< keep items whose file resolves outside the dataset folder
  DataMetadataConfig metadata;   ///< metadata-JSON layout options
};

struct TrainingConfig {
  std::int64_t max_steps{};                    ///< optimizer steps (ignored when epochs is set)
  std::optional<std::int64_t> epochs;          ///< null: max_steps decides; else the steps follow (train::run_steps)
  std::int64_t batch_size{};                   ///< micro batch per process
  std::int64_t gradient_accumulation_steps{};  ///< micro steps per optimizer step
  std::optional<std::int64_t> train_batch_size;  ///< DeepSpeed's global batch, checked when set
  double gradient_clipping{};                  ///< global norm; 0 = off
  std::int64_t seed{};
  bool gradient_checkpointing{};
  bool cpu_checkpointing{};                    ///< checkpointed unit inputs wait in CPU memory
  std::string attention;                       ///< auto | plain | blocked
  double min_snr_gamma{};                      ///< min-SNR-γ loss weighting; 0 = off
  std::string timestep_sampling;               ///< flow matching: uniform | sigmoid | logit_normal | shift
  double sigmoid_scale{};                      ///< sigmoid, shift: σ = sigmoid(scale · N(0, 1))
  double logit_mean{}, logit_std{};            ///< logit_normal: σ = sigmoid(N(mean, std))
  double guidance{};                           ///< guidance-distilled models: the embedded guidance while training
  std::string method;                          ///< full | lora (the UNet's base frozen, adapters trained)
  std::string train_text_encoder;              ///< auto | none | full | lora
};

/// optimizer.adafactor (zero::AdafactorOptions carries them into the optimizer).
struct AdafactorConfig {
  std::optional<double> beta1;
  double decay_rate{};
  std::vector<double> eps;     ///< [eps1, eps2]
  double clip_threshold{};
  bool scale_parameter{}, relative_step{}, warmup_init{};
};

struct OptimizerConfig {
  std::string type;            ///< AdamW | AdamW8bit | Adafactor
  double lr{};
  std::vector<double> betas;   ///< [β1, β2]
  double eps{};
  double weight_decay{};
  std::optional<double> text_encoder_lr;  ///< trained text encoders; null: lr
  std::string master_weights;  ///< fp32 | none (bf16 weights rounded stochastically)
  bool fused_backward{};       ///< step each unit from its backward hook
  AdafactorConfig adafactor;
};

struct LoraConfig {
  std::int64_t rank{};
  std::optional<double> alpha;                    ///< null: rank (scale 1)
  double dropout{};
  /// Denoiser layers, by their paths' last components; null: the model family's default
  /// (models::lora_targets resolves it).
  std::optional<std::vector<std::string>> targets;
  std::optional<std::vector<std::string>> text_encoder_targets;  ///< text-encoder layers, likewise
  std::string init;                               ///< kaiming | gaussian
  std::string init_from;                          ///< a LoRA file whose adapters start the run ("": none)
};

struct SchedulerConfig {
  std::string type;                     ///< constant | WarmupLR | WarmupDecayLR | cosine
  std::int64_t warmup_steps{};
  double warmup_min_lr{};
  std::string warmup_type;              ///< log | linear
  std::optional<std::int64_t> total_steps;  ///< null: training.max_steps
  double min_lr{};                      ///< floor reached at the end of decay / cosine
};

struct OffloadOptimizerConfig {
  std::string device;      ///< none | cpu | nvme
  std::string nvme_path;
  bool pin_memory{};
  std::int64_t buffer_count{};
  bool delayed_update{};              ///< ZeRO-Offload's one-step delayed parameter update
  std::int64_t delayed_update_warmup{};  ///< ordinary steps before it starts
};

struct OffloadParamConfig {
  std::string device;      ///< none | cpu | nvme
  std::string nvme_path;
  bool pin_memory{};
  std::int64_t buffer_count{};
  std::int64_t buffer_size{};
  std::int64_t max_in_cpu{};
};

struct AioConfig {
  std::int64_t block_size{};
  std::int64_t queue_depth{};
  std::int64_t intra_op_parallelism{};
  bool single_submit{};
  bool overlap_events{};
};

struct ZeroConfig {
  std::int64_t stage{};
  OffloadOptimizerConfig offload_optimizer;
  OffloadParamConfig offload_param;
  std::int64_t reduce_bucket_size{};
  std::int64_t allgather_bucket_size{};
  std::optional<bool> overlap_comm;  ///< null: the ZeRO plan's default (on at every stage)
  bool contiguous_gradients{};
  std::int64_t stage3_prefetch_bucket_size{};
  std::int64_t stage3_param_persistence_threshold{};
  std::int64_t stage3_max_live_parameters{};
  std::int64_t stage3_max_reuse_distance{};
  bool stage3_gather_16bit_weights_on_model_save{};
  bool zero3_init_flag{};
  std::int64_t sub_group_size{};
  AioConfig aio;
};

struct LossScalingConfig {
  double loss_scale{};                ///< 0 = dynamic
  std::int64_t initial_scale_power{};
  std::int64_t loss_scale_window{};
  std::int64_t hysteresis{};
  double min_loss_scale{};
};

struct EmaConfig {
  bool enabled{};
  double decay{};
  std::int64_t every_n_steps{};
};

struct SamplingConfig {
  std::int64_t every_n_steps{};       ///< 0 = image logger off
  bool at_start{};                    ///< also sample before the first step
  std::vector<std::string> prompts;
  std::string negative_prompt;        ///< classifier-free guidance's unconditional prompt ("" : the empty one)
  std::int64_t images_per_prompt{};
  std::optional<std::int64_t> steps;      ///< null: the family's default (models::sampling_steps)
  std::optional<double> guidance_scale;   ///< null: the family's default (models::sampling_guidance)
  std::int64_t seed{};
  bool use_ema{};
};

struct ValidationConfig {
  std::string path;              ///< a second dataset folder; empty: none (or `fraction`)
  double fraction{};             ///< held out of the training set by a hash of the file name
  std::int64_t every_n_steps{};  ///< 0: at the last step only (and at_start, on demand)
  bool at_start{};
  std::int64_t timesteps{};      ///< fixed timesteps per item, spread over the schedule
  std::int64_t seed{};           ///< the noise of each (item, timestep)
  bool enabled() const { return !path.empty() || fraction > 0; }
};

struct CheckpointingConfig {
  std::int64_t every_n_steps{};  ///< 0 = no periodic saves
  std::int64_t keep_last{};      ///< 0 = keep all
  std::int64_t keep_best{};      ///< with keep_last: also the best K by monitor
  std::string monitor;           ///< auto | loss | val_loss
  std::int64_t overwrite_every_n_steps{};  ///< 0 = off; tag "overwrite"
  double every_n_minutes{};      ///< 0 = off
  bool on_exception{};
  std::string on_save_failure;   ///< pause | continue | stop
  double save_retry_minutes{};   ///< pause: give up after this long
};

struct LoggingConfig {
  std::int64_t every_n_steps{};
  bool tensorboard{};            ///< also write tensorboard/events.out.tfevents.*
  std::string runs_root;
  std::string run_name;
};

struct LaunchConfig {
  std::int64_t num_processes{};
  std::int64_t num_machines{};
  std::int64_t machine_rank{};
  std::string main_process_ip;
  std::int64_t main_process_port{};
  bool use_cpu{};
  std::int64_t timeout_s{};
  std::int64_t failure_grace_s{};      ///< zerostudio launch: SIGTERM to the others, then SIGKILL after this
  std::int64_t heartbeat_timeout_s{};  ///< zerostudio launch: a rank silent this long is stalled (dead)
};

/// The whole trainer configuration (one YAML file).
struct TrainerConfig {
  std::int64_t version{};
  std::string precision;  ///< fp32 | fp16 | bf16
  ModelConfig model;
  DataConfig data;
  TrainingConfig training;
  OptimizerConfig optimizer;
  LoraConfig lora;
  SchedulerConfig scheduler;
  ZeroConfig zero;
  LossScalingConfig loss_scaling;
  EmaConfig ema;
  SamplingConfig sampling;
  ValidationConfig validation;
  CheckpointingConfig checkpointing;
  LoggingConfig logging;
  LaunchConfig launch;

  /// Every key at its schema default.
  static TrainerConfig defaults();

  /// Scheduler length: scheduler.total_steps, or training.max_steps when unset.
  std::int64_t schedule_steps() const { return scheduler.total_steps.value_or(training.max_steps); }
};

/// True when every schema key has the same value in both.
bool operator==(const TrainerConfig& a, const TrainerConfig& b);

}  // namespace zs::config
