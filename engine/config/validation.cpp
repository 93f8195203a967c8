#include "config/validation.h"

#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "config/schema.h"
#include "models/model_family.h"
#include "zero/zero_rules.h"

namespace zs::config {

namespace fs = std::filesystem;

std::string check_writable_folder(const std::string& dir) {
  std::error_code ec;
  if (!fs::exists(dir, ec)) return "folder '" + dir + "' does not exist; create it or choose another";
  if (!fs::is_directory(dir, ec)) return "'" + dir + "' is not a folder";
  // Create a probe file rather than ask access(): it also catches read-only mounts,
  // and root passes access() checks that a real write would fail.
  std::string probe = (fs::path(dir) / ".zerostudio-write-test-XXXXXX").string();
  const int fd = ::mkstemp(probe.data());
  if (fd < 0) return "folder '" + dir + "' is not writable; check its permissions or choose another";
  ::close(fd);
  ::unlink(probe.c_str());
  return "";
}

namespace {

class RuleSet {
 public:
  RuleSet(const LoadedConfig& loaded, std::vector<std::string>* warnings) : loaded_(loaded), warnings_(warnings) {}

  void fail(const std::string& key, const std::string& message) {
    problems_.push_back({loaded_.location_of(key), key, message});
  }

  void warn(const std::string& key, const std::string& message) {
    if (warnings_) warnings_->push_back(ConfigProblem{loaded_.location_of(key), key, message}.to_string());
  }

  std::vector<ConfigProblem> take() { return std::move(problems_); }

