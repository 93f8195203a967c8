// Trainer pieces: LR schedules, loss scaling, checkpoints, resume rules, events.
#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <set>
#include <tuple>

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

#include <QTemporaryDir>
#include <QtTest>

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
    const std::set<std::string> speed_only = {"data.cache_latents", "data.cache_text_embeddings", "data.latent_cache_dir",
                                              "data.num_workers"};
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
