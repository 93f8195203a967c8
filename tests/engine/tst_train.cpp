// Trainer pieces: LR schedules, loss scaling, checkpoints, resume rules, events.
#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <set>
#include <tuple>

#include <fstream>

#include <nlohmann/json.hpp>

#include "config/schema.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/checkpoint_meta.h"
#include "config/config_loader.h"
#include "core/error.h"
#include "io/atomic_file.h"
#include "train/events.h"
#include "train/loss_scaler.h"
#include "train/loss_smoother.h"
#include "train/lr_schedule.h"
#include "train/trainer.h"
#include "data/dataset.h"
#include "data/latent_cache.h"
#include "data/shapes.h"
#include "models/sd/diffusion_model.h"
#include "train/frozen_cache.h"
#include "train/image_logger.h"
#include "train/run_length.h"

#include <QTemporaryDir>
#include <QtTest>

#include "model_support.h"
#include "test_support.h"

using namespace zs;
namespace fs = std::filesystem;

namespace {
config::TrainerConfig config_with(const std::vector<std::string>& sets) {
  return config::load_config_string("", "test", sets).config;
}
}  // namespace

class TestTrain : public QObject {
  Q_OBJECT

 private slots:
  void lrSchedules() {
    auto c = config_with({"optimizer.lr=0.01", "scheduler.type=WarmupLR", "scheduler.warmup_steps=100",
                          "scheduler.warmup_min_lr=0.001", "scheduler.warmup_type=linear", "training.max_steps=1000"});
    train::LrSchedule warm(c);
    QCOMPARE(warm.lr(0), 0.001);
    QVERIFY(std::abs(warm.lr(50) - 0.0055) < 1e-12);
    QCOMPARE(warm.lr(100), 0.01);
    QCOMPARE(warm.lr(999), 0.01);
    // DeepSpeed's log warmup: min + (max - min) * log(step + 1) / log(warmup).
    c.scheduler.warmup_type = "log";
    QVERIFY(std::abs(train::LrSchedule(c).lr(9) - (0.001 + 0.009 * std::log(10.0) / std::log(100.0))) < 1e-12);
    c.scheduler.type = "WarmupDecayLR";
    c.scheduler.min_lr = 0.0;
    QVERIFY(std::abs(train::LrSchedule(c).lr(550) - 0.005) < 1e-12);
    QCOMPARE(train::LrSchedule(c).lr(1000), 0.0);
    c.scheduler.type = "cosine";
    c.scheduler.min_lr = 0.002;
    QVERIFY(std::abs(train::LrSchedule(c).lr(550) - 0.006) < 1e-12);
    // total_steps fixes the schedule's length whatever max_steps says.
    c.scheduler.total_steps = 2000;
    c.training.max_steps = 500;
    QCOMPARE(train::LrSchedule(c).total_steps(), std::int64_t{2000});
    QVERIFY(train::LrSchedule(c).lr(499) > 0.009);
  }

  // DeepSpeed's DynamicLossScaler rules (deepspeed/runtime/fp16/loss_scaler.py).
  // The smoothed loss is debiased as TensorBoard's: the first value is itself (not pulled
  // towards 0 or the first loss), a constant stays that constant, and a checkpointed state
  // continues exactly.
  void smoothedLossIsDebiased() {
    zs::train::LossSmoother s(0.9);
    QCOMPARE(s.value(), 0.0);
    QCOMPARE(s.add(2.0), 2.0);
    QVERIFY(std::abs(s.add(2.0) - 2.0) < 1e-12);
    // 1 then 0: (0.09·1 + 0.1·0) / (1 − 0.81) = 0.4737, where an undebiased EMA seeded with the
    // first value says 0.9.
    zs::train::LossSmoother t(0.9);
    t.add(1.0);
    QVERIFY(std::abs(t.add(0.0) - 0.09 / 0.19) < 1e-12);
    zs::train::LossSmoother u(0.9);
    u.restore(t.last(), t.count());
    QCOMPARE(u.add(0.5), t.add(0.5));
  }