 private:
  const LoadedConfig& loaded_;
  std::vector<std::string>* warnings_;
  std::vector<ConfigProblem> problems_;
};

std::string num(std::int64_t v) { return std::to_string(v); }

void check_offload(const TrainerConfig& c, RuleSet& rules) {
  const auto stage = c.zero.stage;
  if (c.zero.offload_param.device != "none" && stage != 3)
    rules.fail("zero.offload_param.device",
               "parameter offload works with zero.stage 3 only (zero.stage is " + num(stage) +
                   "); set zero.stage: 3 or zero.offload_param.device: none");
  if (c.zero.offload_optimizer.device != "none" && stage == 0)
    rules.fail("zero.offload_optimizer.device",
               "optimizer offload needs zero.stage 1, 2 or 3 (zero.stage is 0); stage 1 is the cheapest that allows it");
  struct Nvme {
    const std::string& device;
    const std::string& path;
    std::string key;
  };
  for (const Nvme& n : {Nvme{c.zero.offload_optimizer.device, c.zero.offload_optimizer.nvme_path, "zero.offload_optimizer"},
                        Nvme{c.zero.offload_param.device, c.zero.offload_param.nvme_path, "zero.offload_param"}}) {
    if (n.device != "nvme") continue;
    if (n.path.empty()) {
      rules.fail(n.key + ".nvme_path", "offload to nvme needs a folder here (a fast local disk with free space)");
    } else if (auto why = check_writable_folder(n.path); !why.empty()) {
      rules.fail(n.key + ".nvme_path", why);
    }
  }
}

void check_batch(const TrainerConfig& c, RuleSet& rules) {
  if (!c.training.train_batch_size) return;
  const auto& t = c.training;
  const std::int64_t product = t.batch_size * t.gradient_accumulation_steps * c.launch.num_processes;
  if (*t.train_batch_size != product)
    rules.fail("training.train_batch_size",
               "train_batch_size " + num(*t.train_batch_size) + " must equal training.batch_size " + num(t.batch_size) +
                   " x training.gradient_accumulation_steps " + num(t.gradient_accumulation_steps) +
                   " x launch.num_processes " + num(c.launch.num_processes) + " = " + num(product) +
                   "; fix one of them or remove train_batch_size");
}

void check_schedule(const TrainerConfig& c, RuleSet& rules) {
  const auto& s = c.scheduler;
  const bool decays = s.type == "WarmupDecayLR" || s.type == "cosine";
  // training.epochs decides the length (train::run_steps); max_steps is then not read. Every
  // written config carries max_steps, so only a value other than the default is worth a word.
  const bool by_epochs = c.training.epochs.has_value();
  if (by_epochs && c.training.max_steps != TrainerConfig::defaults().training.max_steps)
    rules.warn("training.max_steps", "training.max_steps " + num(c.training.max_steps) +
                                         " is ignored: training.epochs " + num(*c.training.epochs) +
                                         " decides the run's length (set training.epochs: null to train by steps)");
  // A short test run of a long config (--set training.max_steps=20) is legitimate: warn only.
  // By epochs the length needs the dataset, so the check waits for the trainer.
  if (s.type != "constant" && (!by_epochs || s.total_steps) && s.warmup_steps >= c.schedule_steps())
    rules.warn("scheduler.warmup_steps",
               "warmup (" + num(s.warmup_steps) + " steps) is not shorter than the schedule (" + num(c.schedule_steps()) +
                   " steps, scheduler.total_steps or training.max_steps): the whole run stays in warmup");
  const auto& af = c.optimizer.adafactor;
  if (c.optimizer.type == "Adafactor" && af.relative_step && (s.type != "constant" || s.warmup_steps > 0))
    rules.fail("optimizer.adafactor.relative_step", "computes its own learning rate, so scheduler.type " + s.type +
                                                        " would not be followed: use scheduler.type: constant without "
                                                        "warmup, or relative_step: false (then optimizer.lr is used)");
  // The engine's own rules (zero_rules.h): ZeroOptimizer refuses the same combinations.
  zero::RuleSettings engine;
  engine.optimizer = zero::find_optimizer(c.optimizer.type).value_or(zero::OptimizerType::adamw);  // the schema names a bad type
  engine.compute = zero::precision_from_name(c.precision);
  engine.master_weights = c.optimizer.master_weights != "none";
  engine.fused_backward = c.optimizer.fused_backward;
  engine.delayed_update = c.zero.offload_optimizer.delayed_update;
  engine.offload_optimizer = zero::offload_from_name(c.zero.offload_optimizer.device);
  for (const zero::OptionProblem& p : zero::option_problems(engine)) rules.fail(p.key, p.message);
  if (af.warmup_init && !af.relative_step)
    rules.fail("optimizer.adafactor.warmup_init", "needs optimizer.adafactor.relative_step: true (transformers refuses it too)");
  if (s.type != "constant" && s.warmup_min_lr > c.optimizer.lr)
    rules.fail("scheduler.warmup_min_lr", "must not exceed optimizer.lr (the peak learning rate)");
  if (decays && s.min_lr > c.optimizer.lr)
    rules.fail("scheduler.min_lr", "must not exceed optimizer.lr (the peak learning rate)");
}

void check_data(const TrainerConfig& c, RuleSet& rules) {
  if (c.data.resolution % 8 != 0)
    rules.fail("data.resolution", "must be a multiple of 8 (got " + num(c.data.resolution) + ")");
  std::error_code ec;
  if (c.data.generate == "none" && !c.data.path.empty() && !fs::is_directory(c.data.path, ec))
    rules.fail("data.path", "folder '" + c.data.path + "' does not exist; choose the dataset folder (or set "
                            "data.generate: shapes to generate the demo dataset there)");
}

void check_validation(const TrainerConfig& c, RuleSet& rules) {
  if (!c.validation.path.empty() && c.validation.fraction > 0)
    rules.fail("validation.fraction", "validation.path is set too; validate on a second folder (validation.path) or "
                                      "on a held-out share of data.path (validation.fraction), not both");
  if (c.checkpointing.monitor == "val_loss" && !c.validation.enabled())
    rules.fail("checkpointing.monitor", "val_loss needs a validation set; set validation.path or validation.fraction, "
                                        "or monitor: auto");
}

void check_model(const TrainerConfig& c, RuleSet& rules) {
  // The model's family decides what applies to it and what its files need.
  const models::ModelFamily* family = nullptr;
  try {
    family = &models::family_of(c);
  } catch (const Error& e) {
    rules.fail(c.model.path.empty() ? "model.preset" : "model.path", e.what());
    return;
  }
  for (const auto& key : family->keys_not_applying()) {
    const FieldSpec* field = find_field(key);
    if (field && field->get(c) != field->default_value)
      rules.fail(key, "does not apply to " + family->name() + " models; remove it (or set it back to its default)");
  }
  for (const auto& f : family->check(c)) {
    if (f.warning) rules.warn(f.key, f.message);
    else rules.fail(f.key, f.message);
  }
}

void check_lora(const TrainerConfig& c, RuleSet& rules) {
  models::TrainedParts trained;
  try {
    trained = models::resolve_trained_parts(c);
  } catch (const Error&) {
    return;  // no family: check_model said so
  }
  const bool te_trained = trained.text_trained();
  auto listed = [](const std::vector<std::string>& names) {
    std::string out;
    for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
    return out;
  };
  const models::ModelFamily& family = models::family_of(c);
  if (trained.lora && c.lora.targets && c.lora.targets->empty())
    rules.fail("lora.targets", "training.method is lora but no layer is named; leave it null for the default (" +
                                   listed(family.default_lora_targets()) + ") or name the layers that get adapters");
  if (trained.text == models::TextEncoderTraining::lora && c.lora.text_encoder_targets &&
      c.lora.text_encoder_targets->empty())
    rules.fail("lora.text_encoder_targets", "training.train_text_encoder is lora but no layer is named; leave it "
                                            "null for the default (" + listed(family.default_text_encoder_lora_targets()) + ")");
  // A quantized copy is a frozen weight's storage: what trains stays in full precision.
  if (c.model.base_precision != "bf16" && !trained.lora)
    rules.fail("model.base_precision", c.model.base_precision + " stores frozen weights, but training.method is " +
                                           c.training.method + " (the denoiser's weights train); use training.method: "
                                           "lora, or model.base_precision: bf16");
  if (c.model.text_encoder_precision != "bf16" && te_trained)
    rules.fail("model.text_encoder_precision",
               c.model.text_encoder_precision + " stores frozen weights, but the text encoders train "
               "(training.train_text_encoder: " + c.training.train_text_encoder +
               "); set training.train_text_encoder: none, or model.text_encoder_precision: bf16");
  if (c.optimizer.text_encoder_lr && !te_trained)
    rules.warn("optimizer.text_encoder_lr", "no text encoder trains (training.train_text_encoder: " +
                                                c.training.train_text_encoder + "), so this learning rate is unused");
  if (te_trained && !c.model.path.empty() && c.data.cache_text_embeddings)
    rules.warn("data.cache_text_embeddings", "the text encoders train (training.train_text_encoder: " +
                                                 c.training.train_text_encoder +
                                                 "), so their outputs change every step and are not cached");
}

void check_launch(const TrainerConfig& c, RuleSet& rules) {
  const auto& l = c.launch;
  if (l.machine_rank >= l.num_machines)
    rules.fail("launch.machine_rank", "must be below launch.num_machines (" + num(l.num_machines) + "); ranks count from 0");
  if (l.num_processes % l.num_machines != 0)
    rules.fail("launch.num_processes", "total processes (" + num(l.num_processes) +
                                           ") must be a multiple of launch.num_machines (" + num(l.num_machines) + ")");
}

}  // namespace

std::vector<ConfigProblem> validate(const LoadedConfig& loaded, std::vector<std::string>* warnings) {
  RuleSet rules(loaded, warnings);
  const TrainerConfig& c = loaded.config;
  check_offload(c, rules);
  check_batch(c, rules);
  check_schedule(c, rules);
  check_data(c, rules);
  check_validation(c, rules);
  check_model(c, rules);
  check_launch(c, rules);
  check_lora(c, rules);
  if (c.sampling.use_ema && !c.ema.enabled)
    rules.fail("sampling.use_ema", "sampling with EMA weights needs ema.enabled: true");
  return rules.take();
}

}  // namespace zs::config
