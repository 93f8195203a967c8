#include "train/trainer.h"
#include "train/trainer_state.h"

#include <zlib.h>

#include <chrono>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <thread>

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include "checkpoint/checkpoint.h"
#include "checkpoint/sharded_state.h"
#include "config/config_writer.h"
#include "config/schema.h"
#include "config/value.h"
#include "core/error.h"
#include "core/memory.h"
#include "data/dataset.h"
#include "diffusion/noise_schedule.h"
#include "dist/communicator.h"
#include "io/atomic_file.h"
#include "io/safetensors.h"
#include "models/diffusion_model.h"
#include "train/control_file.h"
#include "train/events.h"
#include "train/image_logger.h"
#include "train/lr_schedule.h"
#include "train/loss_scaler.h"
#include "train/optimizer.h"
#include "train/optimizer_setup.h"

namespace zs::train {

namespace fs = std::filesystem;
using nlohmann::json;

std::vector<std::string> resume_mismatches(const config::TrainerConfig& ckpt, const config::TrainerConfig& now) {
  std::vector<std::string> out;
  for (const auto& f : config::schema_fields()) {
    // Caches and workers change the speed, not the run (the caches give the same values).
    const bool speed_only = f.path == "data.cache_latents" || f.path == "data.cache_text_embeddings" ||
                            f.path == "data.latent_cache_dir" || f.path == "data.num_workers";
    const bool fixed = (f.path.starts_with("model.") || f.path.starts_with("data.") || f.path == "training.seed" ||
                        f.path == "training.batch_size" || (f.path.starts_with("optimizer.") && f.path != "optimizer.lr")) &&
                       !speed_only;
    if (!fixed) continue;
    const std::string a = config::format_value(f.get(ckpt)), b = config::format_value(f.get(now));
    if (a != b) out.push_back(f.path + ": checkpoint " + a + ", config " + b);
  }
  return out;
}

void Trainer::State::emit(const std::string& type, const json& fields) {
  if (events) events->write(type, step, fields);
  if (rank_log.is_open() && (type == "log" || type == "warning" || type == "error" || type == "checkpoint" ||
                             type == "run_start" || type == "run_end")) {
    rank_log << "[step " << step << "] " << type << ": " << fields.dump() << "\n";
    rank_log.flush();
  }
}

std::string default_run_dir(const config::TrainerConfig& cfg, const std::string& name_hint) {
  std::string name = cfg.logging.run_name;
  if (name.empty()) {
    const std::time_t now = std::time(nullptr);
    std::tm tm{};
    localtime_r(&now, &tm);
    char buf[32];
    std::strftime(buf, sizeof buf, "%Y%m%d-%H%M%S", &tm);
    name = name_hint + "-" + buf;
  }
  return (fs::path(cfg.logging.runs_root) / name).string();
}

namespace {

/// CRC-32 of the config's YAML: tells whether two checkpoints were made by the same config.
std::string config_hash(const config::TrainerConfig& cfg) {
  const std::string yaml = config::to_yaml(cfg);
  char buf[16];
  std::snprintf(buf, sizeof buf, "%08lx", crc32(0L, reinterpret_cast<const Bytef*>(yaml.data()), static_cast<uInt>(yaml.size())));
  return buf;
}

}  // namespace

Trainer::Trainer(config::TrainerConfig config, TrainerOptions options) : s_(std::make_unique<State>()) {
  s_->cfg = std::move(config);
  s_->opt = std::move(options);
  const std::string& resume = s_->opt.resume;
  if (!s_->opt.run_dir.empty()) {
    s_->run_dir = s_->opt.run_dir;
  } else if (!resume.empty() && resume != "latest") {
    // A checkpoint folder <run>/checkpoints/<tag>: continue in its run.
    s_->run_dir = fs::path(resume).lexically_normal().parent_path().parent_path().string();
  } else if (resume == "latest" && s_->cfg.logging.run_name.empty()) {
    throw Error(ErrorKind::config, "--resume latest needs the run: pass --run-dir DIR (or set logging.run_name)");
  } else {
    s_->run_dir = default_run_dir(s_->cfg, s_->opt.name_hint);
  }
}

Trainer::~Trainer() = default;

const std::string& Trainer::run_dir() const { return s_->run_dir; }

RunSummary Trainer::run(TrainerCommands& commands) {
  State& s = *s_;
  const auto& cfg = s.cfg;
  const bool resuming = !s.opt.resume.empty();
  const fs::path root(s.run_dir);
  s.comm = s.opt.comm ? s.opt.comm : std::shared_ptr<dist::Communicator>(dist::Communicator::single());
  s.rank = s.comm->rank();
  s.world = s.comm->world_size();
  const bool main_rank = s.rank == 0;
  // Every rank reports whether its part of a setup phase worked, so a failure on one rank stops
  // all of them at once instead of leaving the others waiting for a collective.
  auto agree = [&](const char* phase, std::exception_ptr error) {
    if (s.world > 1) {
      at::Tensor flag = at::full({1}, error ? 1.0 : 0.0);
      s.comm->all_reduce(flag);
      if (!error && flag.item<double>() > 0)
        throw Error(ErrorKind::distributed, "rank " + std::to_string(s.rank) + ": another rank failed during " + phase +
                                                "; its error is in logs/rank*.log (rank 0's also in events.jsonl)");
    }
    if (error) std::rethrow_exception(error);
  };
  std::error_code ec;
  fs::create_directories(root / "logs", ec);
  s.rank_log.open(root / "logs" / ("rank" + std::to_string(s.rank) + ".log"), std::ios::app);
  std::exception_ptr prepare_error;
  if (main_rank) {
    try {
      s.prepare_run_directory(resuming);
    } catch (...) {
      prepare_error = std::current_exception();
      if (s.events) {
        try {
          std::rethrow_exception(prepare_error);
        } catch (const std::exception& e) {
          s.emit("error", {{"message", e.what()}});
          s.emit("run_end", {{"reason", "error"}});
        }
      }
    }
  }
  agree("preparing the run directory", prepare_error);

  std::exception_ptr setup_error;
  std::optional<checkpoint::CheckpointInfo> ckpt;
  try {
    if (resuming) ckpt = s.open_resume_checkpoint();
    s.build_model_and_data(ckpt);
  } catch (...) {
    setup_error = std::current_exception();
  }
  try {
    agree("setup", setup_error);
    if (s.world > 1) {
      // One set of weights: rank 0's.
      c10::NoGradGuard no_grad;
      for (auto& [name, p] : s.model.named_parameters()) {
        if (p.numel() == 0) continue;  // built into shards (zero3_init_flag): every rank read its own
        // The UNet is still in CPU memory (the optimizer moves it unit by unit): one parameter at a
        // time visits the device, where NCCL needs it.
        at::Tensor t = p.detach().to(s.device);
        s.comm->broadcast(t, 0);
        if (!t.is_alias_of(p)) p.detach().copy_(t);
      }
    }
    // The optimizer (ZeRO flattens, and at stage 3 shards, the parameters it is given; with
    // mixed precision it keeps fp32 masters and turns the model's weights to the compute dtype).
    // Every rank says whether it could build its own (NVMe space, memory) before going on.
    std::exception_ptr optimizer_error;
    try {
      s.optimizer = make_optimizer(cfg, s.model, *s.comm, s.compute, s.device, root.filename().string(),
                                   [&s](const std::string& line) { s.log(line); }, s.sharded_init.get());
      s.sharded_init.reset();  // the optimizer holds the shards now
    } catch (...) {
      optimizer_error = std::current_exception();
    }
    agree("building the optimizer", optimizer_error);
    // The EMA: kept by the ZeRO optimizer, per shard, on the CPU.
    if (cfg.ema.enabled) s.optimizer->enable_ema(cfg.ema.decay);
    if (ckpt) {
      // Shards saved under any world size, stage or offload: each rank reads the parts it owns now.
      std::exception_ptr load_error;
      try {
        const checkpoint::ShardReader reader(ckpt->path, ckpt->meta.at("sharding"));
        const bool with_ema = cfg.ema.enabled && reader.has("ema");
        if (cfg.ema.enabled && !with_ema) s.warn("the checkpoint has no EMA weights; the EMA starts from the current weights");
        s.optimizer->load_shards([&reader](const std::string& unit, const std::string& kind, std::int64_t first,
                                           std::int64_t count) { return reader.read(unit, kind, first, count); },
                                 ckpt->meta.value("optimizer_steps", ckpt->step), with_ema);
        // Every rank's noise generator is in rank 0's file.
        const io::SafetensorsReader first(ckpt->path + "/" + checkpoint::shard_file_name(0));
        const std::string rng_key = "rng.cpu." + std::to_string(s.rank);
        if (first.contains(rng_key)) s.gen.set_state(first.tensor(rng_key));
        else s.warn("the checkpoint has no random state for rank " + std::to_string(s.rank) + "; its noise starts afresh");
      } catch (...) {
        load_error = std::current_exception();
      }
      agree("loading the checkpoint", load_error);
      if (main_rank && ckpt->meta.value("world_size", s.world) != s.world)
        s.log("resumed a checkpoint of " + std::to_string(ckpt->meta.value("world_size", 0)) + " ranks at stage " +
              std::to_string(ckpt->meta.value("stage", 0)) + " on " + std::to_string(s.world) + " ranks at stage " +
              std::to_string(cfg.zero.stage));
    }
  } catch (const std::exception& e) {
    s.emit("error", {{"message", e.what()}});
    s.emit("run_end", {{"reason", "error"}});
    throw;
  }

  // Every rank's model-state bytes and memory, gathered for the metrics event (a collective).
  auto gather_ranks = [&]() {
    const auto gpu = gpu_memory(s.device.is_cuda() ? s.device.index() : -1);
    const auto b = s.optimizer->model_state();
    const auto off = s.optimizer->offloaded();
    const std::vector<std::int64_t> mine = {process_rss_bytes(), gpu.allocated, gpu.reserved, gpu.peak,
                                            b.parameters, b.gradients, b.optimizer_states, off.parameters,
                                            off.gradients, off.optimizer_states, off.nvme_bytes};
    at::Tensor shard = at::tensor(mine, at::kLong);
    at::Tensor all = at::zeros({static_cast<std::int64_t>(mine.size()) * s.world}, at::kLong);
    s.comm->all_gather(shard, all);
    json ranks = json::array();
    for (int r = 0; r < s.world; ++r) {
      const auto v = [&](int i) { return all[r * static_cast<std::int64_t>(mine.size()) + i].item<std::int64_t>(); };
      ranks.push_back({{"rank", r}, {"rss_bytes", v(0)}, {"gpu_allocated_bytes", v(1)}, {"gpu_reserved_bytes", v(2)},
                       {"gpu_peak_bytes", v(3)},
                       {"model_state", {{"parameters", v(4)}, {"gradients", v(5)}, {"optimizer_states", v(6)}}},
                       {"offloaded", {{"parameters", v(7)}, {"gradients", v(8)}, {"optimizer_states", v(9)},
                                      {"nvme_bytes", v(10)}}}});
    }
    return ranks;
  };

  const bool sharded_params = cfg.zero.stage == 3 && s.world > 1;

  // A sharded checkpoint: every rank writes its part into a hidden folder, rank 0 the index;
  // the folder becomes the checkpoint only when every rank succeeded. A failed save (a full
  // disk, a dead rank) is reported and training goes on; older checkpoints are untouched.
  auto last_save = std::chrono::steady_clock::now();  // for checkpointing.every_n_minutes
  auto all_ok = [&](bool ok) {
    if (s.world == 1) return ok;
    at::Tensor flag = at::full({1}, ok ? 0.0 : 1.0);
    s.comm->all_reduce(flag);
    return flag.item<double>() == 0;
  };
  auto save = [&](const std::string& reason) {
    if (reason == "on_exception" && s.world > 1) return;  // the other ranks may be gone
    // The frequent overwrite checkpoint always has the same tag; the others are named by step.
    const std::string tag = reason == "overwrite" ? "overwrite" : "step_" + std::to_string(s.step);
    const std::string staging = checkpoint::staging_dir(s.checkpoints_dir(), tag);
    auto mine = s.optimizer->shard_state();
    std::int64_t my_bytes = 0;
    for (const auto& [n, t] : mine) my_bytes += t.numel() * static_cast<std::int64_t>(t.element_size());
    // Every rank's noise generator goes into rank 0's file (so any world size can resume it).
    const at::Tensor rng = s.gen.get_state();
    at::Tensor rngs = at::zeros({rng.numel() * s.world}, rng.options());
    if (s.world > 1) s.comm->all_gather(rng.contiguous(), rngs);
    else rngs.copy_(rng);
    std::string problem;
    if (main_rank) {
      for (int r = 0; r < s.world; ++r) mine.emplace_back("rng.cpu." + std::to_string(r), rngs.chunk(s.world)[r].clone());
      std::error_code ec;
      io::remove_tree(staging, ec);
      fs::create_directories(staging, ec);
      if (ec) problem = staging + ": cannot create: " + ec.message();
    }
    if (!all_ok(problem.empty())) {
      s.emit("error", {{"message", "checkpoint " + tag + " not saved: " +
                                       (problem.empty() ? "another rank failed to prepare it" : problem)}});
      return;
    }
    // Refuse, with a clear event, when the shards cannot fit (estimated from this rank's part).
    const std::int64_t free = checkpoint::free_bytes(staging);
    if (free >= 0 && free < my_bytes * (s.world > 1 ? 2 : 1))
      problem = staging + ": " + std::to_string(free >> 20) + " MiB free, this rank's shard needs " +
                std::to_string(my_bytes >> 20) + " MiB; free space on that disk";
    if (s.opt.fail_save && s.opt.fail_save->first == s.rank && s.opt.fail_save->second == s.step)
      problem = staging + "/" + checkpoint::shard_file_name(s.rank) + ": write failed (injected by ZEROSTUDIO_FAIL_SAVE)";
    if (problem.empty()) {
      try {
        if (!mine.empty())
          io::write_safetensors(staging + "/" + checkpoint::shard_file_name(s.rank), mine, {{"format", "pt"}});
      } catch (const std::exception& e) {
        problem = e.what();
      }
    }
    if (!all_ok(problem.empty())) {
      if (main_rank) {
        std::error_code ec;
        io::remove_tree(staging, ec);
      }
      s.emit("error", {{"message", "checkpoint " + tag + " not saved (older checkpoints are kept): " +
                                       (problem.empty() ? "another rank could not write its shard" : problem)}});
      if (!problem.empty() && !main_rank) s.rank_log << "checkpoint " << tag << ": " << problem << "\n";
      return;
    }
    if (!main_rank) return;
    json meta = {{"step", s.step},
                 {"optimizer_steps", s.optimizer->steps()},
                 {"batches_consumed", s.batches_consumed},
                 {"samples_seen", s.batches_consumed * s.world * cfg.training.batch_size},
                 {"epoch", static_cast<double>(s.batches_consumed * s.world) / s.loader->batches_per_epoch()},
                 {"loss", s.last_loss},
                 {"smoothed_loss", s.smoothed_loss},
                 {"lr", s.lr->lr(std::max<std::int64_t>(s.step - 1, 0))},
                 {"time", unix_time()},
                 {"reason", reason},
                 {"world_size", s.world},
                 {"stage", cfg.zero.stage},
                 {"precision", cfg.precision},
                 {"config_hash", config_hash(cfg)},
                 {"sharding", checkpoint::sharding_json(s.optimizer->layout(), s.world, static_cast<int>(cfg.zero.stage))},
                 {"config", config::to_yaml(cfg)}};
    if (s.scaler) {
      const auto st = s.scaler->state();
      meta["loss_scaler"] = {{"scale", st.scale}, {"iter", st.iter}, {"last_overflow", st.last_overflow},
                             {"hysteresis", st.hysteresis}, {"skipped", st.skipped}};
    }
    try {
      const auto info = checkpoint::finalize_checkpoint(s.checkpoints_dir(), tag, meta);
      s.emit("checkpoint", {{"path", info.path}, {"bytes", info.bytes}, {"reason", reason}});
    } catch (const std::exception& e) {
      s.emit("error", {{"message", "checkpoint " + tag + " not saved (older checkpoints are kept): " + e.what()}});
      return;
    }
    last_save = std::chrono::steady_clock::now();
    for (const auto& old_tag :
         checkpoint::prune_checkpoints(s.checkpoints_dir(), cfg.checkpointing.keep_last, cfg.checkpointing.keep_best))
      s.log("deleted checkpoint " + old_tag + " (checkpointing.keep_last " + std::to_string(cfg.checkpointing.keep_last) +
            ", keep_best " + std::to_string(cfg.checkpointing.keep_best) + ")");
  };

  auto sample = [&]() {
    // Under stage 3 every rank runs the sampler (each unit is gathered as it runs); rank 0 writes.
    // Swapping in a sharded EMA is a collective too, so then every rank takes part in the swaps.
    if (cfg.sampling.prompts.empty()) return;
    // The EMA lives in the optimizer, per shard: swapping it in is a collective (every rank joins).
    const bool swap = cfg.sampling.use_ema && cfg.ema.enabled;
    const bool compute = main_rank || sharded_params;
    if (!compute && !(swap && s.world > 1)) return;
    if (swap) s.optimizer->swap_ema();
    SampleFolder folder;
    if (compute)
      folder = write_samples(s.model, cfg.sampling, cfg.data.resolution, s.device, s.samples_dir(), s.step, main_rank);
    if (swap) s.optimizer->swap_ema();
    if (main_rank) s.emit("samples", {{"dir", folder.dir}, {"count", folder.count}});
  };

  std::string reason = "finished";
  std::int64_t steps_done_here = 0;
  try {
    if (cfg.sampling.at_start && s.step == 0) sample();
    auto interval_start = std::chrono::steady_clock::now();
    double interval_loss = 0, interval_norm = 0;
    std::int64_t interval_steps = 0, interval_good_steps = 0;  // steps, and those not skipped by an overflow
    const std::int64_t accum = cfg.training.gradient_accumulation_steps;
    // Rank 0 follows the run directory's control.json (the GUI's Pause/Stop/Sample/Save).
    std::unique_ptr<ControlFilePoller> control;
    if (main_rank) control = std::make_unique<ControlFilePoller>(s.run_dir);
    bool was_paused = false;
    while (s.step < cfg.training.max_steps) {
      if (control) control->poll(commands);
      // Requests are agreed between ranks, so all stop, pause, sample or save at the same step.
      bool stop = commands.stop_requested(), paused = commands.paused(), want_sample = commands.take_sample_request(),
           want_save = commands.take_save_request();
      const double minutes = cfg.checkpointing.every_n_minutes;
      bool timed = minutes > 0 && std::chrono::duration<double>(std::chrono::steady_clock::now() - last_save).count() >=
                                      minutes * 60;
      if (s.world > 1) {
        at::Tensor flags = at::tensor(
            std::vector<float>{float(stop), float(want_sample), float(want_save), float(timed), float(paused)});
        s.comm->all_reduce(flags);
        stop = flags[0].item<float>() > 0;
        want_sample = flags[1].item<float>() > 0;
        want_save = flags[2].item<float>() > 0;
        timed = flags[3].item<float>() > 0;
        paused = flags[4].item<float>() > 0;
      }
      if (stop) {
        reason = "stopped";
        break;
      }
      if (paused != was_paused) {
        was_paused = paused;
        if (main_rank) s.emit(paused ? "paused" : "resumed", json::object());
      }
      if (paused) {
        // Every rank waits here and meets the others at the next agreement (one small
        // all-reduce per wait, far inside the collective timeout); sample and save still work.
        if (want_sample) sample();
        if (want_save) save("requested");
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        interval_start = std::chrono::steady_clock::now();
        continue;
      }
      const auto step_start = std::chrono::steady_clock::now();
      const double lr = s.lr->lr(s.step);
      s.optimizer->zero_grad();
      double step_loss = 0;
      for (std::int64_t micro = 0; micro < accum; ++micro) {
        s.optimizer->set_last_micro_step(micro == accum - 1);
        const data::Batch batch = s.loader->next();
        ++s.batches_consumed;
        const at::Tensor x0 = s.model.to_model_space(batch.images.to(s.device), s.gen, s.latent_cache.get(),
                                                     &batch.keys);  // latents for pipelines
        const std::int64_t b = x0.size(0);
        const at::Tensor noise = at::randn(x0.sizes(), s.gen).to(s.device);
        const at::Tensor t = at::randint(0, s.schedule->num_train_timesteps(), {b}, s.gen, at::kLong).to(s.device);
        const models::TextConditioning cond = s.model.condition(batch.captions, s.device, s.text_cache.get());
        const at::Tensor time_ids = s.model.added_conditioning() ? batch.time_ids.to(s.device) : at::Tensor();
        const at::Tensor pred = s.model.unet->forward(s.schedule->add_noise(x0, noise, t), t, cond.context, cond.pooled, time_ids);
        const at::Tensor per_sample = (pred - s.schedule->target(x0, noise, t)).pow(2).mean({1, 2, 3});  // [B]
        const at::Tensor loss = (per_sample * s.schedule->min_snr_weights(t, cfg.training.min_snr_gamma)).mean();
        const double scale = s.scaler ? s.scaler->scale() : 1.0;
        (loss * (scale / static_cast<double>(accum))).backward();
        if (s.opt.after_backward) s.opt.after_backward(s.step + 1, s.rank, s.model.named_parameters());
        step_loss += loss.item<double>() / static_cast<double>(accum);
      }
      // Gradients meet only after the last micro-batch (ZeRO: all-reduce or reduce-scatter).
      s.optimizer->reduce_gradients();
      if (s.world > 1) {
        at::Tensor l = at::full({1}, step_loss, at::kDouble);
        s.comm->all_reduce(l);
        step_loss = l.item<double>() / s.world;
      }
      double norm = 0;
      bool skipped = false;
      if (s.scaler) {
        // Loss scaling: an inf/NaN gradient on any rank skips the step on every rank.
        const double scale = s.scaler->scale();
        skipped = s.optimizer->unscale_and_check_overflow(1.0 / scale) || !std::isfinite(step_loss);
        s.scaler->update(skipped);
        if (skipped) {
          s.optimizer->skip_step();
          s.emit("overflow", {{"loss_scale", scale}, {"next_loss_scale", s.scaler->scale()},
                              {"skipped_steps", s.scaler->skipped()}});
          if (s.scaler->stuck())
            throw Error(ErrorKind::data, "gradients overflow at the lowest loss scale (" + std::to_string(scale) +
                                             ", loss_scaling.min_loss_scale) at step " + std::to_string(s.step + 1) +
                                             "; lower optimizer.lr, enable gradient clipping or use precision: bf16");
        }
      } else if (!std::isfinite(step_loss)) {
        throw Error(ErrorKind::data, "the loss became " + std::to_string(step_loss) + " at step " +
                                         std::to_string(s.step + 1) + "; lower optimizer.lr or enable gradient clipping");
      }
      if (!skipped) {
        norm = s.optimizer->clip_grad_norm(cfg.training.gradient_clipping);
        s.optimizer->step(lr);
      }
      ++s.step;
      ++steps_done_here;
      s.last_loss = step_loss;
      if (!skipped) s.smoothed_loss = s.smoothed_loss == 0 ? step_loss : 0.9 * s.smoothed_loss + 0.1 * step_loss;
      if (cfg.ema.enabled && s.step % cfg.ema.every_n_steps == 0) s.optimizer->update_ema();
      if (!skipped) {
        interval_loss += step_loss;
        interval_norm += norm;
        ++interval_good_steps;
      }
      ++interval_steps;
      const double step_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - step_start).count();
      if (s.opt.on_step) s.opt.on_step(s.step, cfg.training.max_steps, step_loss, step_s);

      if (s.step % cfg.logging.every_n_steps == 0 || s.step == cfg.training.max_steps) {
        const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - interval_start).count();
        const json ranks = gather_ranks();
        json metrics = {{"loss", interval_good_steps > 0 ? interval_loss / interval_good_steps : step_loss},
                           {"lr", lr},
                           {"grad_norm", interval_good_steps > 0 ? interval_norm / interval_good_steps : 0.0},
                           {"samples_per_s", secs > 0 ? interval_steps * accum * cfg.training.batch_size * s.world / secs : 0.0},
                           {"s_per_step", secs / interval_steps},
                           {"epoch", static_cast<double>(s.batches_consumed * s.world) / s.loader->batches_per_epoch()},
                           {"ranks", ranks}};
        if (s.scaler) {
          metrics["loss_scale"] = s.scaler->scale();
          metrics["skipped_steps"] = s.scaler->skipped();
        }
        s.emit("metrics", metrics);
        interval_start = std::chrono::steady_clock::now();
        interval_loss = interval_norm = 0;
        interval_steps = interval_good_steps = 0;
      }
      const bool sample_due = cfg.sampling.every_n_steps > 0 && s.step % cfg.sampling.every_n_steps == 0;
      if (want_sample || sample_due || s.step == cfg.training.max_steps) sample();
      const auto& cp = cfg.checkpointing;
      const bool save_due = cp.every_n_steps > 0 && s.step % cp.every_n_steps == 0;
      const bool overwrite_due = cp.overwrite_every_n_steps > 0 && s.step % cp.overwrite_every_n_steps == 0;
      if (save_due) save("periodic");
      else if (want_save) save("requested");
      else if (timed && s.step != cfg.training.max_steps) save("timed");  // the final save follows
      else if (overwrite_due && s.step != cfg.training.max_steps) save("overwrite");
      if (interval_steps == 0) interval_start = std::chrono::steady_clock::now();  // keep sampling/saving out of throughput
    }
    if (reason == "stopped" && steps_done_here > 0) save("stopped");
    if (reason == "finished" && (cfg.checkpointing.every_n_steps == 0 || s.step % cfg.checkpointing.every_n_steps != 0))
      save("final");
  } catch (const std::exception& e) {
    s.emit("error", {{"message", e.what()}});
    // With several ranks the optimizer state is spread over them and a rank may be gone, so
    // there is no on-exception checkpoint (the last periodic one stands).
    if (cfg.checkpointing.on_exception && steps_done_here > 0 && s.world == 1) {
      try {
        save("on_exception");
      } catch (const std::exception& e2) {
        s.emit("error", {{"message", std::string("the on-exception checkpoint failed too: ") + e2.what()}});
      }
    }
    s.emit("run_end", {{"reason", "error"}});
    s.loader.reset();
    throw;
  }
  if (s.latent_cache)
    s.log("latent cache: " + std::to_string(s.latent_cache->hits()) + " read, " + std::to_string(s.latent_cache->stored()) +
          " encoded and stored");
  if (s.text_cache)
    s.log("text-embedding cache: " + std::to_string(s.text_cache->hits()) + " read, " +
          std::to_string(s.text_cache->stored()) + " encoded and stored");
  s.emit("run_end", {{"reason", reason}, {"loss", s.last_loss}});
  s.loader.reset();
  return {s.run_dir, s.step, reason, s.last_loss};
}

}  // namespace zs::train