  void lossScalerFollowsDeepSpeed() {
    train::LossScaler s({0, 16, 2, 2, 1});  // dynamic from 2^16, window 2, hysteresis 2
    QCOMPARE(s.scale(), 65536.0);
    s.update(true);  // the first overflow only uses up the hysteresis
    QCOMPARE(s.scale(), 65536.0);
    s.update(true);  // the second lowers the scale
    QCOMPARE(s.scale(), 32768.0);
    s.update(false);  // one clean step since the overflow: (2 - 1) % 2 != 0
    QCOMPARE(s.scale(), 32768.0);
    s.update(false);  // two: doubles, hysteresis restored
    QCOMPARE(s.scale(), 65536.0);
    s.update(true);
    QCOMPARE(s.scale(), 65536.0);  // hysteresis again
    QCOMPARE(s.skipped(), std::int64_t{3});
    // The state survives a checkpoint.
    train::LossScaler copy({0, 16, 2, 2, 1});
    copy.load(s.state());
    s.update(true);
    copy.update(true);
    QCOMPARE(copy.scale(), s.scale());
    // At the lowest scale an overflow means training cannot go on.
    train::LossScaler low({0, 1, 1000, 1, 1});
    low.update(true);
    QCOMPARE(low.scale(), 1.0);
    QVERIFY(!low.stuck());
    low.update(true);
    QVERIFY(low.stuck());
    // A static scale never moves, but overflowed steps still count as skipped.
    train::LossScaler fixed({128, 16, 1, 1, 1});
    fixed.update(true);
    fixed.update(false);
    QCOMPARE(fixed.scale(), 128.0);
    QCOMPARE(fixed.skipped(), std::int64_t{1});
  }

  void checkpointsAreAtomicAndPruned() {
    QTemporaryDir dir;
    const std::string root = dir.path().toStdString();
    for (int step : {10, 20, 30}) {
      const auto info = checkpoint::save_checkpoint(root, "step_" + std::to_string(step),
                                                    {{"model.safetensors", {{"w", at::full({4}, step)}}}},
                                                    {{"step", step}, {"reason", "periodic"}});
      QVERIFY(info.bytes > 0);
      QCOMPARE(info.step, std::int64_t{step});
    }
    checkpoint::save_checkpoint(root, "step_25", {{"model.safetensors", {{"w", at::zeros({1})}}}},
                                {{"step", 25}, {"reason", "stopped"}});
    fs::create_directories(root + "/.step_40.tmp");  // a crash mid-write leaves only a hidden folder
    fs::create_directories(root + "/notes");
    QCOMPARE(checkpoint::list_checkpoints(root).size(), std::size_t{4});
    const auto deleted = checkpoint::prune_checkpoints(root, 2);
    QCOMPARE(deleted, (std::vector<std::string>{"step_10"}));
    const auto left = checkpoint::list_checkpoints(root);
    QCOMPARE(left.size(), std::size_t{3});
    QCOMPARE(left.back().tag, std::string("step_30"));
    // keep_last 1 + keep_best 1: the newest and the lowest smoothed loss survive; other reasons
    // (stopped, overwrite) are never pruned.
    const std::vector<std::pair<int, double>> saves = {{40, 0.5}, {50, 0.2}, {60, 0.4}, {70, 0.3}};
    for (const auto& [step, loss] : saves)
      checkpoint::save_checkpoint(root, "step_" + std::to_string(step), {{"model.safetensors", {{"w", at::zeros({1})}}}},
                                  {{"step", step}, {"reason", step == 60 ? "timed" : "periodic"}, {"smoothed_loss", loss}});
    checkpoint::save_checkpoint(root, "overwrite", {{"model.safetensors", {{"w", at::zeros({1})}}}},
                                {{"step", 65}, {"reason", "overwrite"}});
    auto gone = checkpoint::prune_checkpoints(root, 1, 1);
    std::sort(gone.begin(), gone.end());
    QCOMPARE(gone, (std::vector<std::string>{"step_20", "step_30", "step_40", "step_60"}));
    std::vector<std::string> tags;
    for (const auto& c : checkpoint::list_checkpoints(root)) tags.push_back(c.tag);
    QCOMPARE(tags, (std::vector<std::string>{"step_25", "step_50", "overwrite", "step_70"}));
    // keep_best by val_loss (checkpointing.monitor): the lowest val_loss survives although its
    // smoothed training loss is the highest; one without a val_loss ranks last.
    const std::vector<std::tuple<int, double, double>> validated = {{80, 0.1, 0.9}, {90, 0.9, 0.2}, {100, 0.5, 0.5}};
    for (const auto& [step, loss, val] : validated)
      checkpoint::save_checkpoint(root, "step_" + std::to_string(step), {{"model.safetensors", {{"w", at::zeros({1})}}}},
                                  {{"step", step}, {"reason", "periodic"}, {"smoothed_loss", loss}, {"val_loss", val}});
    gone = checkpoint::prune_checkpoints(root, 1, 1, "val_loss");
    std::sort(gone.begin(), gone.end());
    QCOMPARE(gone, (std::vector<std::string>{"step_50", "step_70", "step_80"}));
    try {
      checkpoint::open_checkpoint(root + "/notes");
      QFAIL("opened a folder without meta.json");
    } catch (const Error& e) {
      QVERIFY2(QString(e.what()).contains("notes: not a checkpoint folder"), e.what());
    }
  }

