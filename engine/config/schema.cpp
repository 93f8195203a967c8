#include "config/schema.h"

#include <algorithm>
#include <cctype>
#include <map>

#include "models/model_family.h"
#include "zero/zero_plan.h"

namespace zs::config {

std::string_view to_string(FieldType type) {
  switch (type) {
    case FieldType::boolean: return "bool";
    case FieldType::integer: return "integer";
    case FieldType::number: return "number";
    case FieldType::string: return "string";
    case FieldType::path: return "path";
    case FieldType::choice: return "choice";
    case FieldType::string_list: return "list of strings";
    case FieldType::number_list: return "list of numbers";
    case FieldType::string_map: return "map of strings";
    case FieldType::number_map: return "map of numbers";
  }
  return "?";
}

namespace {

using Strings = std::vector<std::string>;

class SchemaBuilder {
 public:
  /// Keys added after this section start with its `defines_run` (FieldSpec::run_defining changes one).
  void section(std::string path, std::string doc, bool defines_run = false) {
    sections_.push_back({std::move(path), std::move(doc)});
    defines_run_ = defines_run;
  }

  /// `ref` is a callable TrainerConfig& -> Member&.
  template <class Ref>
  FieldSpec& add(std::string path, FieldType type, Value def, Ref ref, std::string doc, Strings choices = {}) {
    FieldSpec f;
    f.path = std::move(path);
    f.type = type;
    f.default_value = std::move(def);
    f.doc = std::move(doc);
    f.choices = std::move(choices);
    f.defines_run = defines_run_;
    f.get = [ref](const TrainerConfig& c) { return to_value(ref(const_cast<TrainerConfig&>(c))); };
    f.set = [ref](TrainerConfig& c, const Value& v) { from_value(v, ref(c)); };
    fields_.push_back(std::move(f));
    return fields_.back();
  }

