#include <chrono>
#include <filesystem>
#include <map>

#include <ATen/CPUGeneratorImpl.h>
#include <torch/cuda.h>

#include <c10/core/GradMode.h>

#include "checkpoint/checkpoint.h"
#include "checkpoint/checkpoint_meta.h"
#include "checkpoint/sharded_state.h"
#include "comm/communicator.h"
#include "config/config_loader.h"
#include "config/config_writer.h"
#include "config/trainability.h"
#include "config/zero_settings.h"
#include "core/error.h"
#include "core/text.h"
#include "data/shapes.h"
#include "estimate/memory_estimator.h"
#include "io/safetensors.h"
#include "models/attention_options.h"
#include "models/model_family.h"
#include "models/quantized_base.h"
#include "models/trainable_model.h"
#include "train/base_cache.h"
#include "train/frozen_cache.h"
#include "train/lora_setup.h"
#include "train/optimizer_setup.h"
#include "train/run_length.h"
#include "train/trainer_state.h"
#include "train/validation_set.h"
#include "zero/zero_plan.h"

namespace zs::train {

namespace fs = std::filesystem;

void Trainer::State::phase(const char* what, const std::function<void()>& work) { comm->long_phase(what, work); }

void Trainer::State::start() {
  comm = opt.comm ? opt.comm : std::shared_ptr<comm::Communicator>(comm::Communicator::single());
  rank = comm->rank();
  world = comm->world_size();
  const bool resuming = !opt.resume.empty();
  // What no config check can see: a model or images that are not in place yet. Refused before
  // anything is created (every rank looks; they share the files).
  phase("the trainability checks", [&] {
    config::LoadedConfig as_loaded;
    as_loaded.config = cfg;
    config::require_trainable(as_loaded, run_dir);
  });
  std::error_code ec;
  fs::create_directories(fs::path(run_dir) / "logs", ec);
  rank_log.open(fs::path(run_dir) / "logs" / ("rank" + std::to_string(rank) + ".log"), std::ios::app);
  phase("preparing the run directory", [&] {
    if (!main_rank()) return;
    try {
      prepare_run_directory(resuming);
    } catch (const std::exception& e) {
      if (events) {
        emit(event::error, {{"message", e.what()}});
        emit(event::run_end, {{"reason", "error"}});
      }
      throw;
    }
  });
  // Rank 0 follows the run's control.json (the GUI's Pause/Stop/Sample/Save) from now on.
  if (main_rank()) control = std::make_unique<ControlFilePoller>(run_dir, opt.reset_control);
  try {
    std::optional<checkpoint::CheckpointInfo> ckpt;
    std::vector<data::DataItem> items;
    phase("setup", [&] {
      if (resuming) ckpt = open_resume_checkpoint();
      choose_device();
      items = data::scan_dataset(config::dataset_folder(cfg, run_dir), dataset_scan());
      build_model(ckpt, items);
      build_data(std::move(items));
    });
    share_initial_weights();
    phase("building the optimizer", [&] { build_optimizer(); });
    phase("checking the space for checkpoints", [&] { check_checkpoint_space(); });
    if (ckpt) phase("loading the checkpoint", [&] { restore(*ckpt); });
    start_loader(ckpt);
  } catch (const std::exception& e) {
    emit(event::error, {{"message", e.what()}});
    emit(event::run_end, {{"reason", "error"}});
    throw;
  }
}

void Trainer::State::share_initial_weights() {
  if (world == 1) return;
  // One set of weights: rank 0's.
  c10::NoGradGuard no_grad;
  for (auto& [name, p] : model->named_parameters()) {
    if (p.numel() == 0) continue;  // built into shards (zero3_init_flag): every rank read its own
    // The denoiser is still in CPU memory (the optimizer moves it unit by unit): one parameter at a
    // time visits the device, where NCCL needs it.
    at::Tensor t = p.detach().to(device);
    comm->broadcast(t, 0);
    if (!t.is_alias_of(p)) p.detach().copy_(t);
  }
}

void Trainer::State::build_optimizer() {
  // ZeRO flattens, and at stage 3 shards, the parameters it is given; with mixed precision it
  // keeps fp32 masters and turns the model's weights to the compute dtype.
  optimizer = make_optimizer(cfg, trained, *model, *comm, compute, device, fs::path(run_dir).filename().string(),
                             [this](const std::string& line) { log(line); }, sharded_init.get());
  sharded_init.reset();  // the optimizer holds the shards now
  if (cfg.ema.enabled) optimizer->enable_ema(cfg.ema.decay);  // per shard, on the CPU
}

namespace {

/// How many of a run's checkpoints can be on disk at once: with keep_last, the kept periodic and
/// timed ones, the best-by-metric ones and the one being written; without, every periodic one
/// and the final; the overwrite checkpoint on top.
std::int64_t checkpoints_kept(const config::TrainerConfig& c) {
  const auto& cp = c.checkpointing;
  std::int64_t n = cp.keep_last > 0 ? cp.keep_last + cp.keep_best + 1
                                    : (cp.every_n_steps > 0 ? c.training.max_steps / cp.every_n_steps : 0) + 1;
  if (cp.overwrite_every_n_steps > 0) ++n;
  return n;
}

}  // namespace

void Trainer::State::check_checkpoint_space() {
  // Every rank's shard, as a save writes them (the ranks of one machine share its disk).
  const at::Tensor mine = at::tensor(std::vector<std::int64_t>{optimizer->checkpoint_bytes()});
  at::Tensor all = at::zeros({world}, at::kLong);
  if (world > 1) comm->all_gather(mine, all);
  else all.copy_(mine);
  if (!main_rank()) return;
  const std::int64_t one = all.sum().item<std::int64_t>();
  // checkpoints/ once it exists (it may be a disk of its own), else the run folder.
  std::error_code ec;
  const std::string where = fs::is_directory(checkpoints_dir(), ec) ? checkpoints_dir() : run_dir;
  const std::int64_t free = checkpoint::free_bytes(where);
  if (free < 0 || one <= 0) return;
  const std::int64_t kept = checkpoints_kept(cfg);
  const std::string each = format_bytes(one), room = format_bytes(free);
  if (free < one)
    throw Error(ErrorKind::io, where + ": " + room + " free, but one checkpoint of this run takes " + each +
                                   "; free space there, or put the run on a disk with room (logging.runs_root or --run-dir)");
  if (free < one * kept)
    warn(where + ": " + room + " free for up to " + std::to_string(kept) + " checkpoints of " + each + " (" +
         format_bytes(one * kept) + ", checkpointing.keep_last " + std::to_string(cfg.checkpointing.keep_last) +
         "): saves will fail once it is full; free space, or lower checkpointing.keep_last");
  else
    log("checkpoints: " + each + " each, up to " + std::to_string(kept) + " kept; " + room + " free in " + where);
}

void Trainer::State::restore(const checkpoint::CheckpointInfo& ckpt) {
  // Everything a resumed run takes from its checkpoint, read through one typed meta.json.
  const checkpoint::CheckpointMeta meta = checkpoint::CheckpointMeta::from_json(ckpt.meta, ckpt.path);
  // The loop's counters. Another world size splits each global batch differently: carry on
  // after the samples seen.
  batches_consumed = meta.batches_consumed;
  if (meta.world_size != world && meta.samples_seen) batches_consumed = *meta.samples_seen / (world * cfg.training.batch_size);
  last_loss = meta.loss;
  // The smoother's own state where the checkpoint has it; older ones: their value, as settled.
  if (meta.smoothed_state) smoothed.restore(meta.smoothed_state->first, meta.smoothed_state->second);
  else smoothed.restore(meta.smoothed_loss, 1'000'000);
  if (scaler && meta.loss_scaler) {
    const checkpoint::LossScalerMeta& ls = *meta.loss_scaler;
    scaler->load({ls.scale, ls.iter, ls.last_overflow, ls.hysteresis, ls.skipped});
  }
  // Shards saved under any world size, stage or offload: each rank reads the parts it owns now.
  const checkpoint::ShardReader reader(ckpt.path, meta.sharding);
  const bool with_ema = cfg.ema.enabled && reader.has("ema");
  if (cfg.ema.enabled && !with_ema) warn("the checkpoint has no EMA weights; the EMA starts from the current weights");
  // Units are matched by their parameters, so a checkpoint cut into other units (saved before
  // transformers were split per block) resumes too.
  std::map<std::string, checkpoint::UnitLayout> layout;
  for (auto& u : optimizer->layout()) layout[u.name] = std::move(u);
  optimizer->load_shards([&](const std::string& unit, const std::string& kind, std::int64_t first, std::int64_t count) {
                           return reader.read_state(layout.at(unit), kind, first, count, zero::kQuantBlock); },
                         meta.optimizer_steps, with_ema,
                         cfg.zero.offload_optimizer.delayed_update && reader.has("lagged"));
  if (meta.previous_grad_norm) optimizer->set_previous_grad_norm(*meta.previous_grad_norm);
  // The noise needs no state: each sample's generator is seeded by its batch and place
  // (sample_generator), so it follows from batches_consumed.
  if (main_rank() && meta.world_size != world)
    log("resumed a checkpoint of " + std::to_string(meta.world_size) + " ranks at stage " + std::to_string(meta.stage) +
        " on " + std::to_string(world) + " ranks at stage " + std::to_string(cfg.zero.stage));
}

void Trainer::State::prepare_run_directory(bool resuming) {
  std::error_code ec;
  if (!resuming && fs::exists(fs::path(run_dir) / "events.jsonl"))
    throw Error(ErrorKind::io, run_dir + ": already holds a run; continue it with --resume latest or choose "
                                           "another --run-dir");
  for (const char* sub : {"", "model", "samples", "checkpoints", "logs", "exports"})
    fs::create_directories(fs::path(run_dir) / sub, ec);
  if (ec) throw Error(ErrorKind::io, run_dir + ": cannot create the run directory: " + ec.message());
  events = std::make_unique<EventLog>((fs::path(run_dir) / "events.jsonl").string(), opt.on_event);
  config::save_config(cfg, (fs::path(run_dir) / "config.yaml").string());
  if (cfg.logging.tensorboard)  // a new file per start: TensorBoard reads every file in the folder
    tensorboard = std::make_unique<TensorBoardLog>((fs::path(run_dir) / "tensorboard").string(), run_dir);
  // Demo data is generated once, by rank 0, before the others look for it.
  const std::string data_path = config::dataset_folder(cfg, run_dir);
  if (cfg.data.generate == "shapes" && !fs::exists(data_path)) {
    log("generating " + std::to_string(cfg.data.generate_count) + " shape images into " + data_path);
    const auto t0 = std::chrono::steady_clock::now();
    data::generate_shapes_dataset(data_path, static_cast<int>(cfg.data.generate_count),
                                  static_cast<int>(cfg.data.resolution), static_cast<std::uint64_t>(cfg.training.seed));
    log("dataset generated in " +
          std::to_string(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()) + " s");
  }
}

std::optional<checkpoint::CheckpointInfo> Trainer::State::open_resume_checkpoint() {
  // The checkpoint decides the step, and its config must agree on what defines the run.
  checkpoint::CheckpointInfo info;
  if (opt.resume == "latest" || opt.resume == "auto") {
    // The newest checkpoint whose files are all there and intact; damaged ones are named.
    const bool automatic = opt.resume == "auto";
    const auto all = checkpoint::list_checkpoints(checkpoints_dir());
    if (all.empty() && automatic) {
      log("--resume auto: no checkpoint in " + checkpoints_dir() + "; starting the run at step 0");
      return std::nullopt;
    }
    if (all.empty())
      throw Error(ErrorKind::checkpoint, checkpoints_dir() + ": no checkpoint to resume from; start without --resume "
                                                            "(or use --resume auto)");
    std::vector<std::string> skipped;
    for (auto it = all.rbegin(); it != all.rend(); ++it) {
      const auto problems = checkpoint::verify_checkpoint(*it);
      if (problems.empty()) {
        info = *it;
        break;
      }
      skipped.push_back(it->tag + " (" + problems.front() + ")");
    }
    if (info.path.empty() && automatic) {
      for (const auto& s : skipped) warn("checkpoint " + s + " is damaged");
      log("--resume auto: no intact checkpoint in " + checkpoints_dir() + "; starting the run at step 0");
      return std::nullopt;
    }
    if (info.path.empty())
      throw Error(ErrorKind::checkpoint, checkpoints_dir() + ": every checkpoint is damaged, the newest: " + skipped.front());
    for (const auto& s : skipped) warn("checkpoint " + s + " is damaged; resuming from " + info.tag + " instead");
    if (automatic) log("--resume auto: resuming " + info.path + " (step " + std::to_string(info.step) + ")");
  } else {
    info = checkpoint::open_checkpoint(opt.resume);
    const auto problems = checkpoint::verify_checkpoint(info);
    if (!problems.empty())
      throw Error(ErrorKind::checkpoint, problems.front() + "; resume from another checkpoint (or --resume latest)");
  }
  const auto saved = config::load_config_string(info.meta.value("config", ""), info.path + "/meta.json");
  const auto diffs = resume_mismatches(saved.config, cfg);
  if (!diffs.empty()) {
    std::string msg = info.path + ": the config differs from the checkpoint's in keys that define the run:";
    for (const auto& d : diffs) msg += "\n  " + d;
    msg += "\nChange them back, or start a new run.";
    throw Error(ErrorKind::checkpoint, msg);
  }
  if (!info.meta.contains("sharding"))
    throw Error(ErrorKind::checkpoint, info.path + ": saved by an older ZeroStudio (checkpoint version 1, "
                                                   "unsharded); this build resumes version 2 checkpoints only");
  step = info.step;
  return info;
}

void Trainer::State::park_frozen_if_cached() {
  // Every input the loader can make is cached: the VAE and text encoders have no work in
  // training, so they leave the device (sampling's prompts are encoded first; the decoder comes
  // back for each sampling).
  const CacheNeeds needs = cache_needs(*loader, true, 0, 1, sampling_captions(cfg));
  const CacheMissing missing = cache_missing(needs, latent_cache.get(), text_cache.get());
  if (!needs.finite) {
    log("frozen parts stay on the device: shuffled tags make captions the text cache cannot hold in advance");
    return;
  }
  if (missing.total() > 0) {
    log("frozen parts stay on the device: the caches lack " + std::to_string(missing.images) + " of " +
        std::to_string(needs.images.size()) + " latents and " + std::to_string(missing.captions) + " of " +
        std::to_string(needs.captions.size()) + " captions (`zerostudio cache` fills them before training)");
    return;
  }
  std::vector<std::string> prompts = cfg.sampling.prompts;
  prompts.push_back(cfg.sampling.negative_prompt);  // guidance's unconditional prompt ("" unless set)
  const std::int64_t bytes = model->frozen_bytes();
  model->park_frozen(device, prompts, text_cache.get());
  log("frozen parts off the device: the caches hold all " + std::to_string(needs.images.size()) + " latents and " +
      std::to_string(needs.captions.size()) + " captions, so the VAE and text encoders (" +
      std::to_string(bytes >> 20) + " MiB) leave " + device.str() +
      (device.is_cpu() ? " (released; read again from the model files to decode samples)" : " for CPU memory"));
}

void Trainer::State::choose_device() {
  // Device.
  // One GPU per rank on each machine: LOCAL_RANK's (the communicator made it NCCL's device too).
  if (!cfg.launch.use_cpu && torch::cuda::is_available())
    device = at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(comm->local_rank() % torch::cuda::device_count()));
  compute = compute_dtype(cfg.precision, device);  // fp16 without CUDA fails here, naming bf16
  if (opt.loss_scaling.value_or(cfg.precision == "fp16"))
    scaler = std::make_unique<LossScaler>(loss_scaler_options(cfg.loss_scaling));
}