  // meta.json is one typed struct (checkpoint/checkpoint_meta.h) written by save and read by
  // restore: every field survives the round trip, an old checkpoint's missing keys take their
  // defaults, and a value of the wrong type is an error naming the folder and the key.
  void checkpointMetaRoundTrips() {
    checkpoint::CheckpointMeta m;
    m.step = 12;
    m.optimizer_steps = 11;
    m.batches_consumed = 48;
    m.samples_seen = 96;
    m.epoch = 1.5;
    m.loss = 0.25;
    m.smoothed_loss = 0.3;
    m.smoothed_state = std::make_pair(0.31, std::int64_t{12});
    m.val_loss = 0.4;
    m.val_loss_step = 10;
    m.lr = 1e-4;
    m.time = 1.7e9;
    m.reason = "periodic";
    m.world_size = 2;
    m.stage = 3;
    m.precision = "bf16";
    m.config_hash = "abc";
    m.config = "version: 1\n";
    m.sharding = {{"world_size", 2}};
    m.base_model = {{"path", "/models/x"}};
    m.lora = checkpoint::LoraMeta{16, 8.0, true, false, 0.1};
    m.loss_scaler = checkpoint::LossScalerMeta{1024.0, 7, 3, 2, 1};
    const nlohmann::json j = m.to_json();
    const auto back = checkpoint::CheckpointMeta::from_json(j, "ckpt");
    QCOMPARE(back.to_json(), j);
    QCOMPARE(back.lora->rank, std::int64_t{16});
    QCOMPARE(back.loss_scaler->hysteresis, 2);
    const auto old = checkpoint::CheckpointMeta::from_json({{"step", 5}}, "old");
    QCOMPARE(old.optimizer_steps, std::int64_t{5});
    QVERIFY(!old.samples_seen && !old.smoothed_state && !old.val_loss && !old.lora && !old.loss_scaler);
    try {
      checkpoint::CheckpointMeta::from_json({{"step", "twelve"}}, "checkpoints/step_12");
      QFAIL("read a step that is text");
    } catch (const Error& e) {
      QVERIFY2(QString(e.what()).contains("checkpoints/step_12: meta.json key 'step'"), e.what());
    }
  }