  std::vector<FieldSpec> fields_;
  std::vector<SectionSpec> sections_;
  bool defines_run_ = false;
};

#define ZS_REF(member) [](TrainerConfig& c) -> auto& { return c.member; }

using T = FieldType;
using I = std::int64_t;

SchemaBuilder build() {
  SchemaBuilder s;
  s.section("", "Top-level keys.");
  s.add("version", T::integer, I{kSchemaVersion}, ZS_REF(version),
        "Schema version of this file. Older versions are migrated on load; newer ones are refused.")
      .range(1, kSchemaVersion);
  s.add("precision", T::choice, std::string("fp32"), ZS_REF(precision),
        "Compute precision. fp16 uses dynamic loss scaling (see `loss_scaling`) and needs CUDA; "
        "bf16 runs on CPU and GPU. Master weights are fp32 in every mode. `config import`: a DeepSpeed "
        "JSON's fp16/bf16 `enabled` decides; where both are \"auto\" the base config's value (--config), "
        "else fp32 — as accelerate fills them from its mixed_precision, `no` unless set, which enables "
        "neither. Without a DeepSpeed file, the accelerate YAML's mixed_precision (no → fp32).",
        {"fp32", "fp16", "bf16"});

  s.section("model", "What is trained.", /*defines_run=*/true);
  s.add("model.preset", T::choice, std::string("tiny"), ZS_REF(model.preset),
        "Architecture to build when `model.path` is empty: `tiny` (the quickstart's small pixel-space "
        "UNet with its text encoder), `flux-tiny` (the same quickstart with a small Flux.1 transformer in "
        "pixel space, trained by flow matching), `qwen-image-tiny` (the same with a small Qwen-Image "
        "transformer), `z-image-tiny` (likewise, Z-Image's), `sd15`, `sdxl`, `flux-dev`, `flux-schnell`, "
        "`qwen-image`, `z-image` or `z-image-turbo` (standard shapes, for estimates: also used by `zerostudio "
        "estimate` while `model.path` does not exist yet; with `model.path`, `z-image-turbo` samples as the "
        "distilled model does, 8 steps without guidance).",
        models::preset_names());
  s.add("model.path", T::path, std::string(""), ZS_REF(model.path),
        "A diffusers pipeline folder (with model_index.json) or a single-file checkpoint (`.safetensors` "
        "in the original layout, as A1111 and ComfyUI use; give `model.config_path` too): Stable "
        "Diffusion 1.x or SDXL, whose UNet is fine-tuned, or Flux.1 (a diffusers Flux folder, or Black "
        "Forest Labs' flux1-*.safetensors transformer), FLUX.2 [klein] or [dev] (a diffusers FLUX.2 folder, or "
        "Black Forest Labs' flux-2-*.safetensors transformer), Qwen-Image (a diffusers Qwen-Image folder) or "
        "Z-Image (a diffusers Z-Image folder, or ComfyUI's z_image*.safetensors transformer), whose transformer is; the VAE and text encoders stay frozen. Empty: build `model.preset` with fresh weights.");
  s.add("model.config_path", T::path, std::string(""), ZS_REF(model.config_path),
        "For a single-file `model.path`: a diffusers folder of the same family (SD 1.x or SDXL) whose "
        "tokenizer/ (and tokenizer_2/) are used, since single files carry no vocabulary, and whose "
        "unet/, vae/, text_encoder*/ config.json and scheduler/ are used where present (otherwise the "
        "configs are inferred from the tensor shapes, with Stable Diffusion's standard settings). A "
        "folder holding just vocab.json and merges.txt also works. For Black Forest Labs' Flux.1 "
        "transformer file: a diffusers Flux folder giving the VAE, CLIP-L, T5, their tokenizers and the "
        "scheduler (its transformer/ weights are not read); for ComfyUI's Z-Image transformer file, a diffusers "
        "Z-Image folder likewise (Qwen3, the VAE, the tokenizer, the scheduler); for Black Forest Labs' FLUX.2 "
        "transformer file, a diffusers FLUX.2 folder (its text encoder, VAE, tokenizer and scheduler, and its "
        "transformer/config.json). Ignored for diffusers folders.");
  s.add("model.vae_path", T::path, std::string(""), ZS_REF(model.vae_path),
        "Flux.1 and Z-Image: a VAE weight file used instead of the folder's vae/ weights (ComfyUI's ae.safetensors in "
        "Black Forest Labs' names, or diffusers'); its config.json still comes from the folder. Empty: the folder's.");
  s.add("model.text_encoder_path", T::path, std::string(""), ZS_REF(model.text_encoder_path),
        "Flux.1: CLIP-L's weight file used instead of the folder's text_encoder/ weights (clip_l.safetensors); "
        "Z-Image: Qwen3-4B's (ComfyUI's qwen_3_4b.safetensors). Empty: the folder's.");
  s.add("model.text_encoder_2_path", T::path, std::string(""), ZS_REF(model.text_encoder_2_path),
        "Flux.1: T5-XXL's weight file used instead of the folder's text_encoder_2/ weights (t5xxl_fp16.safetensors). "
        "Empty: the folder's.");
  s.add("model.max_sequence_length", T::integer, Value{}, ZS_REF(model.max_sequence_length),
        "Flux.1: the T5 tokens each caption is padded or cut to (FluxPipeline's max_sequence_length). "
        "null: 512 for [dev], 256 for [schnell] (as [schnell] is commonly run).")
      .allow_null().range(1, 512);
  s.add("model.base_precision", T::choice, std::string("bf16"), ZS_REF(model.base_precision),
        "How a LoRA run keeps the frozen denoiser's weights: `bf16` as they compute (the run's `precision`), "
        "or quantized — `fp8` (FP8 E4M3 with a bfloat16 scale per 64 weights along each row, as musubi-tuner's "
        "--fp8_scaled: 1.03 bytes a weight), `int8` (block-wise absmax, the same blocks: 1.03 bytes) or `nf4` "
        "(bitsandbytes' NF4, a float32 absmax per 64 weights: 0.56 bytes). Every Linear weight of the "
        "transformer blocks (attention, feed-forward, modulation) is quantized; the input and output layers, "
        "norms and biases stay in the compute dtype. Each layer is dequantized to the compute dtype while it "
        "runs, so the base stays on the card (or crosses PCIe in its quantized bytes under ZeRO-3 parameter "
        "offload). Only for `training.method: lora` (a full fine-tune trains these weights).",
        {"bf16", "fp8", "int8", "nf4"});
  s.add("model.text_encoder_precision", T::choice, std::string("bf16"), ZS_REF(model.text_encoder_precision),
        "The same for the frozen text encoders' Linear weights (T5-XXL, Qwen2.5-VL, CLIP): `bf16` as they "
        "compute, or `fp8`, `int8`, `nf4`. Only while they do not train (`training.train_text_encoder: none`).",
        {"bf16", "fp8", "int8", "nf4"});
  s.add("model.prediction_type", T::choice, std::string("epsilon"), ZS_REF(model.prediction_type),
        "Training target: the added noise (`epsilon`) or the velocity (`v_prediction`).",
        {"epsilon", "v_prediction"});

  s.section("data", "The training images and captions.", /*defines_run=*/true);
  s.add("data.path", T::path, std::string(""), ZS_REF(data.path),
        "Dataset folder (flat files, metadata JSON tree or metadata.csv). Empty: the run's `data/` "
        "folder, which only makes sense with `data.generate: shapes`.");
  s.add("data.generate", T::choice, std::string("none"), ZS_REF(data.generate),
        "`shapes`: generate the demo dataset of coloured shapes into `data.path` when that folder "
        "does not exist yet. `none`: a missing folder is an error.",
        {"none", "shapes"});
  s.add("data.generate_count", T::integer, I{2048}, ZS_REF(data.generate_count),
        "Number of images generated when `data.generate` is `shapes`.")
      .range(1, {});
  s.add("data.resolution", T::integer, I{512}, ZS_REF(data.resolution),
        "Training resolution in pixels: images are resized to cover a square of this side and center-cropped "
        "(upscaled when smaller). With `data.aspect_buckets`, the pixel budget instead: each image goes to "
        "the bucket nearest its aspect, of about resolution² pixels with sides in `bucket_step` steps, and is "
        "resized to cover it and center-cropped. DiffSynth-Studio's `--max_pixels` (default 1048576 = 1024²) "
        "is a cap, not a bucket: an image above it is scaled by sqrt(max_pixels / area) with both sides "
        "floored to multiples of 16, smaller images keep their size (never upscaled), every image its own "
        "aspect (batch 1, no buckets). The nearest setting here is `aspect_buckets: true`, `resolution: "
        "1024`, `bucket_step: 16`: the same pixel budget, but images are also upscaled and the aspect "
        "snapped to a bucket.")
      .range(8, 4096);
  s.add("data.repeats", T::integer, I{1}, ZS_REF(data.repeats),
        "Every image is seen this many times per epoch (kohya's `num_repeats`, the number before the "
        "folder name; DiffSynth-Studio's `--dataset_repeat`): an epoch is one shuffled pass over "
        "images × repeats entries.")
      .range(1, {});
  s.add("data.flip_p", T::number, 0.0, ZS_REF(data.flip_p),
        "Probability of a random horizontal flip.")
      .range(0, 1);
  s.add("data.caption_dropout", T::number, 0.1, ZS_REF(data.caption_dropout),
        "Probability of training on an empty caption, so classifier-free guidance works when sampling.")
      .range(0, 1);
  s.add("data.num_workers", T::integer, I{2}, ZS_REF(data.num_workers),
        "Background threads that decode and augment images ahead of the step.")
      .range(0, 64).run_defining(false);
  s.add("data.aspect_buckets", T::boolean, false, ZS_REF(data.aspect_buckets),
        "Aspect-ratio buckets: sizes of about resolution² pixels in `bucket_step` steps (up to 4:1); each "
        "image goes to the bucket nearest its aspect (resize, center crop) and every batch comes from one "
        "bucket. Off: square center crops.");
  s.add("data.bucket_step", T::integer, I{64}, ZS_REF(data.bucket_step),
        "Bucket sides are multiples of this many pixels (64 for Stable Diffusion: VAE × UNet down-sampling).")
      .range(8, 1024);
  s.add("data.cache_latents", T::boolean, true, ZS_REF(data.cache_latents),
        "Diffusers pipelines (`model.path`): keep each image's VAE posterior on disk, keyed by the "
        "file's content, the resolution, the flip and the VAE, and reuse it in later steps and runs.").run_defining(false);
  s.add("data.cache_text_embeddings", T::boolean, true, ZS_REF(data.cache_text_embeddings),
        "Diffusers pipelines and single files (frozen text encoders): keep each caption's text-encoder "
        "outputs on disk, keyed by the caption's text and the encoders, and reuse them in later steps "
        "and runs (in the latent cache's folder).").run_defining(false);
  s.add("data.cache_quantized_base", T::boolean, true, ZS_REF(data.cache_quantized_base),
        "With a quantized base (`model.base_precision` fp8, int8 or nf4) read from model files: keep its "
        "blocks' codes and scales on disk (in the latent cache's folder, keyed by the denoiser's weight files "
        "and the format) and read them in later runs instead of the full-precision weights, which are then "
        "left unread. Costs the quantized base's size on disk (Flux.1-dev: 11.4 GiB fp8, 6.2 GiB nf4).")
      .run_defining(false);
  s.add("data.latent_cache_dir", T::path, std::string(""), ZS_REF(data.latent_cache_dir),
        "Folder of the latent, text-embedding and quantized-base caches. Empty: `.latent-cache` under `logging.runs_root` "
        "(the installed program: `$XDG_CACHE_HOME/zerostudio/latents`).").run_defining(false);
  s.add("data.allow_external_paths", T::boolean, false, ZS_REF(data.allow_external_paths),
        "Read images that resolve outside the dataset folder (after symlinks): an absolute or `..` path in "
        "`metadata/*.json` or metadata.csv, or an `images/` that is a symlink elsewhere. Off: such items are "
        "skipped with a warning, so a downloaded dataset cannot make the trainer read other files.");

  s.section("data.metadata", "Options of the metadata-JSON layout: `metadata/**/*.json` files with "
            "`tags`, `score` and `path` (relative to the dataset folder), as in the Lightning SD trainer.", /*defines_run=*/true);
  s.add("data.metadata.consider_every_nth", T::integer, I{1}, ZS_REF(data.metadata.consider_every_nth),
        "Use only every nth JSON file (in sorted order); 1 uses all. Handy for a validation subset.")
      .range(1, {});
  s.add("data.metadata.shuffle_tag_p", T::number, 0.0, ZS_REF(data.metadata.shuffle_tag_p),
        "Probability that an example's tags are shuffled before they are joined into its caption.")
      .range(0, 1);
  s.add("data.metadata.blacklist_tags", T::string_list, Strings{}, ZS_REF(data.metadata.blacklist_tags),
        "Images with any of these tags are left out.");
  s.add("data.metadata.non_caption_tags", T::string_list, Strings{}, ZS_REF(data.metadata.non_caption_tags),
        "Tags that say nothing about the picture; they are left out of the caption.");
  s.add("data.metadata.replacements", T::string_map, StringMap{}, ZS_REF(data.metadata.replacements),
        "Substring replacements applied to every tag, in order (e.g. `'princess luna': luna`, `' ': '_'`).");
  s.add("data.metadata.tag_separator", T::string, std::string(", "), ZS_REF(data.metadata.tag_separator),
        "Text between tags in the caption.");
  s.add("data.metadata.abs_min_score", T::number, Value{}, ZS_REF(data.metadata.abs_min_score),
        "Images scoring below this are left out at once. null: no limit.")
      .allow_null();
  s.add("data.metadata.min_score", T::number, Value{}, ZS_REF(data.metadata.min_score),
        "Images whose score plus their tags' `tag_bonus_scores` is below this are left out. null: no limit.")
      .allow_null();
  s.add("data.metadata.score_tags", T::number_list, std::vector<double>{}, ZS_REF(data.metadata.score_tags),
        "Score thresholds: an image scoring above T gets the tag `scrT` for the highest such T.");
  s.add("data.metadata.tag_bonus_scores", T::number_map, StringMap{}, ZS_REF(data.metadata.tag_bonus_scores),
        "Score added per tag before the `min_score` test (negative values lower it).");

  s.section("training", "The training loop.");
  s.add("training.max_steps", T::integer, I{1000}, ZS_REF(training.max_steps),
        "Number of optimizer steps (each one `gradient_accumulation_steps` micro batches). Ignored "
        "when `training.epochs` is set (that derives the steps; a value other than the default then "
        "draws a warning).")
      .range(1, {});
  s.add("training.epochs", T::integer, Value{}, ZS_REF(training.epochs),
        "Train for this many epochs instead of `max_steps` (kohya's `max_train_epochs`, "
        "DiffSynth-Studio's `--num_epochs`). The steps are epochs × ceil(images × data.repeats / "
        "(batch_size × processes × gradient_accumulation_steps)), as kohya's sd-scripts count them: "
        "a partial last batch or step of an epoch counts as a whole one and is filled with the epoch's "
        "first images again. With `data.aspect_buckets` each bucket's partial batch counts so. null: "
        "`max_steps` decides.")
      .allow_null().range(1, {});
  s.add("training.batch_size", T::integer, I{1}, ZS_REF(training.batch_size),
        "Micro batch per process (DeepSpeed's `train_micro_batch_size_per_gpu`).")
      .range(1, {}).run_defining();
  s.add("training.gradient_accumulation_steps", T::integer, I{1}, ZS_REF(training.gradient_accumulation_steps),
        "Micro batches whose gradients are summed before each optimizer step; ranks communicate "
        "only on the last one.")
      .range(1, {});
  s.add("training.train_batch_size", T::integer, Value{}, ZS_REF(training.train_batch_size),
        "DeepSpeed's global batch. null: derived. When set it must equal batch_size × "
        "gradient_accumulation_steps × launch.num_processes.")
      .allow_null().range(1, {});
  s.add("training.gradient_clipping", T::number, 0.0, ZS_REF(training.gradient_clipping),
        "Clip the global gradient norm (over all shards and ranks) to this value; 0 turns clipping off.")
      .range(0, {});
  s.add("training.seed", T::integer, I{42}, ZS_REF(training.seed),
        "Seed for weights, data order, noise and dropout; the same seed gives the same run.")
      .range(0, {}).run_defining();
  s.add("training.gradient_checkpointing", T::boolean, false, ZS_REF(training.gradient_checkpointing),
        "Recompute each UNet unit (resnet, transformer, sampler) in backward instead of keeping its "
        "activations: the same gradients, about half the activation memory, one more forward's time.");
  s.add("training.cpu_checkpointing", T::boolean, false, ZS_REF(training.cpu_checkpointing),
        "With gradient_checkpointing: the unit inputs kept for the rerun wait in CPU memory (pinned, "
        "copied on the compute stream) instead of on the device, and come back for each unit's "
        "backward (DeepSpeed's activation_checkpointing.cpu_checkpointing). The same gradients; "
        "the metrics' checkpointed_inputs say where those bytes are.");
  s.add("training.attention", T::choice, std::string("auto"), ZS_REF(training.attention),
        "How attention runs. plain: keeps the tokens × tokens probabilities for backward (fastest "
        "on short sequences). blocked: queries and keys in blocks with an online softmax, "
        "recomputed in backward, so memory grows with the tokens, not their square (SDXL at 1024 px: "
        "4,096-token self-attention). auto: LibTorch 2.x's fused kernel on CUDA, else blocked where "
        "queries and keys both number 1,024 or more, plain otherwise. The run log says which ran.",
        {"auto", "plain", "blocked"});
  s.add("training.min_snr_gamma", T::number, 0.0, ZS_REF(training.min_snr_gamma),
        "Min-SNR-γ loss weighting (5 is typical); 0 turns it off.")
      .range(0, {});
  s.add("training.timestep_sampling", T::choice, std::string("shift"), ZS_REF(training.timestep_sampling),
        "Flow-matching families (Flux.1): how training draws σ. uniform: U(0, 1). sigmoid: "
        "sigmoid(`sigmoid_scale` · N(0, 1)) (ai-toolkit, SimpleTuner). logit_normal: sigmoid(N(`logit_mean`, "
        "`logit_std`)) (SD3's paper). shift: sigmoid as above, then shifted for the image's token count "
        "exactly as the model's scheduler shifts its sampling sigmas (sd-scripts' `flux_shift`), so "
        "training sees the noise levels sampling visits.",
        {"uniform", "sigmoid", "logit_normal", "shift"});
  s.add("training.sigmoid_scale", T::number, 1.0, ZS_REF(training.sigmoid_scale),
        "timestep_sampling sigmoid and shift: the scale of the normal draw (sd-scripts' --sigmoid_scale).")
      .range(0, {});
  s.add("training.logit_mean", T::number, 0.0, ZS_REF(training.logit_mean),
        "timestep_sampling logit_normal: the mean of the normal draw.");
  s.add("training.logit_std", T::number, 1.0, ZS_REF(training.logit_std),
        "timestep_sampling logit_normal: the standard deviation of the normal draw.")
      .range(0, {});
  s.add("training.guidance", T::number, 1.0, ZS_REF(training.guidance),
        "Guidance-distilled models (Flux.1 [dev]): the guidance value the transformer embeds while "
        "training. 1.0 as SimpleTuner and ai-toolkit train and sd-scripts' Flux docs advise (its "
        "script and diffusers' DreamBooth script default to 3.5): the run then learns the plain "
        "conditional prediction, and sampling still embeds `sampling.guidance_scale`.")
      .range(0, {});
  s.add("training.method", T::choice, std::string("full"), ZS_REF(training.method),
        "full: every UNet weight trains. lora: the UNet's weights stay frozen and low-rank adapters "
        "on the layers `lora.targets` names train instead (the `lora` section); checkpoints then hold "
        "the adapters (and any trained text encoder) and refer to the base model by path and hash.",
        {"full", "lora"}).run_defining();
  s.add("training.train_text_encoder", T::choice, std::string("auto"), ZS_REF(training.train_text_encoder),
        "The text encoders (SD 1.x's one, SDXL's two, together). auto: the quickstart's own tiny "
        "encoder trains in full, a pipeline's encoders stay frozen. none: frozen. full: every weight "
        "trains (as optimizer units like the UNet's: sharded, offloaded, checkpointed). lora: "
        "adapters on `lora.text_encoder_targets`. A trained encoder's outputs are not cached "
        "(data.cache_text_embeddings applies to frozen encoders only).",
        {"auto", "none", "full", "lora"}).run_defining();

  s.section("optimizer", "The optimizer. Every type is sharded by zero.stage, offloaded to CPU memory by "
                         "zero.offload_optimizer and kept with fp32 master weights under bf16/fp16.", /*defines_run=*/true);
  s.add("optimizer.type", T::choice, std::string("AdamW"), ZS_REF(optimizer.type),
        "AdamW: fp32 moments, 8 bytes a trained parameter (+ 4 for the fp32 master weights under bf16/fp16). "
        "AdamW8bit: AdamW with both moments kept in 8 bits as bitsandbytes' AdamW8bit keeps them (block-wise "
        "dynamic quantization, blocks of 256, one float32 scale a block): ~2 bytes a parameter; units "
        "below 4096 elements keep 32-bit moments (bitsandbytes' min_8bit_size, here per unit, not per tensor). "
        "Adafactor: transformers' Adafactor (the `optimizer.adafactor` keys): a matrix keeps one row and one "
        "column statistic (O + I values for O × I), a 3 × 3 convolution two thirds of its size, a vector its "
        "size; with `optimizer.adafactor.beta1` also a first moment. `optimizer.betas` and `optimizer.eps` "
        "are AdamW's and AdamW8bit's; `optimizer.weight_decay` applies to all three. With NVMe offload "
        "(zero.offload_optimizer.device: nvme) AdamW's state streams through in sub-groups; the other two "
        "bring each unit's whole state into CPU memory for its step (two units' at a time), Adafactor's "
        "row and column statistics staying in memory.",
        {"AdamW", "AdamW8bit", "Adafactor"});
  s.add("optimizer.lr", T::number, 1e-4, ZS_REF(optimizer.lr),
        "Peak learning rate (after warmup).")
      .range(0, {}).run_defining(false);
  s.add("optimizer.betas", T::number_list, std::vector<double>{0.9, 0.999}, ZS_REF(optimizer.betas),
        "Adam's β1 and β2 (AdamW, AdamW8bit).")
      .range(0, 1).size(2);
  s.add("optimizer.eps", T::number, 1e-8, ZS_REF(optimizer.eps),
        "Adam's ε (AdamW, AdamW8bit).")
      .range(0, {});
  s.add("optimizer.weight_decay", T::number, 1e-2, ZS_REF(optimizer.weight_decay),
        "Decoupled weight decay.")
      .range(0, {});
  s.add("optimizer.master_weights", T::choice, std::string("fp32"), ZS_REF(optimizer.master_weights),
        "fp32: under bf16/fp16 the optimizer keeps fp32 master weights (4 bytes a parameter) and the model "
        "computes with a bf16/fp16 copy (DeepSpeed's mixed precision). none (precision: bf16 only): only the "
        "bf16 weights exist; each update is computed in float32 and rounded to bf16 stochastically (up or down "
        "with the probability of the remainder, seeded by training.seed, the unit and the step: the same on "
        "every rank and after a resume), as OneTrainer's stochastic rounding and SimpleTuner's adamw_bf16 do. "
        "Saves 4 bytes a parameter; the optimizer state stays float32.",
        {"fp32", "none"});
  s.add("optimizer.fused_backward", T::boolean, false, ZS_REF(optimizer.fused_backward),
        "Step each ZeRO unit as soon as its reduced gradients exist, during backward (on the last micro-batch), "
        "and from zero.stage 2 on free its gradient memory at once, so no full set of gradients ever exists "
        "(kohya's --fused_backward_pass, OneTrainer's fused back pass). With gradient accumulation each unit's "
        "gradients accumulate in its own buffer (its reduced part) and the step happens on the last micro-batch. "
        "training.gradient_clipping then scales each step's gradients by the previous step's global norm "
        "(the current one is known only after every unit has stepped; the first step is not clipped), where "
        "the unfused step scales by the current norm. Not with precision fp16 (loss scaling must see every "
        "gradient first) nor with NVMe optimizer offload. A non-finite gradient is found after the update.");
  s.add("optimizer.text_encoder_lr", T::number, Value{}, ZS_REF(optimizer.text_encoder_lr),
        "Peak learning rate of trained text encoders (full or LoRA); the schedule shapes it as "
        "`lr`. null: `lr`. Text encoders usually want less than the UNet (kohya: `--text_encoder_lr`).")
      .allow_null().range(0, {}).run_defining(false);

  s.section("optimizer.adafactor", "Adafactor's own settings (optimizer.type: Adafactor), as transformers' "
                                   "Adafactor names them.", /*defines_run=*/true);
  s.add("optimizer.adafactor.beta1", T::number, Value{}, ZS_REF(optimizer.adafactor.beta1),
        "Adafactor's first-moment decay. null: no first moment (transformers' default; kohya's and "
        "OneTrainer's too).")
      .allow_null().range(0, 1);
  s.add("optimizer.adafactor.decay_rate", T::number, -0.8, ZS_REF(optimizer.adafactor.decay_rate),
        "The second moment's decay at step t is 1 − t^decay_rate (transformers' default −0.8).")
      .range({}, 0);
  s.add("optimizer.adafactor.eps", T::number_list, std::vector<double>{1e-30, 1e-3}, ZS_REF(optimizer.adafactor.eps),
        "transformers' eps pair: added to the squared gradient, and the floor of the parameter scale "
        "(scale_parameter).")
      .range(0, {}).size(2);
  s.add("optimizer.adafactor.clip_threshold", T::number, 1.0, ZS_REF(optimizer.adafactor.clip_threshold),
        "Each tensor's update is scaled down to an RMS of at most this.")
      .range(0, {});
  s.add("optimizer.adafactor.scale_parameter", T::boolean, false, ZS_REF(optimizer.adafactor.scale_parameter),
        "Multiply the learning rate by max(eps[1], RMS of the tensor). Off as kohya's sd-scripts "
        "(docs/train_network: relative_step=False scale_parameter=False warmup_init=False) and OneTrainer "
        "set it for diffusion fine-tuning with an explicit learning rate; transformers' default is on.");
  s.add("optimizer.adafactor.relative_step", T::boolean, false, ZS_REF(optimizer.adafactor.relative_step),
        "Ignore optimizer.lr and step by min(1e-2, 1/√t) (transformers' default; off as kohya and OneTrainer "
        "set it). Needs scheduler.type: constant (the schedule would not be followed).");
  s.add("optimizer.adafactor.warmup_init", T::boolean, false, ZS_REF(optimizer.adafactor.warmup_init),
        "With relative_step: min(1e-6·t, 1/√t).");

  s.section("lora", "LoRA adapters (training.method: lora, training.train_text_encoder: lora): a layer "
                    "computes W·x + (alpha/rank)·up(down(x)) with W frozen.", /*defines_run=*/true);
  s.add("lora.rank", T::integer, I{16}, ZS_REF(lora.rank),
        "Rank of every adapter (kohya's `network_dim`, peft's `r`).")
      .range(1, {});
  s.add("lora.alpha", T::number, Value{}, ZS_REF(lora.alpha),
        "The adapters' scale is alpha / rank. null: rank (scale 1, as diffusers' training scripts). "
        "kohya's sd-scripts default to 1 (scale 1/rank); exports carry the value either way.")
      .allow_null().range(0, {});
  s.add("lora.dropout", T::number, 0.0, ZS_REF(lora.dropout),
        "Dropout on each adapter's input while training.")
      .range(0, 1);
  s.add("lora.targets", T::string_list, Value{}, ZS_REF(lora.targets),
        "Denoiser layers that get adapters, by the last components of their diffusers paths. null: the "
        "model family's default — SD's UNet: the attention projections `to_q`, `to_k`, `to_v`, `to_out.0` "
        "(kohya's default); Flux.1's transformer: those, `add_q_proj`, `add_k_proj`, `add_v_proj`, "
        "`to_add_out` and the feed-forwards' `ff.net.0.proj`, `ff.net.2`, `ff_context.net.0.proj`, "
        "`ff_context.net.2` (diffusers' train_dreambooth_lora_flux.py). Also e.g. `proj_in`, `proj_out`, "
        "`conv1`, `conv2`, `conv_shortcut` (SD's resnets: LoCon), or a longer path such as `attn2.to_k`. "
        "A target that selects no layer is refused by name.")
      .allow_null();
  s.add("lora.text_encoder_targets", T::string_list, Value{}, ZS_REF(lora.text_encoder_targets),
        "Text-encoder layers that get adapters (train_text_encoder: lora). null: the family's default, "
        "CLIP's attention projections `q_proj`, `k_proj`, `v_proj`, `out_proj`; also `fc1`, `fc2` (the MLPs).")
      .allow_null();
  s.add("lora.init", T::choice, std::string("kaiming"), ZS_REF(lora.init),
        "How adapters start; `up` starts at zero either way, so training starts from the base model. "
        "kaiming: `down` Kaiming-uniform (a = √5), as kohya's sd-scripts and peft's default. "
        "gaussian: `down` ~ N(0, 1/rank), as peft's `init_lora_weights=\"gaussian\"`.",
        {"kaiming", "gaussian"});
  s.add("lora.init_from", T::path, std::string(""), ZS_REF(lora.init_from),
        "A LoRA file whose adapters start the run instead of `lora.init` (continuing a LoRA trained "
        "elsewhere: DiffSynth-Studio's `--lora_checkpoint`, kohya's `--network_weights`). Qwen-Image reads "
        "DiffSynth-Studio's files (`transformer_blocks.0.attn.to_q.lora_A.default.weight`, also without "
        "`.default` and with a `diffusion_model.` prefix), diffusers' (`transformer.` prefix) and "
        "musubi-tuner's (`lora_unet_transformer_blocks_0_attn_to_q.lora_down.weight`, `.alpha`); each "
        "adapter's scale is kept (alpha/rank, or 1 where the file folds it into lora_B). Every tensor must "
        "name a layer `lora.targets` adapts, at `lora.rank`; a file for another model is refused naming its "
        "first foreign key. Ignored when resuming (the checkpoint has the adapters).");

  s.section("scheduler", "Learning-rate schedule (DeepSpeed's names).");
  s.add("scheduler.type", T::choice, std::string("constant"), ZS_REF(scheduler.type),
        "`constant`; `WarmupLR` (warm up, then hold); `WarmupDecayLR` (warm up, then linear decay to "
        "`min_lr` at `total_steps`); `cosine` (warm up, then cosine to `min_lr`).",
        {"constant", "WarmupLR", "WarmupDecayLR", "cosine"});
  s.add("scheduler.warmup_steps", T::integer, I{0}, ZS_REF(scheduler.warmup_steps),
        "Steps from `warmup_min_lr` up to `optimizer.lr` (DeepSpeed's `warmup_num_steps`).")
      .range(0, {});
  s.add("scheduler.warmup_min_lr", T::number, 0.0, ZS_REF(scheduler.warmup_min_lr),
        "Learning rate at step 0 of the warmup.")
      .range(0, {});
  s.add("scheduler.warmup_type", T::choice, std::string("log"), ZS_REF(scheduler.warmup_type),
        "Warmup curve, as DeepSpeed: `log` or `linear`.", {"log", "linear"});
  s.add("scheduler.total_steps", T::integer, Value{}, ZS_REF(scheduler.total_steps),
        "Length of the schedule. null: `training.max_steps`. Set it to stop a run early or extend "
        "it without changing its schedule.")
      .allow_null().range(1, {});
  s.add("scheduler.min_lr", T::number, 0.0, ZS_REF(scheduler.min_lr),
        "Learning rate reached at the end of `WarmupDecayLR` and `cosine`.")
      .range(0, {});

  s.section("zero", "ZeRO sharding and offload, with DeepSpeed's key names and defaults.");
  s.add("zero.stage", T::integer, I{0}, ZS_REF(zero.stage),
        "0: replicate everything, all-reduce gradients; 1: shard optimizer states; 2: also shard "
        "gradients; 3: also shard parameters.")
      .range(0, 3);
  s.section("zero.offload_optimizer", "Where the rank's fp32 master weights and Adam moments live (stages 1–3).");
  s.add("zero.offload_optimizer.device", T::choice, std::string("none"), ZS_REF(zero.offload_optimizer.device),
        "`none` (compute device), `cpu` (optimizer step on the CPU, fused AdamW) or `nvme` (files under "
        "`nvme_path`, streamed in `sub_group_size` pieces; stages 1–3, where DeepSpeed allows only 3).",
        {"none", "cpu", "nvme"});
  s.add("zero.offload_optimizer.nvme_path", T::path, std::string(""), ZS_REF(zero.offload_optimizer.nvme_path),
        "Folder for optimizer-state files when `device` is `nvme`; must exist and be writable.");
  s.add("zero.offload_optimizer.pin_memory", T::boolean, false, ZS_REF(zero.offload_optimizer.pin_memory),
        "Read for DeepSpeed compatibility: ZeroStudio page-locks the CPU copies whenever CUDA is present.");
  s.add("zero.offload_optimizer.buffer_count", T::integer, I{4}, ZS_REF(zero.offload_optimizer.buffer_count),
        "Staging buffers of the NVMe sub-group pipeline (at least 3 are used: the read of the next "
        "sub-group, the update of this one and the write of the previous one overlap).")
      .range(1, {});
  s.add("zero.offload_optimizer.delayed_update", T::boolean, false, ZS_REF(zero.offload_optimizer.delayed_update),
        "One-step delayed parameter update (ZeRO-Offload's DPU): after `delayed_update_warmup` ordinary steps, the "
        "CPU computes step t's update on its own thread while the GPU runs step t+1, and the update goes into the "
        "weights at the end of step t+1. What it changes: every update lands one step late, so step t+1's "
        "gradients are taken at weights that lack step t's update (one step of staleness, as in asynchronous "
        "SGD); the optimizer's moments still see every gradient in order. Samples, validation and the EMA follow "
        "the weights the device holds (one update behind the fp32 masters); checkpoints keep both and resume "
        "exactly, and their weights (what exports read) are the masters, with the last update. When: the optimizer is in CPU "
        "memory and its step takes a large part of each iteration (large models, few GPUs, a slow host); after "
        "the warm-up, when the weights move slowly. Not for very short runs or tiny learning-rate schedules "
        "where one step matters. Needs `device: cpu`, AdamW or AdamW8bit, fp32 master weights, no fused_backward; "
        "holds a second fp32 gradient part in CPU memory (4 bytes a parameter per rank's part).");
  s.add("zero.offload_optimizer.delayed_update_warmup", T::integer, I{40},
        ZS_REF(zero.offload_optimizer.delayed_update_warmup),
        "Ordinary steps before the delayed update starts (the first steps move the weights most).")
      .range(0, {});
  s.section("zero.offload_param", "Where parameter shards live (stage 3 only).");
  s.add("zero.offload_param.device", T::choice, std::string("none"), ZS_REF(zero.offload_param.device),
        "`none`, `cpu` or `nvme`. Only with stage 3; each unit's shard is brought in when the unit "
        "is gathered, the next one prefetched.", {"none", "cpu", "nvme"});
  s.add("zero.offload_param.nvme_path", T::path, std::string(""), ZS_REF(zero.offload_param.nvme_path),
        "Folder for parameter files when `device` is `nvme`; must exist and be writable.");
  s.add("zero.offload_param.pin_memory", T::boolean, false, ZS_REF(zero.offload_param.pin_memory),
        "Read for DeepSpeed compatibility: ZeroStudio page-locks the CPU copies whenever CUDA is present.");
  s.add("zero.offload_param.buffer_count", T::integer, I{5}, ZS_REF(zero.offload_param.buffer_count),
        "Read for DeepSpeed compatibility; not used (each unit's shard has its own aligned buffer).")
      .range(1, {});
  s.add("zero.offload_param.buffer_size", T::integer, I{100000000}, ZS_REF(zero.offload_param.buffer_size),
        "Read for DeepSpeed compatibility; not used (buffers are sized per unit).")
      .range(1, {});
  s.add("zero.offload_param.max_in_cpu", T::integer, I{1000000000}, ZS_REF(zero.offload_param.max_in_cpu),
        "Read for DeepSpeed compatibility; not used (with NVMe every shard lives in the file).")
      .range(0, {});
  s.add("zero.reduce_bucket_size", T::integer, I{500000000}, ZS_REF(zero.reduce_bucket_size),
        "Elements reduced (stage 0–1) or reduce-scattered (stage 2–3) at a time during backward.")
      .range(1, {});
  s.add("zero.allgather_bucket_size", T::integer, I{500000000}, ZS_REF(zero.allgather_bucket_size),
        "Elements all-gathered at a time after the optimizer step (stages 1–2).")
      .range(1, {});
  s.add("zero.overlap_comm", T::boolean, Value{}, ZS_REF(zero.overlap_comm),
        "Reduce each unit's gradients while backward goes on. null: on at every stage (measured: stage 0 of a "
        "54 M-parameter UNet on 2 ranks went from 1275 to 734 ms per step; DeepSpeed's default is on for stage 3 only).")
      .allow_null();
  s.add("zero.contiguous_gradients", T::boolean, true, ZS_REF(zero.contiguous_gradients),
        "Copy gradients into one contiguous buffer as they are produced.");
  s.add("zero.stage3_prefetch_bucket_size", T::integer, I{50000000}, ZS_REF(zero.stage3_prefetch_bucket_size),
        "Stage 3: parameter elements gathered ahead of use.")
      .range(0, {});
  s.add("zero.stage3_param_persistence_threshold", T::integer, I{zero::kDefaultPersistenceThreshold},
        ZS_REF(zero.stage3_param_persistence_threshold),
        "Stage 3: parameters with fewer elements stay whole on every rank.")
      .range(0, {});
  s.add("zero.stage3_max_live_parameters", T::integer, I{1000000000}, ZS_REF(zero.stage3_max_live_parameters),
        "Stage 3: most gathered parameter elements alive at once.")
      .range(1, {});
  s.add("zero.stage3_max_reuse_distance", T::integer, I{1000000000}, ZS_REF(zero.stage3_max_reuse_distance),
        "Stage 3: keep a gathered unit when it is used again within this many elements.")
      .range(0, {});
  s.add("zero.stage3_gather_16bit_weights_on_model_save", T::boolean, false,
        ZS_REF(zero.stage3_gather_16bit_weights_on_model_save),
        "Stage 3: also write consolidated 16-bit weights with each checkpoint (accelerate's `zero3_save_16bit_model`).");
  s.add("zero.zero3_init_flag", T::boolean, false, ZS_REF(zero.zero3_init_flag),
        "Stage 3: build the model straight into shards (DeepSpeed's zero.Init): each UNet unit is "
        "loaded (or initialised) and cut to this process's shard before the next one exists, so no "
        "process ever holds the whole model. Off: every process first builds the whole UNet in fp32 "
        "in CPU memory (one copy per process on a machine); the device gets it one unit at a time "
        "either way. The run is the same; `zerostudio estimate` shows the CPU memory while loading. "
        "With `training.method: lora` the frozen base read from `model.path` is built into shards too "
        "(a preset's base is built whole: the run's model folder keeps it for the adapter checkpoints).");
  s.add("zero.sub_group_size", T::integer, I{1000000000}, ZS_REF(zero.sub_group_size),
        "Optimizer-state elements processed per sub-group when offloading to NVMe.")
      .range(1, {});
  s.section("zero.aio", "Asynchronous I/O for NVMe offload (DeepSpeed's `aio`).");
  s.add("zero.aio.block_size", T::integer, I{1048576}, ZS_REF(zero.aio.block_size),
        "Bytes per I/O request.")
      .range(4096, {});
  s.add("zero.aio.queue_depth", T::integer, I{8}, ZS_REF(zero.aio.queue_depth),
        "I/O requests in flight.")
      .range(1, {});
  s.add("zero.aio.intra_op_parallelism", T::integer, I{1}, ZS_REF(zero.aio.intra_op_parallelism),
        "I/O threads per request (formerly `thread_count`).")
      .range(1, {});
  s.add("zero.aio.single_submit", T::boolean, false, ZS_REF(zero.aio.single_submit),
        "Submit requests one at a time instead of in batches.");
  s.add("zero.aio.overlap_events", T::boolean, true, ZS_REF(zero.aio.overlap_events),
        "Overlap submitting and completing requests.");

  s.section("loss_scaling", "Dynamic loss scaling for fp16 (DeepSpeed's `fp16` keys).");
  s.add("loss_scaling.loss_scale", T::number, 0.0, ZS_REF(loss_scaling.loss_scale),
        "Static loss scale; 0 means dynamic.")
      .range(0, {});
  s.add("loss_scaling.initial_scale_power", T::integer, I{16}, ZS_REF(loss_scaling.initial_scale_power),
        "The dynamic scale starts at 2^this.")
      .range(0, 64);
  s.add("loss_scaling.loss_scale_window", T::integer, I{1000}, ZS_REF(loss_scaling.loss_scale_window),
        "Steps without overflow before the scale doubles.")
      .range(1, {});
  s.add("loss_scaling.hysteresis", T::integer, I{2}, ZS_REF(loss_scaling.hysteresis),
        "Overflows tolerated before the scale is lowered.")
      .range(1, {});
  s.add("loss_scaling.min_loss_scale", T::number, 1.0, ZS_REF(loss_scaling.min_loss_scale),
        "Lowest dynamic scale.")
      .range(0, {});

  s.section("ema", "Exponential moving average of the weights, kept on the CPU (sharded under ZeRO).");
  s.add("ema.enabled", T::boolean, false, ZS_REF(ema.enabled), "Keep an EMA copy of the trained weights.");
  s.add("ema.decay", T::number, 0.9999, ZS_REF(ema.decay), "EMA decay per update.").range(0, 1);
  s.add("ema.every_n_steps", T::integer, I{1}, ZS_REF(ema.every_n_steps),
        "Update the EMA every N optimizer steps (the decay is applied N times' worth).")
      .range(1, {});

  s.section("sampling", "The image logger: sample images every N steps.");
  s.add("sampling.every_n_steps", T::integer, I{500}, ZS_REF(sampling.every_n_steps),
        "Sample every N optimizer steps; 0 turns the image logger off.")
      .range(0, {});
  s.add("sampling.at_start", T::boolean, false, ZS_REF(sampling.at_start),
        "Also sample before the first step.");
  s.add("sampling.prompts", T::string_list, Strings{}, ZS_REF(sampling.prompts),
        "Prompts to sample, in order.");
  s.add("sampling.negative_prompt", T::string, std::string(""), ZS_REF(sampling.negative_prompt),
        "The prompt of classifier-free guidance's unconditional branch (diffusers' `negative_prompt`; "
        "Qwen-Image's pipeline with `true_cfg_scale`). Empty: the empty prompt. Encoded and cached like "
        "captions (`zerostudio cache` stores it when set). Unused where no classifier-free guidance "
        "runs (guidance_scale 1; Flux.1 [dev], which embeds the guidance).");
  s.add("sampling.images_per_prompt", T::integer, I{1}, ZS_REF(sampling.images_per_prompt),
        "Images per prompt, each with its own fixed seed.")
      .range(1, 64);
  s.add("sampling.steps", T::integer, Value{}, ZS_REF(sampling.steps),
        "Sampling steps (DDIM for Stable Diffusion, FlowMatch Euler for Flux.1). null: the family's "
        "default (SD: 50; Flux.1 [dev] 28, [schnell] 4, as FluxPipeline). Schema version 1 called it "
        "`ddim_steps`; such files are migrated.")
      .allow_null().range(1, 1000);
  s.add("sampling.guidance_scale", T::number, Value{}, ZS_REF(sampling.guidance_scale),
        "Guidance scale. Stable Diffusion and models without a guidance embedding: classifier-free "
        "guidance (1 turns it off). Flux.1 [dev]: the distilled guidance value the transformer embeds "
        "(no classifier-free guidance runs). null: the family's default (SD 7.5; Flux.1 [dev] 3.5, "
        "FluxPipeline's; [schnell] 1, no guidance).")
      .allow_null().range(0, {});
  s.add("sampling.seed", T::integer, I{0}, ZS_REF(sampling.seed),
        "Seed of the first image; image k uses seed + k.")
      .range(0, {});
  s.add("sampling.use_ema", T::boolean, false, ZS_REF(sampling.use_ema),
        "Sample with the EMA weights (needs `ema.enabled`).");

  s.section("validation", "A held-out loss, comparable across steps and runs: each validation item is "
            "evaluated at `timesteps` fixed timesteps spread over the schedule, with fixed noise per item and "
            "timestep, without caption dropout, flips or min-SNR weighting, and without touching the training "
            "random state. With EMA on, the EMA weights are evaluated too.");
  s.add("validation.path", T::path, std::string(""), ZS_REF(validation.path),
        "A second dataset folder (any layout `data.path` accepts) to validate on. Empty: none, or `fraction`.");
  s.add("validation.fraction", T::number, 0.0, ZS_REF(validation.fraction),
        "Hold this share of `data.path` out of training to validate on, chosen by a hash of each file's "
        "path in the dataset, so the split is the same on every run and rank.")
      .range(0, 0.5).run_defining();
  s.add("validation.every_n_steps", T::integer, I{0}, ZS_REF(validation.every_n_steps),
        "Validate every N optimizer steps; 0: at the last step only (plus `at_start` and Run > Validate now).")
      .range(0, {});
  s.add("validation.at_start", T::boolean, false, ZS_REF(validation.at_start),
        "Also validate before training starts: a baseline, and after a resume the restored weights.");
  s.add("validation.timesteps", T::integer, I{4}, ZS_REF(validation.timesteps),
        "Timesteps per item, at the middles of equal slices of the schedule (4 of 1000: 125, 375, 625, 875).")
      .range(1, 100);
  s.add("validation.seed", T::integer, I{0}, ZS_REF(validation.seed),
        "Seed of the validation noise (each item and timestep draws from its own generator).")
      .range(0, {});

  s.section("checkpointing", "When checkpoints are written.");
  s.add("checkpointing.every_n_steps", T::integer, I{500}, ZS_REF(checkpointing.every_n_steps),
        "Save every N optimizer steps; 0 turns periodic saving off.")
      .range(0, {});
  s.add("checkpointing.keep_last", T::integer, I{0}, ZS_REF(checkpointing.keep_last),
        "Keep only the newest K periodic and timed checkpoints (with the `keep_best` ones); 0 keeps all.")
      .range(0, {});
  s.add("checkpointing.keep_best", T::integer, I{0}, ZS_REF(checkpointing.keep_best),
        "With `keep_last`: also keep the K periodic and timed checkpoints with the best `monitor` value.")
      .range(0, {});
  s.add("checkpointing.monitor", T::choice, std::string("auto"), ZS_REF(checkpointing.monitor),
        "Metric for `keep_best` (lower is better): `loss`, the smoothed training loss; `val_loss`, the newest "
        "validation loss at the checkpoint's step; `auto`: `val_loss` when a validation set is configured, "
        "else `loss`.", {"auto", "loss", "val_loss"});
  s.add("checkpointing.overwrite_every_n_steps", T::integer, I{0}, ZS_REF(checkpointing.overwrite_every_n_steps),
        "Also save every N steps into one checkpoint, `overwrite`, that each such save replaces (a "
        "frequent one to resume from after a crash, without filling the disk); 0 turns it off.")
      .range(0, {});
  s.add("checkpointing.every_n_minutes", T::number, 0.0, ZS_REF(checkpointing.every_n_minutes),
        "Also save when this many minutes have passed since the last save; 0 turns it off.")
      .range(0, {});
  s.add("checkpointing.on_exception", T::boolean, true, ZS_REF(checkpointing.on_exception),
        "Save when training stops on an error or a stop request (one process; with several ranks "
        "the last complete checkpoint stands after an error).");
  s.add("checkpointing.on_save_failure", T::choice, std::string("pause"), ZS_REF(checkpointing.on_save_failure),
        "When a checkpoint cannot be saved (a full disk, a rank that cannot write; older checkpoints stay "
        "intact): `pause` waits, every rank, saying what to free, retries every minute and on Save now, "
        "and goes on once it is saved (it gives up after `save_retry_minutes`); `stop` ends the run at "
        "once; `continue` trains on. A run that ends without its newest checkpoint exits with code 3 "
        "and names the newest saved one.",
        {"pause", "continue", "stop"});
  s.add("checkpointing.save_retry_minutes", T::number, 60.0, ZS_REF(checkpointing.save_retry_minutes),
        "With `on_save_failure: pause`: how long to keep retrying a failed save before the run ends (exit "
        "code 3), so batch jobs do not idle to their wall time.")
      .range(0, {});

  s.section("logging", "Metrics and where runs go.");
  s.add("logging.every_n_steps", T::integer, I{10}, ZS_REF(logging.every_n_steps),
        "Write a metrics event every N optimizer steps.")
      .range(1, {});
  s.add("logging.tensorboard", T::boolean, true, ZS_REF(logging.tensorboard),
        "Also write the run's metrics, validation losses, sample grids and config as a TensorBoard event "
        "file in `tensorboard/` of the run folder (rank 0; flushed at every logging step, so `tensorboard "
        "--logdir runs` follows live runs).");
  s.add("logging.runs_root", T::path, std::string("runs"), ZS_REF(logging.runs_root),
        "Folder that holds run directories (relative paths resolve against the current folder). The "
        "installed program (a package) reads the default `runs` as `~/ZeroStudio/runs`.");
  s.add("logging.run_name", T::string, std::string(""), ZS_REF(logging.run_name),
        "Name of the run directory; empty: the config file's name and the start time.");

  s.section("launch", "Processes and machines, with `accelerate launch`'s names.");
  s.add("launch.num_processes", T::integer, I{1}, ZS_REF(launch.num_processes),
        "Total processes (ranks) over all machines.")
      .range(1, 4096);
  s.add("launch.num_machines", T::integer, I{1}, ZS_REF(launch.num_machines),
        "Machines taking part.")
      .range(1, 1024);
  s.add("launch.machine_rank", T::integer, I{0}, ZS_REF(launch.machine_rank),
        "This machine's index, 0 for the main one.")
      .range(0, {});
  s.add("launch.main_process_ip", T::string, std::string("127.0.0.1"), ZS_REF(launch.main_process_ip),
        "Address of the machine with rank 0 (MASTER_ADDR).");
  s.add("launch.main_process_port", T::integer, I{29500}, ZS_REF(launch.main_process_port),
        "TCP port of the rendezvous store on the main machine (MASTER_PORT) when several machines take part: "
        "the others must reach it (open it in a firewall between them). One machine opens no port: its ranks "
        "meet through a file in a private folder.")
      .range(1, 65535);
  s.add("launch.use_cpu", T::boolean, false, ZS_REF(launch.use_cpu),
        "Train on the CPU even where CUDA is present.");
  s.add("launch.timeout_s", T::integer, I{300}, ZS_REF(launch.timeout_s),
        "Seconds a rendezvous or collective may wait before every rank stops with an error.")
      .range(1, {});
  s.add("launch.failure_grace_s", T::integer, I{10}, ZS_REF(launch.failure_grace_s),
        "zerostudio launch: when a rank ends abnormally (a signal, or an error), the other ranks get SIGTERM at "
        "once and this many seconds to write their logs; then what is left is killed, so a dead rank ends the "
        "whole run within seconds, as torchrun does. Ranks started by torchrun or srun stop when a collective "
        "times out (launch.timeout_s).")
      .range(1, {});
  s.add("launch.heartbeat_timeout_s", T::integer, I{60}, ZS_REF(launch.heartbeat_timeout_s),
        "zerostudio launch: a rank whose heartbeat (sent twice a second by a thread of its own) stops for this "
        "many seconds is stalled (stopped, frozen, swapped out) and is treated as dead: it is killed and the run "
        "ends as for any dead rank.")
      .range(1, {});
  return s;
}

#undef ZS_REF

const SchemaBuilder& built() {
  static const SchemaBuilder s = build();
  return s;
}

size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t sub = prev[j - 1] + (std::tolower(a[i - 1]) == std::tolower(b[j - 1]) ? 0 : 1);
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, sub});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