data::MetadataOptions Trainer::State::dataset_scan() {
  return metadata_options(cfg.data, [this](const std::string& w) { warn(w); });
}

void Trainer::State::build_model(const std::optional<checkpoint::CheckpointInfo>& ckpt,
                                 const std::vector<data::DataItem>& items) {
  // Model, built by its family. With zero3_init_flag at stage 3 each denoiser unit is built (or
  // loaded) and cut to this rank's shard before the next exists, so no rank ever holds it whole.
  const std::string model_dir = (fs::path(run_dir) / "model").string();
  models::UnitBuilt on_unit;
  const models::ModelFamily& family = models::family_of(cfg);
  trained = models::resolve_trained_parts(cfg);
  const bool lora = trained.lora;
  std::unique_ptr<QuantizedBaseLoad> base_load;
  if (config::quantizes_while_loading(cfg)) {
    // model.base_precision: each block unit's Linear weights become codes and scales as soon as the
    // unit is read (the optimizer lays them out later), so the base is never whole in its file
    // precision in host memory; a copy kept in the cache folder is read instead of the model
    // files. (Resuming too: a LoRA checkpoint holds the adapters, the base comes from the files.)
    base_load = std::make_unique<QuantizedBaseLoad>(quant::base_format_from_string(cfg.model.base_precision),
                                                    quantized_base_dir(cfg), rank == 0,
                                                    [this](const std::string& w) { warn(w); });
    on_unit = base_load->callback();
    if (cfg.zero.stage == 3 && cfg.zero.zero3_init_flag)
      log("zero3_init_flag: the " + cfg.model.base_precision + " base is quantized unit by unit as it loads instead "
          "(each rank holds it quantized until the optimizer keeps its shards)");
  } else if (config::builds_into_shards(cfg)) {
    // LoRA's frozen base from model files too: each rank reads only its shards (the adapters take
    // their shapes from the layers' options, not the emptied weights).
    sharded_init = make_sharded_init(cfg, world, rank);
    on_unit = sharded_init->callback();
  } else if (cfg.zero.stage == 3 && cfg.zero.zero3_init_flag) {
    // A preset's base is built here and saved beside the run for its adapter checkpoints: it must
    // exist whole once.
    log("zero3_init_flag: not used for LoRA on a preset (its base is written whole to the run's model folder)");
  }
  if (ckpt) {
    // Resuming into another run directory takes the model description from the checkpoint's run.
    const std::string ckpt_model = (fs::path(ckpt->path).parent_path().parent_path() / "model").string();
    const bool here = family.is_model_folder(model_dir);
    model = family.load_folder(here ? model_dir : ckpt_model, on_unit);
    if (!here) model->save_folder(model_dir);
  } else {
    // What the model's family builds or loads: the tiny preset needs the dataset's words.
    std::vector<std::string> captions;
    for (const auto& it : items) captions.push_back(it.caption);
    model = family.build(cfg, captions, on_unit);
    if (rank == 0) model->save_folder(model_dir);
  }
  if (base_load)
    if (const std::string said = base_load->summary(cfg.model.base_precision); !said.empty()) log(said);
  if (sharded_init && sharded_init->sharded_units() == 0) {
    log("zero3_init_flag: no unit was built into shards (the model is loaded whole, or every unit stays whole at "
        "stage 3)");
    sharded_init.reset();
  }
  model->configure(cfg);  // the run's settings (a loaded model folder carries none)
  model->set_text_training(trained.text);
  if (checkpoint_needs_base(trained, *model)) {
    // The checkpoints will hold adapters (or leave a frozen encoder out): they name the base, and
    // a resumed run must find the same one. A preset's base goes into the run's model folder when
    // the run starts, or when it resumes into another folder.
    const bool base_here = family.has_saved_base(model_dir);
    if ((!ckpt || !base_here) && rank == 0) save_preset_base(*model, model_dir);
    if (main_rank()) {
      base_model = base_model_reference(*model, model_dir);
      if (ckpt && ckpt->meta.contains("base_model")) check_base_model(ckpt->meta["base_model"], base_model, ckpt->path);
    }
  }
  // Frozen parts to the compute dtype while still in CPU memory, then to the device; the denoiser
  // (trained, or LoRA's frozen base) goes there unit by unit as the optimizer takes it, so loading
  // never puts the whole model on the device at full precision.
  // model.text_encoder_precision: from their loaded precision, before the cast below.
  if (const std::string said = quantize_text_encoders(cfg, *model); !said.empty()) log(said);
  model->frozen_to(compute);
  model->to(device, /*with_denoiser=*/false);
  place_quantized_weights(*model, device);
  if (lora || trained.text == models::TextEncoderTraining::lora) {
    const std::size_t adapted = attach_adapters(cfg, trained, *model);
    log("LoRA: " + std::to_string(adapted) + " layers adapted (rank " + std::to_string(cfg.lora.rank) + ", alpha " +
        nlohmann::json(lora_options(cfg.lora).alpha).dump() + (lora ? ", denoiser" : "") +
        (trained.text == models::TextEncoderTraining::lora ? ", text encoders" : "") + ")" +
        (lora && cfg.zero.stage == 3 ? "; the frozen base is partitioned over the ranks like trained units" : ""));
    if (lora && !cfg.lora.init_from.empty() && !ckpt) {
      const std::size_t set = model->load_lora_file(cfg.lora.init_from);
      log("LoRA: " + std::to_string(set) + " adapters start from " + cfg.lora.init_from + " (lora.init_from)");
    }
  }
  model->train(true);
  model->set_gradient_checkpointing(cfg.training.gradient_checkpointing, cfg.training.cpu_checkpointing);
  if (cfg.training.cpu_checkpointing && !cfg.training.gradient_checkpointing)
    log("training.cpu_checkpointing does nothing without training.gradient_checkpointing: true");
  models::AttentionOptions attention;
  attention.mode = models::parse_attention_mode(cfg.training.attention);
  model->set_attention(attention);
  objective = model->objective();
  n_params = 0;
  for (const auto& [n, p] : model->named_parameters()) n_params += p.numel();
  if (sharded_init) {
    n_params += sharded_init->sharded_numel();  // their parameters are empty here
    log("zero3_init_flag: " + std::to_string(sharded_init->sharded_units()) + " units (" +
        std::to_string(sharded_init->sharded_numel()) + " parameters) built straight into shards; this rank holds 1/" +
        std::to_string(world) + " of them");
  }
}

