#pragma once
// The model families the setup questions start from (the model page's first question, asked by
// the GUI wizard and `zerostudio config init`) and the defaults that choosing one fills in, as
// the ready configs in configs/ set them. Finer than the engine's registry (models/model_family.h),
// where SD 1.x and SDXL are one ModelFamily and Flux.1 [dev] and [schnell] another: a family here
// is what a user names when asked "what do you want to train?". Each model family supplies its
// own (ModelFamily::wizard_choices); the demo family (every preset that trains without
// model.path) is the quickstart's. setup_questions.cpp applies the defaults (config::set_answer);
// docs/guide/wizard.md shows the table.

#include <cstdint>
#include <string>
#include <vector>

#include "config/setup_questions.h"
#include "models/model_family.h"

namespace zs::config {

struct TrainerConfig;

/// One family as the setup questions offer it, and what choosing it fills in: a model family's
/// own choice (models::ModelFamily::wizard_choices), or the demo of every tiny preset.
using SetupFamily = models::WizardChoice;

/// Every family, in the order the wizard lists them (the full-size ones first, the demo last).
const std::vector<SetupFamily>& setup_families();
/// The family with `id`, or nullptr.
const SetupFamily* find_setup_family(const std::string& id);
/// The family whose presets include `preset`, or nullptr.
const SetupFamily* setup_family_of_preset(const std::string& preset);

/// The family of a config's model: its preset's without model.path; with one, the preset's when
/// the registry reads the path as that preset's family (a ready config before its download),
/// otherwise the registry's family of the folder or file (SD: SDXL where the folder has
/// text_encoder_2/, SD 1.x otherwise; Flux.1: [dev]). Empty when no family reads the model.
std::string setup_family_id(const TrainerConfig& config);

/// Whether the family offers a model_source answer: one of its presets, "folder" or "file".
bool family_offers_source(const SetupFamily& family, const std::string& source);

/// Fills the family's defaults into the setup answers: model_source (kept where the family offers
/// it, else its first preset), resolution, batch_size, learning_rate (for the training_method
/// answered), lr_scheduler, warmup_steps, prediction_type or timestep_sampling, lora_targets
/// (one a line), and for a full-size family use_cpu no, machine_type multi_gpu for multi_cpu and
/// mixed_precision bf16 for no. Returns the ids of the answers it changed.
std::vector<std::string> fill_family_defaults(SetupAnswers& answers, const SetupFamily& family);

/// After training_method changed: the family's learning rate for the new method, where the
/// learning_rate answer was the family's for the other one (a rate of the user's own stays).
/// Returns {"learning_rate"} when it changed it.
std::vector<std::string> follow_training_method(SetupAnswers& answers, const SetupFamily& family);

/// LoRA's default denoiser targets for the family, one source with the trainer: its registry
/// family's default_lora_targets(). Empty for the demo family (lora.targets null: each tiny
/// model's own default).
std::vector<std::string> family_lora_targets(const SetupFamily& family);

}  // namespace zs::config
