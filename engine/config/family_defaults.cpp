#include "config/family_defaults.h"

#include <algorithm>
#include <sstream>
#include <stdexcept>
#include <system_error>

#include "core/error.h"
#include "models/model_family.h"
#include "settings/trainer_config.h"

namespace zs::config {
namespace {

std::vector<SetupFamily> make_families() {
  // The registry's families in its order, each with its own choices; then the demo: every preset
  // that trains without model.path, with quickstart.yaml's settings (16 px, v_prediction for the
  // DDPM ones, shift sampling for the flow ones, batch 32, lr 1e-3, cosine after 100 warmup steps).
  std::vector<SetupFamily> out;
  for (const models::ModelFamily* f : models::model_families())
    for (auto& choice : f->wizard_choices()) out.push_back(std::move(choice));
  out.push_back({"demo", "Tiny demo models (train on the CPU in minutes)", models::presets_training_without_path(), false,
                 false, 16, "v_prediction", "shift", 32, 1e-3, 1e-3, "cosine", 100, false});
  return out;
}

/// The registry's family name of a preset ("sd", "flux", "qwen-image").
std::string registry_family(const std::string& preset) {
  TrainerConfig c;
  c.model.preset = preset;
  return models::family_of(c).name();
}

std::string answer_of(const SetupAnswers& a, const std::string& id) {
  const auto it = a.find(id);
  return it == a.end() ? std::string() : it->second;
}

/// A rate as answers_from_config writes it ("1e-05").
std::string rate_text(double v) {
  std::ostringstream s;
  s << v;
  return s.str();
}

}  // namespace

const std::vector<SetupFamily>& setup_families() {
  static const std::vector<SetupFamily> families = make_families();
  return families;
}

const SetupFamily* find_setup_family(const std::string& id) {
  for (const auto& f : setup_families())
    if (f.id == id) return &f;
  return nullptr;
}

const SetupFamily* setup_family_of_preset(const std::string& preset) {
  for (const auto& f : setup_families())
    for (const auto& p : f.presets)
      if (p == preset) return &f;
  return nullptr;
}

std::string setup_family_id(const TrainerConfig& c) {
  const SetupFamily* by_preset = setup_family_of_preset(c.model.preset);
  if (c.model.path.empty()) return by_preset ? by_preset->id : std::string();
  const models::ModelFamily* family = nullptr;
  try {
    family = &models::family_of(c);
  } catch (const Error&) {
    return by_preset ? by_preset->id : std::string();
  }
  // A ready config names its folder before the download: the preset says which of the family's.
  if (by_preset && by_preset->full_size && registry_family(by_preset->presets.front()) == family->name())
    return by_preset->id;
  return family->wizard_choice_of(c);
}

std::vector<std::string> family_lora_targets(const SetupFamily& family) {
  if (!family.full_size) return {};
  TrainerConfig c;
  c.model.preset = family.presets.front();
  return models::family_of(c).default_lora_targets();
}

bool family_offers_source(const SetupFamily& f, const std::string& source) {
  if (source == "folder") return f.folder;
  if (source == "file") return f.single_file;
  return std::find(f.presets.begin(), f.presets.end(), source) != f.presets.end();
}

std::vector<std::string> fill_family_defaults(SetupAnswers& a, const SetupFamily& f) {
  std::vector<std::string> changed;
  auto put = [&](const std::string& id, const std::string& v) {
    if (answer_of(a, id) == v) return;
    a[id] = v;
    changed.push_back(id);
  };
  if (!family_offers_source(f, answer_of(a, "model_source"))) put("model_source", f.presets.front());
  put("resolution", std::to_string(f.resolution));
  put("batch_size", std::to_string(f.batch_size));
  put("learning_rate", rate_text(answer_of(a, "training_method") == "lora" ? f.lr_lora : f.lr_full));
  put("lr_scheduler", f.scheduler);
  put("warmup_steps", std::to_string(f.warmup_steps));
  if (!f.prediction_type.empty()) put("prediction_type", f.prediction_type);
  if (!f.timestep_sampling.empty()) put("timestep_sampling", f.timestep_sampling);
  std::string targets;
  for (const auto& t : family_lora_targets(f)) targets += t + "\n";
  put("lora_targets", targets);
  if (f.full_size) {
    // The quickstart's CPU-only fp32 answers are the tiny model's; a full-size model trains on
    // GPUs in bf16. Answers the user changed from those stay.
    if (answer_of(a, "machine_type") == "no" && answer_of(a, "use_cpu") == "yes") put("use_cpu", "no");
    if (answer_of(a, "machine_type") == "multi_cpu") put("machine_type", "multi_gpu");
    if (answer_of(a, "mixed_precision") == "no") put("mixed_precision", "bf16");
  }
  return changed;
}

std::vector<std::string> follow_training_method(SetupAnswers& a, const SetupFamily& f) {
  const bool lora = answer_of(a, "training_method") == "lora";
  double rate = -1;
  try {
    rate = std::stod(answer_of(a, "learning_rate"));
  } catch (const std::exception&) {
  }
  const double now = lora ? f.lr_lora : f.lr_full;
  if (rate != (lora ? f.lr_full : f.lr_lora) || rate == now) return {};
  a["learning_rate"] = rate_text(now);
  return {"learning_rate"};
}

}  // namespace zs::config