void Trainer::State::build_data(std::vector<data::DataItem> items) {
  const std::string data_path = config::dataset_folder(cfg, run_dir);
  const data::MetadataOptions scan = dataset_scan();

  data::LoaderOptions lo = loader_options(cfg);
  lo.shard = rank;
  lo.num_shards = world;
  if (lo.buckets) {
    const std::int64_t f = model->pixel_factor();
    if (lo.bucket_step % f != 0)
      throw Error(ErrorKind::config, "data.bucket_step: " + std::to_string(lo.bucket_step) + " must be a multiple of " +
                                         std::to_string(f) + " (this model's down-sampling)");
  }
  Caches caches = open_caches(cfg, *model);
  latent_cache = std::move(caches.latents);
  text_cache = std::move(caches.texts);
  if (latent_cache) {
    lo.content_keys = true;
    log("latent cache: " + latent_cache->dir());
  }
  if (text_cache) log("text-embedding cache: " + text_cache->dir());
  // After the model: the tiny preset's vocabulary comes from every image of data.path.
  validation_items = split_validation(cfg, data_path, items, scan);
  loader = std::make_unique<data::DataLoader>(std::move(items), lo, [this](const std::string& w) { warn(w); });
  // training.epochs: the length follows from the loader's epoch, here and in everything that
  // reads max_steps after this (the loop, the schedule, events, the last save and sample).
  run = run_length(cfg, loader->batches_per_epoch(), world);
  if (run.by_epochs) {
    cfg.training.max_steps = run.steps;
    run.images = static_cast<std::int64_t>(loader->size());
    log("training.epochs: " + run.describe(cfg));
  }
  lr = std::make_unique<LrSchedule>(cfg);
  if (latent_cache && text_cache) park_frozen_if_cached();
}

void Trainer::State::start_loader(const std::optional<checkpoint::CheckpointInfo>& ckpt) {
  // After restore: a resumed run's loader carries on after the batches its checkpoint consumed.
  loader->start(batches_consumed);
  const std::string data_path = config::dataset_folder(cfg, run_dir);
  emit(event::run_start, {{"run_dir", run_dir},
                       {"resumed_from", ckpt ? json(ckpt->path) : json(nullptr)},
                       {"max_steps", cfg.training.max_steps},
                       {"steps_per_epoch", run.steps_per_epoch},
                       {"epochs", cfg.training.epochs ? json(*cfg.training.epochs) : json(nullptr)},
                       {"parameters", n_params},
                       {"world_size", world},
                       {"device", device.str()},
                       {"dataset", data_path},
                       {"dataset_size", loader->size()},
                       {"validation_size", validation_items.size()}});
}

}  // namespace zs::train
