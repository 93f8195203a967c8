// The steps of Trainer::run's loop, on the trainer's state.
#include <zlib.h>

#include <cmath>
#include <thread>

#include <ATen/ATen.h>

#include "checkpoint/checkpoint_meta.h"
#include "checkpoint/sharded_save.h"
#include "checkpoint/sharded_state.h"
#include "comm/communicator.h"
#include "config/config_writer.h"
#include "core/error.h"
#include "core/memory.h"
#include "models/activation_checkpoint.h"
#include "models/attention.h"
#include "settings/value.h"
#include "train/image_logger.h"
#include "train/rank_figures.h"
#include "train/sample_generator.h"
#include "train/trainer_state.h"
#include "train/validation_set.h"

namespace zs::train {

namespace {

/// CRC-32 of the config's YAML: tells whether two checkpoints were made by the same config.
std::string config_hash(const config::TrainerConfig& cfg) {
  const std::string yaml = config::to_yaml(cfg);
  char buf[16];
  std::snprintf(buf, sizeof buf, "%08lx", crc32(0L, reinterpret_cast<const Bytef*>(yaml.data()), static_cast<uInt>(yaml.size())));
  return buf;
}

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace

Requests Trainer::State::agree_on_commands(TrainerCommands& commands) {
  if (control) control->poll(commands);
  Requests r;
  r.stop = commands.stop_requested();
  r.paused = commands.paused();
  r.sample = commands.take_sample_request();
  r.save = commands.take_save_request();
  r.validate = commands.take_validate_request();
  const double minutes = cfg.checkpointing.every_n_minutes;
  r.timed_save = minutes > 0 && seconds_since(last_save) >= minutes * 60;
  const auto now = std::chrono::steady_clock::now();
  r.retry_save = retry_at && now >= *retry_at;
  r.give_up_save = give_up_at && now >= *give_up_at;
  if (world > 1) {
    bool* const fields[] = {&r.stop,   &r.sample,     &r.save,         &r.timed_save,
                            &r.paused, &r.retry_save, &r.give_up_save, &r.validate};
    std::vector<float> values;
    for (const bool* f : fields) values.push_back(*f ? 1.0f : 0.0f);
    at::Tensor flags = at::tensor(values);
    comm->all_reduce(flags);
    for (std::size_t i = 0; i < values.size(); ++i) *fields[i] = flags[static_cast<std::int64_t>(i)].item<float>() > 0;
  }
  if (!r.stop && r.paused != was_paused) {
    was_paused = r.paused;
    if (main_rank()) emit(r.paused ? event::paused : event::resumed, json::object());
  }
  return r;
}

void Trainer::State::while_paused(const Requests& r) {
  // Every rank waits here and meets the others at the next agreement (one small all-reduce per
  // wait, far inside the collective timeout); sample and save still work.
  if (r.sample) sample();
  if (r.validate) validate();
  if (r.save && save_by_policy("requested")) prune_checkpoints();
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  interval.start = std::chrono::steady_clock::now();
}

StepResult Trainer::State::train_step() {
  const auto started = std::chrono::steady_clock::now();
  if (opt.fail_at && opt.fail_at->first == rank && opt.fail_at->second == step + 1)
    throw Error(ErrorKind::data, "rank " + std::to_string(rank) + ": failure injected at step " + std::to_string(step + 1) +
                                     " (ZEROSTUDIO_FAIL_AT)");
  if (steps_done_here == 0) models::reset_attention_paths_used();  // the first step says which paths ran
  StepResult done;
  done.lr = lr->lr(step);
  const std::int64_t accum = cfg.training.gradient_accumulation_steps;
  optimizer->zero_grad();
  optimizer->prepare_fused_step(done.lr, cfg.training.gradient_clipping);  // (fused_backward: units step during backward)
  for (std::int64_t micro = 0; micro < accum; ++micro) {
    optimizer->set_last_micro_step(micro == accum - 1);
    const data::Batch batch = loader->next();
    ++batches_consumed;
    // Every random draw of a sample (its latent, noise and timestep) comes from its own generator,
    // seeded by the global batch and the sample's place in it: one rank accumulating two
    // micro-batches draws exactly what two ranks draw, and a resumed run what it would have drawn.
    const at::Tensor images = batch.images.to(device);  // one copy to the device for the batch
    const std::int64_t n = images.size(0);
    const bool keyed = static_cast<std::int64_t>(batch.keys.size()) == n;
    std::vector<at::Tensor> x0s, noises, ts;
    for (std::int64_t j = 0; j < n; ++j) {
      at::Generator g = sample_generator(cfg.training.seed, batch.index, j);
      const std::vector<std::string> key = keyed ? std::vector<std::string>{batch.keys[static_cast<std::size_t>(j)]}
                                                 : std::vector<std::string>{};
      x0s.push_back(model->to_model_space(images.narrow(0, j, 1), g, latent_cache.get(),
                                          keyed ? &key : nullptr));  // latents for pipelines
      noises.push_back(at::randn(x0s.back().sizes(), g));
      ts.push_back(objective->sample_timesteps(x0s.back().sizes(), g));
    }
    const at::Tensor x0 = at::cat(x0s);
    const at::Tensor noise = at::cat(noises).to(device);
    const at::Tensor t = at::cat(ts).to(device);
    const models::TextConditioning cond = model->condition(batch.captions, device, text_cache.get());
    const at::Tensor pred = model->predict(objective->add_noise(x0, noise, t), t, cond, batch.geometry);
    const at::Tensor per_sample = objective->loss(pred, x0, noise, t);  // [B]
    const at::Tensor loss = (per_sample * objective->weights(t, cfg.training.min_snr_gamma)).mean();
    const double scale = scaler ? scaler->scale() : 1.0;
    (loss * (scale / static_cast<double>(accum))).backward();
    if (opt.after_backward) opt.after_backward(step + 1, rank, model->named_parameters());
    done.loss += loss.item<double>() / static_cast<double>(accum);
  }
  // Gradients meet only after the last micro-batch (ZeRO: all-reduce or reduce-scatter).
  optimizer->reduce_gradients();
  if (world > 1) {
    at::Tensor l = at::full({1}, done.loss, at::kDouble);
    comm->all_reduce(l);
    done.loss = l.item<double>() / world;
  }
  if (scaler) {
    // Loss scaling: an inf/NaN gradient on any rank skips the step on every rank.
    const double scale = scaler->scale();
    done.skipped = optimizer->unscale_and_check_overflow(1.0 / scale) || !std::isfinite(done.loss);
    scaler->update(done.skipped);
    if (done.skipped) {
      optimizer->skip_step();
      emit(event::overflow, {{"loss_scale", scale}, {"next_loss_scale", scaler->scale()}, {"skipped_steps", scaler->skipped()}});
      if (scaler->stuck())
        throw Error(ErrorKind::data, "gradients overflow at the lowest loss scale (" + std::to_string(scale) +
                                         ", loss_scaling.min_loss_scale) at step " + std::to_string(step + 1) +
                                         "; lower optimizer.lr, enable gradient clipping or use precision: bf16");
    }
  } else if (!std::isfinite(done.loss)) {
    throw Error(ErrorKind::data, "the loss became " + std::to_string(done.loss) + " at step " + std::to_string(step + 1) +
                                     "; lower optimizer.lr or enable gradient clipping");
  }
  if (!done.skipped) {
    done.grad_norm = optimizer->clip_grad_norm(cfg.training.gradient_clipping);
    optimizer->step(done.lr);
  }
  ++step;
  ++steps_done_here;
  last_loss = done.loss;
  if (!done.skipped) smoothed.add(done.loss);
  if (cfg.ema.enabled && step % cfg.ema.every_n_steps == 0) optimizer->update_ema();
  done.seconds = seconds_since(started);
  if (steps_done_here == 1)
    log("attention (training.attention: " + cfg.training.attention + "): " + models::attention_paths_used());
  return done;
}

void Trainer::State::report_metrics(const StepResult& done) {
  if (!done.skipped) {
    interval.loss += done.loss;
    interval.norm += done.grad_norm;
    ++interval.good_steps;
  }
  ++interval.steps;
  if (opt.on_step) opt.on_step(step, cfg.training.max_steps, done.loss, done.seconds);
  if (step % cfg.logging.every_n_steps != 0 && step != cfg.training.max_steps) return;
  const double secs = seconds_since(interval.start);
  const std::int64_t accum = cfg.training.gradient_accumulation_steps;
  json metrics = {{"loss", interval.good_steps > 0 ? interval.loss / interval.good_steps : done.loss},
                  {"loss_smoothed", smoothed.value()},
                  {"lr", done.lr},
                  {"grad_norm", interval.good_steps > 0 ? interval.norm / interval.good_steps : 0.0},
                  {"samples_per_s", secs > 0 ? interval.steps * accum * cfg.training.batch_size * world / secs : 0.0},
                  {"s_per_step", secs / interval.steps},
                  {"epoch", static_cast<double>(batches_consumed * world) / loader->batches_per_epoch()},
                  {"ranks", gather_ranks()}};
  if (scaler) {
    metrics["loss_scale"] = scaler->scale();
    metrics["skipped_steps"] = scaler->skipped();
  }
  emit(event::metrics, metrics);
  interval = {};
}

json Trainer::State::gather_ranks() {
  const auto gpu = gpu_memory(device.is_cuda() ? device.index() : -1);
  const auto b = optimizer->model_state();
  const auto off = optimizer->offloaded();
  const auto kept = models::checkpointed_peak();  // since the last metrics
  models::reset_checkpointed_peak();
  RankFigures mine;
  mine.rss_bytes = process_rss_bytes();
  mine.gpu_allocated_bytes = gpu.allocated;
  mine.gpu_reserved_bytes = gpu.reserved;
  mine.gpu_peak_bytes = gpu.peak;
  mine.model_state = {b.parameters, b.gradients, b.optimizer_states};
  mine.offloaded = {off.parameters, off.gradients, off.optimizer_states};
  mine.nvme_bytes = off.nvme_bytes;
  mine.checkpointed_device = kept.device;
  mine.checkpointed_cpu = kept.cpu;
  const auto row = mine.pack();
  const auto fields = static_cast<std::int64_t>(RankFigures::kFields);
  at::Tensor shard = at::tensor(std::vector<std::int64_t>(row.begin(), row.end()), at::kLong);
  at::Tensor all = at::zeros({fields * world}, at::kLong);
  comm->all_gather(shard, all);
  const at::Tensor rows = all.contiguous();
  json ranks = json::array();
  for (int r = 0; r < world; ++r) ranks.push_back(RankFigures::unpack(rows.data_ptr<std::int64_t>() + r * fields).to_json(r));
  return ranks;
}

void Trainer::State::sample_if_due(const Requests& r) {
  const bool due = cfg.sampling.every_n_steps > 0 && step % cfg.sampling.every_n_steps == 0;
  // every_n_steps 0 turns the image logger off, the last step included (a request still samples).
  const bool last = cfg.sampling.every_n_steps > 0 && step == cfg.training.max_steps;
  if (r.sample || due || last) sample();
}

void Trainer::State::sample() {
  if (cfg.sampling.prompts.empty()) return;
  // Ranks holding only shards of the parameters all run the sampler (each unit is gathered as it
  // runs); rank 0 writes. Swapping a sharded EMA in is a collective too, so then every rank takes
  // part in the swaps.
  // A long phase: the ranks that do not render wait for rank 0 as long as it is alive, however
  // long the grid takes (not a collective's timeout).
  const bool swap = cfg.sampling.use_ema && cfg.ema.enabled;
  // (LoRA's frozen base counts: its shards are gathered the same way.)
  const bool compute =
      main_rank() || (world > 1 && optimizer->sharded_units() + optimizer->sharded_frozen_units() > 0);
  SampleFolder folder;
  phase("sampling", [&] {
    if (swap) optimizer->swap_ema();
    if (compute) folder = write_samples(*model, cfg, device, samples_dir(), step, main_rank());
    if (swap) optimizer->swap_ema();
  });
  if (!main_rank()) return;
  if (!folder.error.empty())  // a full disk: a warning, never the end of the run
    emit(event::warning, {{event::message, "samples of step " + std::to_string(step) + " not written: " + folder.error}});
  else
    emit(event::samples, {{"dir", folder.dir}, {"count", folder.count}});
}

void Trainer::State::validate_if_due(const Requests& r) {
  if (validation_items.empty()) return;
  const auto every = cfg.validation.every_n_steps;
  if (r.validate || (every > 0 && step % every == 0) || step == cfg.training.max_steps) validate();
}

void Trainer::State::validate() {
  if (validation_items.empty()) return;
  const auto started = std::chrono::steady_clock::now();
  auto evaluate = [&] {
    return validation_loss(*model, *objective, validation_items, cfg, *comm, device, text_cache.get());
  };
  json fields = {{"val_loss", evaluate()}};
  if (cfg.ema.enabled) {  // the EMA's weights too (swapping a sharded EMA is a collective: every rank)
    optimizer->swap_ema();
    fields["val_loss_ema"] = evaluate();
    optimizer->swap_ema();
  }
  last_val_loss = fields["val_loss"].get<double>();
  last_val_step = step;
  fields["items"] = validation_items.size();
  fields["timesteps"] = cfg.validation.timesteps;
  fields["seconds"] = seconds_since(started);
  emit(event::validation, fields);
}

std::string Trainer::State::monitor_field() const {
  const std::string& m = cfg.checkpointing.monitor;
  return m == "val_loss" || (m == "auto" && cfg.validation.enabled()) ? "val_loss" : "smoothed_loss";
}

bool Trainer::State::save_if_due(const Requests& r) {
  const auto& cp = cfg.checkpointing;
  const bool last = step == cfg.training.max_steps;  // the final save follows the loop
  if (cp.every_n_steps > 0 && step % cp.every_n_steps == 0) return save_by_policy("periodic");
  if (r.save) return save_by_policy("requested");
  if (r.timed_save && !last) return save_by_policy("timed");
  if (cp.overwrite_every_n_steps > 0 && step % cp.overwrite_every_n_steps == 0 && !last) return save_by_policy("overwrite");
  return false;
}

bool Trainer::State::save(const std::string& reason) {
  if (reason == "on_exception" && world > 1) return false;  // the other ranks may be gone
  // The frequent overwrite checkpoint always has the same tag; the others are named by step.
  checkpoint::ShardedSave request;
  request.checkpoints_dir = checkpoints_dir();
  request.tag = reason == "overwrite" ? "overwrite" : "step_" + std::to_string(step);
  request.shard = optimizer->shard_state();
  if (main_rank()) {
    checkpoint::CheckpointMeta meta;
    meta.step = step;
    meta.optimizer_steps = optimizer->steps();
    if (cfg.optimizer.fused_backward && optimizer->previous_grad_norm() >= 0)
      meta.previous_grad_norm = optimizer->previous_grad_norm();
    meta.batches_consumed = batches_consumed;
    meta.samples_seen = batches_consumed * world * cfg.training.batch_size;
    meta.epoch = static_cast<double>(batches_consumed * world) / loader->batches_per_epoch();
    meta.loss = last_loss;
    meta.smoothed_loss = smoothed.value();
    meta.smoothed_state = std::make_pair(smoothed.last(), smoothed.count());
    meta.val_loss = last_val_loss;
    meta.val_loss_step = last_val_step;
    meta.lr = lr->lr(std::max<std::int64_t>(step - 1, 0));
    meta.time = unix_time();
    meta.reason = reason;
    meta.world_size = world;
    meta.stage = static_cast<int>(cfg.zero.stage);
    meta.precision = cfg.precision;
    meta.config_hash = config_hash(cfg);
    meta.sharding = checkpoint::sharding_json(optimizer->layout(), world, static_cast<int>(cfg.zero.stage));
    meta.config = config::to_yaml(cfg);
    meta.base_model = base_model;
    if (trained.lora || trained.text == models::TextEncoderTraining::lora)
      meta.lora = checkpoint::LoraMeta{cfg.lora.rank, cfg.lora.alpha.value_or(static_cast<double>(cfg.lora.rank)),
                                       trained.lora, trained.text == models::TextEncoderTraining::lora, cfg.lora.dropout};
    if (scaler) {
      const auto st = scaler->state();
      meta.loss_scaler = checkpoint::LossScalerMeta{st.scale, st.iter, st.last_overflow, st.hysteresis, st.skipped};
    }
    request.meta = meta.to_json();
  }
  if (opt.fail_save && opt.fail_save->first == rank && opt.fail_save->second == step &&
      (opt.fail_save_times == 0 || injected_save_failures++ < opt.fail_save_times))
    request.injected_failure = checkpoint::staging_dir(checkpoints_dir(), request.tag) + "/" +
                               checkpoint::shard_file_name(rank) + ": write failed (injected by ZEROSTUDIO_FAIL_SAVE)";
  if (opt.on_save_start) opt.on_save_start(request.tag);
  const checkpoint::SaveOutcome outcome = checkpoint::save_sharded(*comm, request);
  if (!outcome.saved) {
    if (!main_rank()) rank_log << "checkpoint " << request.tag << ": " << outcome.problem << "\n";
    // Rank 0 reports the figures of the first rank that failed (every rank checked its own disk;
    // rank 0's when none had a problem of its own).
    const at::Tensor figures =
        at::tensor(std::vector<std::int64_t>{outcome.own_problem ? 1 : 0, outcome.needed_bytes, outcome.free_bytes});
    at::Tensor flat = at::zeros({3 * world}, at::kLong);  // collectives take flat buffers
    if (world > 1) comm->all_gather(figures, flat);
    else flat.copy_(figures);
    const at::Tensor all = flat.view({world, 3});
    SaveFailure f;
    f.tag = request.tag;
    f.folder = checkpoints_dir();
    f.message = "checkpoint " + request.tag + " not saved (older checkpoints are kept): " + outcome.problem;
    for (int r = world - 1; r >= 0; --r)
      if (all[r][0].item<std::int64_t>() != 0) f.rank = r;
    f.needed_bytes = all[f.rank][1].item<std::int64_t>();
    f.free_bytes = all[f.rank][2].item<std::int64_t>();
    emit(event::save_failed, {{"tag", f.tag}, {"needed_bytes", f.needed_bytes}, {"free_bytes", f.free_bytes},
                         {"folder", f.folder}, {"rank", f.rank}, {"message", f.message},
                         {"policy", cfg.checkpointing.on_save_failure}});
    save_failure = std::move(f);
    return false;
  }
  save_failure.reset();
  last_save = std::chrono::steady_clock::now();
  if (main_rank()) emit(event::checkpoint, {{"path", outcome.info.path}, {"bytes", outcome.info.bytes}, {"reason", reason}});
  return true;
}

void Trainer::State::prune_checkpoints() {
  // Deleting a large checkpoint can take a while on a slow disk: the others wait in a long phase.
  phase("pruning checkpoints", [&] {
    if (!main_rank()) return;
    const auto& cp = cfg.checkpointing;
    const std::string metric = monitor_field();
    for (const auto& old_tag : checkpoint::prune_checkpoints(checkpoints_dir(), cp.keep_last, cp.keep_best, metric))
      log("deleted checkpoint " + old_tag + " (checkpointing.keep_last " + std::to_string(cp.keep_last) + ", keep_best " +
          std::to_string(cp.keep_best) + " by " + metric + ")");
  });
}

void Trainer::State::finish(const std::string& reason) {
  if (reason == "stopped" && steps_done_here > 0 && save_by_policy("stopped")) prune_checkpoints();
  const auto every = cfg.checkpointing.every_n_steps;
  if (reason == "finished" && (every == 0 || step % every != 0) && save_by_policy("final")) prune_checkpoints();
  if (latent_cache)
    log("latent cache: " + std::to_string(latent_cache->hits()) + " read, " + std::to_string(latent_cache->stored()) +
        " encoded and stored");
  if (text_cache)
    log("text-embedding cache: " + std::to_string(text_cache->hits()) + " read, " + std::to_string(text_cache->stored()) +
        " encoded and stored");
  if (model->frozen_parked())
    log("frozen parts came back " + std::to_string(model->frozen_visits()) +
        " time(s) while training (to decode samples, or for inputs the caches missed)");
  json end = {{"reason", reason}, {"loss", last_loss}};
  if (save_failure) {
    // checkpointing.on_save_failure: continue, and the newest save failed: say what is on disk.
    const std::string newest = newest_checkpoint();
    end["last_save_failed"] = save_failure->tag;
    end["newest_checkpoint"] = newest.empty() ? json(nullptr) : json(newest);
    warn("the last checkpoint (" + save_failure->tag + ") could not be saved; " + newest_saved());
  }
  emit(event::run_end, end);
  loader.reset();
}

std::string Trainer::State::newest_checkpoint() const {
  const auto all = checkpoint::list_checkpoints(checkpoints_dir());
  return all.empty() ? std::string() : all.back().path;
}

std::string Trainer::State::newest_saved() const {
  const std::string newest = newest_checkpoint();
  return "the newest saved checkpoint is " + (newest.empty() ? std::string("none") : newest);
}

bool Trainer::State::save_by_policy(const std::string& reason) {
  if (save(reason)) return true;
  const std::string& policy = cfg.checkpointing.on_save_failure;
  if (policy == "continue") return false;
  if (policy == "stop") {
    throw SaveFailed(save_failure->message + "; stopping (checkpointing.on_save_failure: stop); " + newest_saved());
  }
  wait_for_save(reason);
  return true;
}

void Trainer::State::wait_for_save(const std::string& reason) {
  using Clock = std::chrono::steady_clock;
  const double minutes = cfg.checkpointing.save_retry_minutes;
  const auto retry_every = std::chrono::duration_cast<Clock::duration>(opt.save_retry_interval);
  retry_at = Clock::now() + retry_every;
  give_up_at = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(minutes * 60));
  struct Clear {
    State& s;
    ~Clear() { s.retry_at.reset(), s.give_up_at.reset(); }
  } clear{*this};
  const SaveFailure& f = *save_failure;
  auto mib = [](std::int64_t b) { return std::to_string(b >> 20) + " MiB"; };
  if (main_rank()) {
    emit(event::paused, {{"reason", "save_failed"}, {"tag", f.tag}});
    log("paused: checkpoint " + f.tag + " could not be saved" +
        (f.free_bytes >= 0 ? " (" + mib(f.free_bytes) + " free, rank " + std::to_string(f.rank) + "'s shard needs " +
                                 mib(f.needed_bytes) + ")"
                           : std::string()) +
        ". Free space in " + f.folder + " (or delete old checkpoints); the save is retried every " +
        std::to_string(retry_every.count() / 1'000'000'000) + " s and on Save now, for up to " + config::format_double(minutes) +
        " minutes (checkpointing.save_retry_minutes); Stop ends the run");
  }
  for (;;) {
    const Requests r = agree_on_commands(*commands);
    if (r.stop) {
      throw SaveFailed("stopped while checkpoint " + f.tag + " could not be saved; " + newest_saved());
    }
    if (r.sample) sample();
    if (r.save || r.retry_save) {
      if (save(reason)) {
        if (main_rank()) emit(event::resumed, {{"reason", "saved"}, {"tag", reason == "overwrite" ? "overwrite" : "step_" + std::to_string(step)}});
        return;
      }
      retry_at = Clock::now() + retry_every;
    } else if (r.give_up_save) {
      throw SaveFailed(save_failure->message + "; gave up after " + config::format_double(minutes) +
                       " minutes of retries (checkpointing.save_retry_minutes); " + newest_saved());
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

void Trainer::State::fail(const std::exception& e) {
  emit(event::error, {{"message", e.what()}});
  // With several ranks the optimizer state is spread over them and a rank may be gone, so there
  // is no on-exception checkpoint (the last periodic one stands); nor when saving is what failed.
  const bool save_failed = dynamic_cast<const SaveFailed*>(&e) != nullptr;
  if (cfg.checkpointing.on_exception && steps_done_here > 0 && world == 1 && !save_failed) {
    try {
      if (save("on_exception")) prune_checkpoints();
    } catch (const std::exception& e2) {
      emit(event::error, {{"message", std::string("the on-exception checkpoint failed too: ") + e2.what()}});
    }
  }
  emit(event::run_end, {{"reason", save_failed ? "save_failed" : "error"}});
  loader.reset();
}

}  // namespace zs::train