std::string_view last_segment(std::string_view path) {
  const auto dot = path.rfind('.');
  return dot == std::string_view::npos ? path : path.substr(dot + 1);
}

}  // namespace

const std::vector<FieldSpec>& schema_fields() { return built().fields_; }
const std::vector<SectionSpec>& schema_sections() { return built().sections_; }

const FieldSpec* find_field(std::string_view path) {
  for (const auto& f : schema_fields())
    if (f.path == path) return &f;
  return nullptr;
}

bool is_section(std::string_view path) {
  for (const auto& s : schema_sections())
    if (!s.path.empty() && s.path == path) return true;
  return false;
}

std::string format_bound(const FieldSpec& field, double bound) {
  return field.type == FieldType::integer ? std::to_string(static_cast<std::int64_t>(bound)) : format_double(bound);
}

std::vector<std::string> suggest_paths(std::string_view path) {
  // Score every known path by the distance of the whole path and of the last
  // segment alone, so both "zero.stag" and "training.stage" find "zero.stage".
  std::multimap<size_t, std::string> scored;
  auto consider = [&](const std::string& candidate) {
    const size_t whole = edit_distance(path, candidate);
    const size_t leaf = edit_distance(last_segment(path), last_segment(candidate)) + 1;
    const size_t best = std::min(whole, leaf);
    const size_t limit = std::max<size_t>(2, last_segment(path).size() / 3);
    if (best <= limit) scored.emplace(best, candidate);
  };
  for (const auto& f : schema_fields()) consider(f.path);
  for (const auto& s : schema_sections())
    if (!s.path.empty()) consider(s.path);
  std::vector<std::string> out;
  for (const auto& [score, candidate] : scored) {
    if (std::find(out.begin(), out.end(), candidate) == out.end()) out.push_back(candidate);
    if (out.size() == 3) break;
  }
  return out;
}

}  // namespace zs::config
