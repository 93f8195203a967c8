#pragma once
// The setup questions, in `accelerate config`'s order followed by the training questions: one
// list that the GUI wizard and `zerostudio config init` both ask, the mapping of the answers to
// trainer keys, and their validation by the config loader (one source of truth for both).

#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "config/config_loader.h"
#include "config/problem.h"

namespace zs::config {

/// Answers by question id, as text ("2", "cpu", "yes", a path; `lines` questions: one per line).
using SetupAnswers = std::map<std::string, std::string>;

struct SetupQuestion {
  enum class Kind { choice, integer, number, text, lines, folder, file, yes_no };
  std::string id;        ///< e.g. "zero_stage"
  std::string page;      ///< page id: environment, deepspeed, processes, model, method, dataset, training, sampling, output
  std::string prompt;    ///< the question, worded as accelerate asks it where it asks it
  Kind kind = Kind::text;
  std::vector<std::pair<std::string, std::string>> choices;  ///< (answer, label) for `choice`
  std::string help;      ///< one or two sentences shown beside the question
  std::vector<std::string> keys;  ///< trainer keys the answer sets (their problems show at this question)
  bool (*asked)(const SetupAnswers&) = nullptr;  ///< null: always asked
};

/// Page ids in order, with their titles.
const std::vector<std::pair<std::string, std::string>>& setup_pages();
/// Every question, in the order they are asked.
const std::vector<SetupQuestion>& setup_questions();
/// The question with `id`; throws std::out_of_range for an unknown id.
const SetupQuestion& setup_question(const std::string& id);
/// Whether `q` is asked given the answers so far (accelerate skips some: the NVMe path only for
/// nvme, parameter offload only for stage 3, the ZeRO questions when a DeepSpeed file is given…).
bool is_asked(const SetupQuestion& q, const SetupAnswers& answers);
/// The choices `q` offers given the answers: q.choices, but model_source lists only the answered
/// family's presets and the folder or file it reads (family_defaults.h), and always the current
/// answer.
std::vector<std::pair<std::string, std::string>> question_choices(const SetupQuestion& q, const SetupAnswers& answers);

/// Sets answer `id` to `value` as a user answering it would, with what follows from it: choosing
/// another model_family fills that family's defaults (family_defaults.h: a model source of the
/// family, resolution, prediction type or timestep sampling, LoRA targets, batch size, the
/// learning rate for the training method and its schedule; for a full-size model a GPU run in
/// bf16 where the answers were the quickstart's CPU and fp32); another training_method takes the
/// family's learning rate for it where the answer was the family's for the old one; a
/// model_source preset of another family switches model_family without refilling. Returns the
/// ids of the other answers it changed (the wizard shows them; `config init` names them).
std::vector<std::string> set_answer(SetupAnswers& answers, const std::string& id, const std::string& value);

/// Puts "key=value" settings (as `--set` takes them) into the answers of the questions that carry
/// those keys (zero.stage, zero.offload_*.device, optimizer.type, optimizer.master_weights,
/// optimizer.fused_backward, training.gradient_checkpointing, training.batch_size,
/// data.resolution), turning DeepSpeed on where a ZeRO stage or offload needs it. Returns the
/// settings no question carries (for the base YAML the answers are applied on).
std::vector<std::string> set_answers_from_settings(SetupAnswers& answers, const std::vector<std::string>& settings);

/// The answers that describe `config` (every question, asked or not).
SetupAnswers answers_from_config(const TrainerConfig& config);

/// "key=value" settings (as `--set` takes them) for the questions that are asked.
std::vector<std::string> settings_from_answers(const SetupAnswers& answers);

/// The config the answers make on top of `base_yaml` (the defaults when empty): the settings,
/// plus the DeepSpeed JSON file when the answers name one (imported as `config import` does).
struct SetupResult {
  std::optional<LoadedConfig> loaded;     ///< set when there is no problem
  std::vector<ConfigProblem> problems;    ///< every problem, keyed by trainer key
  std::vector<std::string> warnings;
};
SetupResult apply_answers(const SetupAnswers& answers, const std::string& base_yaml = "version: 1\n");

/// The questions (ids) a problem belongs to: those whose keys include the problem's key, or a
/// prefix of it; the first asked question of the problem's section otherwise.
std::vector<std::string> questions_for_problem(const ConfigProblem& problem, const SetupAnswers& answers);

/// Reads a trainer YAML, an accelerate YAML (it has `distributed_type` or `compute_environment`)
/// or a DeepSpeed JSON (`.json`) into a config, as `config validate` / `config import` would.
LoadedConfig load_any_config(const std::string& path);

}  // namespace zs::config
