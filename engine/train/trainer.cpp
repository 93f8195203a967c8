#include "train/trainer.h"
#include "train/trainer_state.h"

#include "config/schema.h"
#include "core/memory.h"
#include "settings/value.h"
#include "train/run_directory.h"

namespace zs::train {

std::vector<std::string> resume_mismatches(const config::TrainerConfig& ckpt, const config::TrainerConfig& now) {
  std::vector<std::string> out;
  for (const auto& f : config::schema_fields()) {
    if (!f.defines_run) continue;  // the schema marks the keys that define a run
    const std::string a = config::format_value(f.get(ckpt)), b = config::format_value(f.get(now));
    if (a != b) out.push_back(f.path + ": checkpoint " + a + ", config " + b);
  }
  return out;
}

void Trainer::State::emit(const std::string& type, const json& fields) {
  if (events) {
    const json e = events->write(type, step, fields);
    if (tensorboard) {
      try {
        tensorboard->add(e);
      } catch (const std::exception& ex) {  // TensorBoard is a view: training goes on without it
        tensorboard.reset();
        emit(event::warning, {{"message", std::string("TensorBoard file no longer written: ") + ex.what()}});
      }
    }
  }
  if (rank_log.is_open() && (type == event::log || type == event::warning || type == event::error || type == event::checkpoint ||
                             type == event::run_start || type == event::run_end)) {
    rank_log << "[step " << step << "] " << type << ": " << fields.dump() << "\n";
    rank_log.flush();
  }
}

Trainer::Trainer(config::TrainerConfig config, TrainerOptions options) : s_(std::make_unique<State>()) {
  s_->cfg = std::move(config);
  s_->opt = std::move(options);
  s_->run_dir = resolve_run_dir(s_->cfg, {s_->opt.run_dir, s_->opt.resume, s_->opt.name_hint}).path;
}

Trainer::~Trainer() = default;

const std::string& Trainer::run_dir() const { return s_->run_dir; }

RunSummary Trainer::run(TrainerCommands& commands) {
  keep_freed_memory();  // every step reallocates the same buffers: keep them, not their page faults
  State& s = *s_;
  s.commands = &commands;
  s.start();
  std::string reason = "finished";
  try {
    if (s.cfg.sampling.at_start && s.step == 0) s.sample();
    if (s.cfg.validation.at_start) s.validate();  // also after a resume: the restored weights
    s.interval = {};
    while (s.step < s.cfg.training.max_steps) {
      const Requests r = s.agree_on_commands(commands);
      if (r.stop) {
        reason = "stopped";
        break;
      }
      if (r.paused) {
        s.while_paused(r);
        continue;
      }
      const StepResult done = s.train_step();
      s.report_metrics(done);
      s.sample_if_due(r);
      s.validate_if_due(r);
      if (s.save_if_due(r)) s.prune_checkpoints();
      if (s.interval.steps == 0) s.interval.start = std::chrono::steady_clock::now();  // sampling and saving stay out of throughput
    }
    s.finish(reason);
  } catch (const std::exception& e) {
    s.fail(e);
    throw;
  }
  RunSummary summary{s.run_dir, s.step, reason, s.last_loss};
  summary.last_save_failed = s.save_failure.has_value();
  if (summary.last_save_failed) summary.newest_checkpoint = s.newest_checkpoint();
  return summary;
}

}  // namespace zs::train