  void resumeRefusesChangedKeys() {
    const auto a = config_with({"training.seed=1", "optimizer.lr=0.001", "data.resolution=32"});
    auto b = config_with({"training.seed=2", "optimizer.lr=0.002", "data.resolution=32", "training.max_steps=99"});
    const auto diffs = train::resume_mismatches(a, b);
    QCOMPARE(diffs.size(), std::size_t{1});
    QVERIFY2(QString::fromStdString(diffs[0]).startsWith("training.seed: checkpoint 1, config 2"), diffs[0].c_str());
  }

  // The keys that define a run are a schema flag (config/schema.h: defines_run), the same set
  // trainer.cpp listed by hand before issue 33: the model, the data (not its caches or
  // workers), the seed, method, trained encoders and batch size, the adapters, the optimizer
  // (not its learning rates) and validation.fraction.
  void runDefiningKeysAreTheSchemasFlag() {
    std::vector<std::string> flagged;
    for (const auto& f : config::schema_fields())
      if (f.defines_run) flagged.push_back(f.path);
    const std::set<std::string> speed_only = {"data.cache_latents", "data.cache_text_embeddings",
                                              "data.cache_quantized_base", "data.latent_cache_dir", "data.num_workers"};
    std::vector<std::string> expected;
    for (const auto& f : config::schema_fields()) {
      const std::string& k = f.path;
      const bool fixed = k.starts_with("model.") || k.starts_with("data.") || k == "training.seed" ||
                         k == "training.method" || k == "training.train_text_encoder" || k.starts_with("lora.") ||
                         k == "validation.fraction" || k == "training.batch_size" ||
                         (k.starts_with("optimizer.") && k != "optimizer.lr" && k != "optimizer.text_encoder_lr");
      if (fixed && !speed_only.count(k)) expected.push_back(k);
    }
    QCOMPARE(flagged, expected);
    QVERIFY(std::find(flagged.begin(), flagged.end(), "data.metadata.min_score") != flagged.end());
  }

  // training.epochs → steps: epochs × ceil(images × repeats / (batch × processes × accumulation)),
  // from the one function the trainer and `config validate` read (here through the demo set
  // a config would generate, so nothing is read from disk).
  void runLengthFollowsEpochs_data() {
    QTest::addColumn<qint64>("images");
    QTest::addColumn<qint64>("batch");
    QTest::addColumn<qint64>("processes");
    QTest::addColumn<qint64>("accumulation");
    QTest::addColumn<qint64>("repeats");
    QTest::addColumn<qint64>("epochs");
    QTest::addColumn<qint64>("expected");
    QTest::newRow("quickstart") << qint64{2048} << qint64{32} << qint64{1} << qint64{1} << qint64{1} << qint64{3} << qint64{192};
    QTest::newRow("partial batch") << qint64{10} << qint64{4} << qint64{1} << qint64{1} << qint64{1} << qint64{2} << qint64{6};
    QTest::newRow("processes") << qint64{100} << qint64{4} << qint64{3} << qint64{1} << qint64{1} << qint64{2} << qint64{18};
    QTest::newRow("accumulation") << qint64{100} << qint64{4} << qint64{1} << qint64{3} << qint64{1} << qint64{1} << qint64{9};
    QTest::newRow("all four") << qint64{37} << qint64{2} << qint64{2} << qint64{2} << qint64{3} << qint64{4} << qint64{56};
    QTest::newRow("seed 003: repeat 50, 5 epochs") << qint64{20} << qint64{1} << qint64{1} << qint64{1} << qint64{50}
                                                   << qint64{5} << qint64{5000};
    QTest::newRow("fewer than one step") << qint64{3} << qint64{2} << qint64{4} << qint64{2} << qint64{1} << qint64{7} << qint64{7};
  }
  void runLengthFollowsEpochs() {
    QFETCH(qint64, images);
    QFETCH(qint64, batch);
    QFETCH(qint64, processes);
    QFETCH(qint64, accumulation);
    QFETCH(qint64, repeats);
    QFETCH(qint64, epochs);
    QFETCH(qint64, expected);
    QCOMPARE(expected, epochs * ((images * repeats + batch * processes * accumulation - 1) / (batch * processes * accumulation)));
    QTemporaryDir dir;
    const std::string missing = (dir.path() + "/not-yet").toStdString();
    auto cfg = config_with({"data.generate=shapes", "data.generate_count=" + std::to_string(images),
                            "training.batch_size=" + std::to_string(batch), "launch.num_processes=" + std::to_string(processes),
                            "training.gradient_accumulation_steps=" + std::to_string(accumulation),
                            "data.repeats=" + std::to_string(repeats), "training.epochs=" + std::to_string(epochs),
                            "training.max_steps=3"});
    const train::RunLength r = train::plan_run_length(cfg, missing);
    QVERIFY(r.by_epochs);
    QCOMPARE(r.steps, std::int64_t{expected});
    QCOMPARE(r.steps_per_epoch * epochs, std::int64_t{expected});
    QVERIFY2(QString::fromStdString(r.describe(cfg)).endsWith(" = " + QString::number(expected) + " steps"), r.describe(cfg).c_str());
    cfg.training.epochs.reset();  // without epochs, max_steps decides
    QCOMPARE(train::plan_run_length(cfg, missing).steps, std::int64_t{3});
  }

