#pragma once
// A model family: everything the engine must know about one kind of model, behind one interface.
// Each family lives in its own folder (models/sd/: Stable Diffusion 1.x, SDXL and the quickstart's
// tiny model) and is listed once in the registry (model_family.cpp). The trainer, validation, the
// estimator, the wizard and `model info` ask the family of a config (family_of) instead of
// testing presets, paths or component names themselves. docs/ARCHITECTURE.md, "Adding a model
// family", has the checklist of what a family provides and which tests prove it.

#include <cstdint>
#include <iosfwd>
#include <memory>
#include <string>
#include <vector>

#include "models/param_unit.h"

namespace zs::config {
struct TrainerConfig;
}
namespace zs::checkpoint {
struct CheckpointInfo;
struct ExportOptions;
struct ExportResult;
}

namespace zs::models {

struct ModelShape;
class TrainableModel;

/// How the text encoders train.
enum class TextEncoderTraining {
  frozen,  ///< no gradients; outputs may be cached (a pipeline's default)
  full,    ///< every weight trains (the tiny preset's default)
  lora,    ///< frozen weights, trained adapters (models/lora.h)
};

/// "frozen", "full" or "lora" (the estimator's and the events' names).
const char* to_string(TextEncoderTraining t);

/// What a run trains, decided once from its config (resolve_trained_parts): the trainer, the
/// optimizer's unit roster, validation, the estimator and the wizard all read this.
struct TrainedParts {
  bool lora = false;  ///< training.method lora: the denoiser's weights are a frozen base under trained adapters
  TextEncoderTraining text = TextEncoderTraining::frozen;  ///< training.train_text_encoder, auto resolved
  bool text_trained() const { return text != TextEncoderTraining::frozen; }
};

/// One unit of the optimizer's roster, known before any weight exists: the optimizer lays out
/// exactly these units in this order and the memory estimator counts exactly these.
struct RosterUnit {
  std::string name;             ///< as the optimizer, its plan and the checkpoints name it
  std::int64_t parameters = 0;  ///< elements
  bool frozen = false;          ///< laid out (and at stage 3 sharded) but not trained: a LoRA base
  bool persistent = false;      ///< stage 3 keeps it whole (small in/out layers, encoders, adapters)
  bool text_lr = false;         ///< trains at optimizer.text_encoder_lr (a text encoder or its adapters)
};

/// What the roster is made from: the denoiser's units in the model's order, the text encoders
/// by component name, and the adapters the lora section would add (per component).
struct RosterParts {
  std::vector<std::pair<std::string, std::int64_t>> denoiser;  ///< unit name, elements ("io" first)
  std::vector<std::pair<std::string, std::int64_t>> text_encoders;  ///< component name, elements
  std::int64_t denoiser_adapters = 0;                 ///< LoRA elements on the denoiser
  std::string denoiser_adapters_name;                 ///< their unit's name (SD: "lora_unet")
  std::vector<std::int64_t> text_encoder_adapters;    ///< LoRA elements per text encoder (same order)
};

/// The roster's parts of a model as the estimator describes it (its shape's units, text encoders
/// and adapter counts).
RosterParts roster_parts(const models::ModelShape& shape);

/// The optimizer's unit name of a text encoder's LoRA adapters ("lora_<component>").
std::string text_adapter_unit(const std::string& component);

/// The optimizer's units for `parts` under `trained`, in order: the denoiser's (frozen under
/// LoRA), its adapters (parts.denoiser_adapters_name), then per text encoder the whole encoder (trained in full,
/// or frozen under LoRA) and its adapters (text_adapter_unit). A frozen text encoder is no unit.
std::vector<RosterUnit> unit_roster(const RosterParts& parts, const TrainedParts& trained);

/// A model.preset value and how the wizard offers it.
struct ModelPreset {
  std::string name;   ///< model.preset's value ("sd15")
  std::string title;  ///< the wizard's choice ("Stable Diffusion 1.5 architecture")
  /// Built from the seed without model.path, small enough to train on the CPU in minutes (the
  /// wizard's demo family); the others describe an architecture for estimates until model.path
  /// names its weights.
  bool trains_without_path = false;
};

/// A full-size model as the setup questions offer it (the model page's "model_family" answer;
/// finer than the registry: SD offers SD 1.x and SDXL) and the defaults choosing it fills in, as
/// the family's ready configs in configs/ set them (config/family_defaults.h applies them).
struct WizardChoice {
  std::string id;                    ///< the model_family answer: sd1, sdxl, flux-dev, flux-schnell, qwen-image
  std::string title;                 ///< the wizard's choice ("SDXL")
  std::vector<std::string> presets;  ///< model.preset values offered as model sources, the default first
  bool folder = true;                ///< a diffusers folder is offered as a source
  bool single_file = true;           ///< a single-file checkpoint is offered (Qwen-Image reads folders only)
  std::int64_t resolution = 512;     ///< data.resolution: the side the model was trained at (pixels)
  std::string prediction_type;       ///< model.prediction_type of a DDPM family; empty: rectified flow
  std::string timestep_sampling;     ///< training.timestep_sampling of a rectified-flow family; empty: DDPM
  std::int64_t batch_size = 1;       ///< training.batch_size per process
  double lr_full = 1e-5;             ///< optimizer.lr for a full fine-tune
  double lr_lora = 1e-4;             ///< optimizer.lr for LoRA
  std::string scheduler = "constant";  ///< scheduler.type
  std::int64_t warmup_steps = 0;       ///< scheduler.warmup_steps
  /// A full-size model: a GPU run in bf16 (every ready config's precision) replaces the
  /// quickstart's CPU-only fp32 answers. Only the wizard's demo choice (the registry's
  /// trains_without_path presets) leaves the device and precision alone.
  bool full_size = true;
};

/// A config finding of a family (key: the dotted config key it is about).
struct FamilyFinding {
  std::string key;
  std::string message;
  bool warning = false;  ///< legal but probably not meant
};

class ModelFamily {
 public:
  virtual ~ModelFamily() = default;
  /// The registry's key, as docs and logs name the family ("sd").
  virtual std::string name() const = 0;
  /// The model.preset values this family builds, as the wizard offers them.
  virtual std::vector<ModelPreset> presets() const = 0;
  /// The full-size models the setup questions offer from this family, with their defaults.
  virtual std::vector<WizardChoice> wizard_choices() const = 0;
  /// The wizard choice (WizardChoice::id) of a config whose model.path this family recognizes;
  /// by default the first. May look at the folder's layout, never at weights.
  virtual std::string wizard_choice_of(const config::TrainerConfig& cfg) const {
    (void)cfg;
    return wizard_choices().front().id;
  }
  /// Whether the config's model (model.preset without model.path, or the folder or file at
  /// model.path) belongs to this family. May read the model's config files; never its weights.
  virtual bool recognizes(const config::TrainerConfig& cfg) const = 0;
  /// What training.train_text_encoder: auto means for this config's model.
  virtual TextEncoderTraining auto_text_training(const config::TrainerConfig& cfg) const = 0;
  /// LoRA's default targets on the denoiser and on the text encoders (the schema's lora.targets
  /// and lora.text_encoder_targets defaults are the SD family's; messages name the family's own).
  virtual std::vector<std::string> default_lora_targets() const = 0;
  virtual std::vector<std::string> default_text_encoder_lora_targets() const = 0;
  /// sampling.steps and sampling.guidance_scale when they are null (SD: 50 DDIM steps, CFG 7.5).
  virtual std::int64_t default_sampling_steps(const config::TrainerConfig& cfg) const {
    (void)cfg;
    return 50;
  }
  virtual double default_guidance_scale(const config::TrainerConfig& cfg) const {
    (void)cfg;
    return 7.5;
  }
  /// The estimator's description of the config's model (no weights allocated). Throws zs::Error
  /// naming the file when the model's config cannot be read.
  virtual models::ModelShape shape(const config::TrainerConfig& cfg) const = 0;
  /// The model a run of `cfg` starts from (no checkpoint): model.path's weights, or the preset's
  /// built from the seed (the tiny preset's vocabulary from `captions`). With `on_unit`, denoiser
  /// units are handed over as they are built (ZeRO-3's sharded init). Throws zs::Error naming the
  /// key or file when the model cannot be built for the config.
  virtual std::unique_ptr<TrainableModel> build(const config::TrainerConfig& cfg,
                                                const std::vector<std::string>& captions,
                                                const UnitBuilt& on_unit) const = 0;
  /// A run's model folder written by TrainableModel::save_folder, with what weights it holds.
  virtual std::unique_ptr<TrainableModel> load_folder(const std::string& dir, const UnitBuilt& on_unit) const = 0;
  /// Only the config's frozen parts (what `zerostudio cache` encodes with): no denoiser.
  virtual std::unique_ptr<TrainableModel> load_frozen(const config::TrainerConfig& cfg) const = 0;
  /// Whether `dir` holds a model folder of this family written by save_folder.
  virtual bool is_model_folder(const std::string& dir) const = 0;
  /// Whether TrainableModel::save_base wrote its weights into `dir`.
  virtual bool has_saved_base(const std::string& dir) const = 0;
  /// The folder of a diffusers pipeline that holds the denoiser's weights.
  virtual std::string denoiser_folder() const { return "transformer"; }
  /// The optimizer's roster for the config's model (unit_roster of the family's parts).
  virtual std::vector<RosterUnit> roster(const config::TrainerConfig& cfg) const;
  /// Keys that mean nothing for this family: setting one away from its schema default is a
  /// config error that says so (validation checks every key listed here).
  virtual std::vector<std::string> keys_not_applying() const { return {}; }
  /// Exports `info` (a version-2 checkpoint of a run of this family) to `out` in the layout
  /// options.format names (checkpoint/export.h). Throws zs::Error naming the checkpoint or the
  /// output, and for a format the family does not write.
  virtual checkpoint::ExportResult export_checkpoint(const checkpoint::CheckpointInfo& info, const std::string& out,
                                                     const checkpoint::ExportOptions& options) const = 0;
  /// `zerostudio model info`: what the folder or file at `path` holds (components, classes,
  /// parameter counts, dtypes, sizes), read from configs and weight-file headers only.
  virtual void describe(std::ostream& out, const std::string& path, const std::string& config_path) const = 0;
  /// `zerostudio model eval`: runs `component` of the model at `path` on the tensors (or prompts)
  /// in `inputs` and writes its outputs to `output`. Throws zs::Error naming the file or the
  /// component when one is missing.
  virtual void evaluate(const std::string& path, const std::string& config_path, const std::string& component,
                        const std::string& inputs, const std::string& output) const = 0;
  /// The family's own config rules (files its model needs, settings it cannot train with).
  virtual std::vector<FamilyFinding> check(const config::TrainerConfig& cfg) const {
    (void)cfg;
    return {};
  }
};

/// Every registered family, in the order family_of asks them.
const std::vector<const ModelFamily*>& model_families();
/// The family of the config's model: the last registered one that recognizes it (SD, registered
/// first, claims every model.path the newer families do not). Throws
/// zs::Error(config) naming model.path or model.preset when none does.
const ModelFamily& family_of(const config::TrainerConfig& cfg);
/// The family named `name` ("sd"), or nullptr.
const ModelFamily* find_family(const std::string& name);
/// Every family's presets (model.preset's values), in the registry's order.
std::vector<std::string> preset_names();
/// The presets of every family that train without model.path (ModelPreset::trains_without_path),
/// in the registry's order: the wizard's demo family.
std::vector<std::string> presets_training_without_path();

/// lora.targets, or the family's default targets when it is null.
std::vector<std::string> lora_targets(const config::TrainerConfig& cfg);
/// sampling.steps, or the family's default when it is null.
std::int64_t sampling_steps(const config::TrainerConfig& cfg);
/// sampling.guidance_scale, or the family's default when it is null.
double sampling_guidance(const config::TrainerConfig& cfg);
/// lora.text_encoder_targets, or the family's default when it is null.
std::vector<std::string> text_encoder_lora_targets(const config::TrainerConfig& cfg);

/// Whether the files at model.path can be trained from, short of reading tensor data: the family
/// found, every component's weight-file headers and shard index, its config.json and its
/// tokenizers (what `zerostudio model info` reads, ModelFamily::describe). Empty when they can
/// (or model.path is empty); else what cannot be read, naming the file. Run before a run folder
/// is created (config/trainability.h), so a broken download leaves nothing behind.
std::string model_files_problem(const config::TrainerConfig& cfg);

/// What the config's run trains: training.method and training.train_text_encoder, with auto
/// resolved by the model's family. The one place these are decided.
TrainedParts resolve_trained_parts(const config::TrainerConfig& cfg);

}  // namespace zs::models