  // A run by epochs: the trainer derives max_steps (run_start says so), stops after its last
  // epoch, and a resumed run derives the same count and ends at the same step and epoch.
  void trainerRunsByEpochsAndResumesToTheSameLength() {
    QTemporaryDir dir;
    // 12 images × 2 repeats in batches of 4 × 2 accumulated: 3 steps per epoch, 6 in 2 epochs.
    const auto cfg = test::small_config({"data.generate_count=12", "training.batch_size=4", "data.repeats=2",
                                         "training.gradient_accumulation_steps=2", "training.epochs=2",
                                         "sampling.every_n_steps=0", "checkpointing.every_n_steps=2", "ema.enabled=false",
                                         "scheduler.type=constant", "launch.use_cpu=true"});
    train::TrainerOptions first;
    first.run_dir = (dir.path() + "/run").toStdString();
    train::TrainerCommands stop;
    first.on_step = [&](std::int64_t step, std::int64_t total, double, double) {
      QCOMPARE(total, std::int64_t{6});
      if (step == 2) stop.request_stop();
    };
    QCOMPARE(train::Trainer(cfg, first).run(stop).step, std::int64_t{2});
    train::TrainerOptions again;
    again.run_dir = first.run_dir;
    again.resume = "latest";
    train::TrainerCommands commands;
    const auto end = train::Trainer(cfg, again).run(commands);
    QCOMPARE(end.step, std::int64_t{6});
    const auto events = test::read_events(first.run_dir);
    int starts = 0;
    double last_epoch = -1;
    for (const auto& e : events) {
      if (e["type"] == "run_start") {
        ++starts;
        QCOMPARE(e["max_steps"].get<std::int64_t>(), std::int64_t{6});
        QCOMPARE(e["steps_per_epoch"].get<std::int64_t>(), std::int64_t{3});
      }
      if (e["type"] == "metrics" && e.contains("epoch")) last_epoch = e["epoch"].get<double>();
    }
    QCOMPARE(starts, 2);
    QCOMPARE(last_epoch, 2.0);
  }

  // A full disk: the event log's reserve (kept allocated past its end) still takes the run's
  // last events whole; past the reserve a line is lost whole (to stderr), never cut, and the
  // file stays one JSON object per line (issue 59 item 5: 5 of 7 full-disk runs ended with a
  // partial last line and no run_end).
  void eventLogKeepsWholeLinesOnAFullDisk() {
    QTemporaryDir dir;
    const test::SmallDisk disk(dir.path() + "/disk", 256 * 1024);
    if (!disk.mounted()) ZS_SKIP_UNLESS_CI(disk.why());
    const std::string path = (dir.path() + "/disk/events.jsonl").toStdString();
    std::int64_t lost = 0;
    {
      train::EventLog log(path);
      log.write("run_start", 0, {{"max_steps", 100}});
      disk.fill();
      for (int i = 1; i <= 100; ++i) log.write("metrics", i, {{"loss", 0.25 + i * 1e-3}, {"lr", 1e-4}});
      log.write("save_failed", 100, {{"message", "no space left"}});
      log.write("run_end", 100, {{"reason", "save_failed"}, {"exit_code", 3}});
      QCOMPARE(log.lost(), std::int64_t{0});
      for (int i = 0; i < 2000; ++i) log.write("metrics", 100, {{"loss", 0.5}, {"note", std::string(40, 'y')}});
      lost = log.lost();
    }
    QVERIFY2(lost > 0, "the reserve never ran out: the test did not fill the disk");
    std::ifstream in(path);
    int lines = 0;
    bool ended = false;
    for (std::string line; std::getline(in, line); ++lines) {
      const auto e = nlohmann::json::parse(line, nullptr, false);
      QVERIFY2(e.is_object(), line.c_str());
      ended |= e["type"] == "run_end";
    }
    QVERIFY(ended);
    QCOMPARE(lines, 103 + 2000 - static_cast<int>(lost));
  }

  // sampling.every_n_steps 0 means no samples at all, the last step included; a sample folder that
  // cannot be written (a full disk) is a warning and the run finishes
  // (issue 59 item 6: it ended the run, exit 1).
  void samplesOffMeansNoneAndAFailedWriteIsAWarning() {
    QTemporaryDir dir;
    const std::vector<std::string> base = {"data.generate_count=8", "training.batch_size=4", "training.max_steps=2",
                                           "checkpointing.every_n_steps=0", "ema.enabled=false", "launch.use_cpu=true",
                                           "scheduler.type=constant"};
    auto with = [&](std::vector<std::string> more) {
      more.insert(more.begin(), base.begin(), base.end());
      return test::small_config(more);
    };
    train::TrainerOptions off;
    off.run_dir = (dir.path() + "/off").toStdString();
    train::TrainerCommands commands;
    QCOMPARE(train::Trainer(with({"sampling.every_n_steps=0"}), off).run(commands).step, std::int64_t{2});
    QVERIFY2(QDir(dir.path() + "/off/samples").isEmpty(), "every_n_steps 0 wrote samples");
    for (const auto& e : test::read_events(off.run_dir)) QVERIFY(e["type"] != "samples");

    // The samples folder on a full disk (a tmpfs of one page, filled).
    train::TrainerOptions full;
    full.run_dir = (dir.path() + "/full").toStdString();
    const test::SmallDisk disk(dir.path() + "/full/samples", 4096);
    if (!disk.mounted()) ZS_SKIP_UNLESS_CI(disk.why());
    disk.fill();
    const auto end = train::Trainer(with({"sampling.every_n_steps=1"}), full).run(commands);
    QCOMPARE(end.step, std::int64_t{2});
    int warnings = 0;
    bool finished = false;
    for (const auto& e : test::read_events(full.run_dir)) {
      QVERIFY(e["type"] != "samples" && e["type"] != "error");
      if (e["type"] == "warning" && e["message"].get<std::string>().find("samples of step ") == 0) ++warnings;
      if (e["type"] == "run_end") finished = e["reason"] == "finished";
    }
    QCOMPARE(warnings, 2);
    QVERIFY(finished);
  }

  // sampling.negative_prompt conditions guidance's unconditional branch, and the text cache
  // holds it (`zerostudio cache` fills it with the captions), so a cache-complete run parks the
  // encoders and samples without bringing them back for it.
  void negativePromptIsTheUnconditionalBranch() {
    ZS_REQUIRE_SHARED();
    QTemporaryDir dir;
    const std::string pipeline = (dir.path() + "/tiny-sdxl").toStdString();
    fs::create_directories(pipeline);
    test::write_tiny_sdxl(pipeline);
    models::DiffusionModel m = models::DiffusionModel::load_pipeline(pipeline, "epsilon");
    m.train(false);
    const std::vector<std::string> prompts = {"a red fox"};
    auto sample = [&](double scale, const std::string& negative) {
      return train::sample_images(m, prompts, 1, 32, 2, scale, 3, at::kCPU, negative);
    };
    const at::Tensor plain = sample(4.0, ""), negative = sample(4.0, "a blue bird");
    QVERIFY(!at::allclose(plain, negative));
    QVERIFY(at::equal(train::sample_images(m, prompts, 1, 32, 2, 4.0, 3, at::kCPU), plain));  // "" is the default
    // At scale 0 guidance returns the unconditional prediction alone: the negative prompt's image.
    const at::Tensor uncond = sample(0.0, "a blue bird");
    const at::Tensor direct = train::sample_images(m, {"a blue bird"}, 1, 32, 2, 1.0, 3, at::kCPU);
    QVERIFY2(at::allclose(uncond, direct, 1e-4, 1e-4), qPrintable(QString::number((uncond - direct).abs().max().item<double>())));

    // The cache: the negative prompt is among what `zerostudio cache` stores.
    auto cfg = config_with({"model.path=" + pipeline, "data.resolution=32", "data.caption_dropout=0",
                            "data.latent_cache_dir=" + (dir.path() + "/cache").toStdString()});
    cfg.sampling.prompts = prompts;
    cfg.sampling.negative_prompt = "a blue bird";
    QCOMPARE(train::sampling_captions(cfg), std::vector<std::string>{"a blue bird"});
    data::generate_shapes_dataset((dir.path() + "/data").toStdString(), 2, 32, 1);
    data::LoaderOptions lo = train::loader_options(cfg);
    lo.num_workers = 0;
    lo.content_keys = true;
    data::DataLoader loader(data::scan_dataset((dir.path() + "/data").toStdString()), lo);
    const train::CacheNeeds needs = train::cache_needs(loader, true, 0, 1, train::sampling_captions(cfg));
    QVERIFY(std::count(needs.captions.begin(), needs.captions.end(), "a blue bird") == 1);
    const train::Caches caches = train::open_caches(cfg, m);
    QVERIFY(caches.texts);
    train::fill_caches(m, loader, needs, caches.latents.get(), caches.texts.get(), at::kCPU);
    QVERIFY(caches.texts->has(data::LatentCache::text_content_key("a blue bird")));
    QCOMPARE(train::cache_missing(needs, caches.latents.get(), caches.texts.get()).total(), std::int64_t{0});
    // Parked as the trainer parks a cache-complete run: sampling brings back the VAE once (to
    // decode) and never the text encoders.
    m.park_frozen(at::kCPU, {"a red fox", "a blue bird"});
    const at::Tensor parked = sample(4.0, "a blue bird");
    QCOMPARE(m.frozen_visits(), std::int64_t{1});
    QVERIFY(at::equal(parked, negative));
  }

  void eventsAreFlatJsonLines() {
    QTemporaryDir dir;
    const std::string path = (dir.path() + "/events.jsonl").toStdString();
    int heard = 0;
    {
      train::EventLog log(path, [&](const nlohmann::json& e) { heard += e["type"] == "metrics"; });
      log.write("metrics", 5, {{"loss", 0.5}});
      log.write("log", 5, {{"message", "hi"}});
    }
    const std::string text = io::read_file(path);
    const auto first = nlohmann::json::parse(text.substr(0, text.find('\n')));
    QCOMPARE(first["type"].get<std::string>(), std::string("metrics"));
    QCOMPARE(first["step"].get<int>(), 5);
    QCOMPARE(first["loss"].get<double>(), 0.5);
    QVERIFY(first["time"].get<double>() > 1.7e9);
    QCOMPARE(heard, 1);
  }
};

ZS_TEST_MAIN(TestTrain);
#include "tst_train.moc"
