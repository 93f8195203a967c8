// Trainer config: parsing, defaults, every validation rule with its message and location,
// overrides, round trips, and the generated reference.
#include <QFile>
#include <QTemporaryDir>
#include <QtTest>

#include "config/builtin_configs.h"
#include "config/config_loader.h"
#include "config/config_writer.h"
#include "config/family_defaults.h"
#include "config/schema.h"
#include "config/schema_markdown.h"
#include "config/setup_questions.h"
#include "models/model_family.h"
#include "test_support.h"

using namespace zs::config;

namespace {

/// Loads YAML text named "t.yaml"; returns the problems as strings (empty when valid).
QStringList problemsOf(const std::string& yaml, const std::vector<std::string>& overrides = {}) {
  try {
    load_config_string(yaml, "t.yaml", overrides);
  } catch (const ConfigError& e) {
    QStringList out;
    for (const auto& p : e.problems()) out << QString::fromStdString(p.to_string());
    return out;
  }
  return {};
}

}  // namespace

class TestConfig : public QObject {
  Q_OBJECT

 private slots:
  void defaultsFollowDeepSpeed() {
    const TrainerConfig c = TrainerConfig::defaults();
    QCOMPARE(c.version, kSchemaVersion);
    QCOMPARE(c.zero.stage, 0);
    QCOMPARE(c.zero.reduce_bucket_size, 500000000);
    QCOMPARE(c.zero.allgather_bucket_size, 500000000);
    QCOMPARE(c.zero.stage3_prefetch_bucket_size, 50000000);
    QCOMPARE(c.zero.stage3_param_persistence_threshold, 100000);
    QCOMPARE(c.zero.stage3_max_live_parameters, 1000000000);
    QCOMPARE(c.zero.stage3_max_reuse_distance, 1000000000);
    QCOMPARE(c.zero.sub_group_size, 1000000000);
    QVERIFY(c.zero.contiguous_gradients);
    QVERIFY(!c.zero.stage3_gather_16bit_weights_on_model_save);
    QCOMPARE(c.zero.offload_optimizer.device, std::string("none"));
    QCOMPARE(c.zero.offload_optimizer.buffer_count, 4);
    QVERIFY(!c.zero.offload_optimizer.pin_memory);
    QCOMPARE(c.zero.offload_param.buffer_count, 5);
    QCOMPARE(c.zero.offload_param.buffer_size, 100000000);
    QCOMPARE(c.zero.offload_param.max_in_cpu, 1000000000);
    QCOMPARE(c.zero.aio.block_size, 1048576);
    QCOMPARE(c.zero.aio.queue_depth, 8);
    QCOMPARE(c.zero.aio.intra_op_parallelism, 1);
    QVERIFY(!c.zero.aio.single_submit);
    QVERIFY(c.zero.aio.overlap_events);
    QCOMPARE(c.loss_scaling.loss_scale, 0.0);
    QCOMPARE(c.loss_scaling.initial_scale_power, 16);
    QCOMPARE(c.loss_scaling.loss_scale_window, 1000);
    QCOMPARE(c.loss_scaling.hysteresis, 2);
    QCOMPARE(c.loss_scaling.min_loss_scale, 1.0);
    QCOMPARE(c.training.gradient_clipping, 0.0);
    QCOMPARE(c.launch.num_processes, 1);
    QCOMPARE(c.launch.main_process_port, 29500);
    QCOMPARE(c.data.generate, std::string("none"));
    QVERIFY(!c.zero.overlap_comm.has_value());  // the ZeRO plan resolves it (tst_zero)
    // total_steps unset follows max_steps.
    QCOMPARE(c.schedule_steps(), c.training.max_steps);
  }

  void everyKeyHasDocsAndValidDefault() {
    const TrainerConfig c = TrainerConfig::defaults();
    for (const auto& f : schema_fields()) {
      QVERIFY2(!f.doc.empty(), f.path.c_str());
      QVERIFY2(f.get(c) == f.default_value, f.path.c_str());
      QVERIFY2(f.nullable || !std::holds_alternative<std::monostate>(f.default_value), f.path.c_str());
    }
    // The defaults alone form a valid config (an empty file).
    QCOMPARE(problemsOf(""), QStringList());
    QCOMPARE(problemsOf("{}"), QStringList());
  }

  void parsesQuickstart() {
    const auto loaded = load_config_file(zs::test::quickstart().toStdString());
    const TrainerConfig& c = loaded.config;
    QCOMPARE(c.model.preset, std::string("tiny"));
    QCOMPARE(c.data.generate, std::string("shapes"));
    QCOMPARE(c.data.resolution, 16);
    QCOMPARE(c.model.prediction_type, std::string("v_prediction"));
    QCOMPARE(c.sampling.every_n_steps, 250);
    QCOMPARE(c.sampling.prompts.size(), size_t(8));
    // The prompts cover every shape and every palette colour (as the shape's colour).
    std::string all;
    for (const auto& p : c.sampling.prompts) all += p.substr(0, p.find(" on ")) + "|";
    for (const char* w : {"circle", "square", "triangle", "red", "green", "blue", "yellow", "purple", "orange", "white", "black"})
      QVERIFY2(all.find(w) != std::string::npos, w);
    QCOMPARE(c.scheduler.type, std::string("cosine"));
    QVERIFY(c.launch.use_cpu);
    QVERIFY(loaded.is_set("training.max_steps"));
    QVERIFY(!loaded.is_set("zero.stage"));
  }

  void parsesEveryType() {
    const auto c = load_config_string(R"(
precision: BF16            # choices match case-insensitively
training:
  max_steps: 2e3           # DeepSpeed-style whole number
  gradient_checkpointing: yes
  gradient_clipping: 1
zero:
  stage: 3
  reduce_bucket_size: 5e7
  overlap_comm: false
  offload_param: {device: cpu}
  offload_optimizer: {device: cpu}
scheduler:
  type: warmupdecaylr
  total_steps: null
  warmup_steps: 10
optimizer:
  betas: [0.8, 0.95]
sampling:
  prompts: [a red circle, "a: quoted"]
logging:
  run_name: ~
)", "t.yaml").config;
    QCOMPARE(c.precision, std::string("bf16"));
    QCOMPARE(c.training.max_steps, 2000);
    QVERIFY(c.training.gradient_checkpointing);
    QCOMPARE(c.training.gradient_clipping, 1.0);
    QCOMPARE(c.zero.reduce_bucket_size, 50000000);
    QCOMPARE(c.zero.overlap_comm, std::optional<bool>(false));
    QCOMPARE(c.zero.offload_param.device, std::string("cpu"));
    QCOMPARE(c.scheduler.type, std::string("WarmupDecayLR"));
    QVERIFY(!c.scheduler.total_steps);
    QCOMPARE(c.optimizer.betas, (std::vector<double>{0.8, 0.95}));
    QCOMPARE(c.sampling.prompts, (std::vector<std::string>{"a red circle", "a: quoted"}));
    QCOMPARE(c.logging.run_name, std::string(""));
  }

  void validationRule_data() {
    QTest::addColumn<QString>("yaml");
    QTest::addColumn<QString>("expected");  // the problem, with its location
    QTest::newRow("unknown key, did you mean") << "training:\n  max_stepz: 10\n"
                                               << "t.yaml:2:3: training.max_stepz: unknown key; did you mean training.max_steps?";
    QTest::newRow("unknown section") << "zeroo:\n  stage: 1\n"
                                     << "t.yaml:1:1: zeroo: unknown key; did you mean zero?";
    QTest::newRow("leaf under wrong section") << "training:\n  stage: 1\n"
                                              << "t.yaml:2:3: training.stage: unknown key; did you mean zero.stage?";
    QTest::newRow("bool type") << "ema:\n  enabled: maybe\n"
                               << "t.yaml:2:12: ema.enabled: expected true or false, got 'maybe'";
    QTest::newRow("integer type") << "training:\n  max_steps: many\n"
                                  << "t.yaml:2:14: training.max_steps: expected a whole number, got 'many'";
    QTest::newRow("integer not whole") << "training:\n  batch_size: 1.5\n"
                                       << "t.yaml:2:15: training.batch_size: expected a whole number, got '1.5'";
    QTest::newRow("number type") << "optimizer:\n  lr: fast\n"
                                 << "t.yaml:2:7: optimizer.lr: expected a number, got 'fast'";
    QTest::newRow("map where a value belongs") << "optimizer:\n  lr: {a: 1}\n"
                                               << "t.yaml:2:7: optimizer.lr: expected a number, got a map";
    QTest::newRow("stage range") << "zero:\n  stage: 4\n"
                                 << "t.yaml:2:10: zero.stage: must be between 0 and 3 (got 4)";
    QTest::newRow("negative lr") << "optimizer:\n  lr: -1e-4\n"
                                 << "t.yaml:2:7: optimizer.lr: must be >= 0.0 (got -0.0001)";
    QTest::newRow("probability range") << "data:\n  flip_p: 1.5\n"
                                       << "t.yaml:2:11: data.flip_p: must be between 0.0 and 1.0 (got 1.5)";
    QTest::newRow("choice") << "precision: fp8\n"
                            << "t.yaml:1:12: precision: must be one of fp32, fp16, bf16 (got 'fp8')";
    QTest::newRow("list size") << "optimizer:\n  betas: [0.9]\n"
                               << "t.yaml:2:10: optimizer.betas: needs exactly 2 numbers (got 1)";
    QTest::newRow("list item") << "optimizer:\n  betas: [0.9, x]\n"
                               << "t.yaml:2:10: optimizer.betas: item 2 is not a number";
    QTest::newRow("null for a required value") << "training:\n  max_steps:\n"
                                               << "t.yaml:2:3: training.max_steps: needs a value (expected a whole number)";
    QTest::newRow("section given a value") << "zero: 2\n"
                                           << "t.yaml:1:7: zero: is a section: expected a map of its keys (see docs/CONFIG.md)";
    QTest::newRow("top level not a map") << "- a\n- b\n"
                                         << "t.yaml:1:1: the top level must be a map of keys such as `zero:`";
    QTest::newRow("yaml syntax") << "zero:\n  stage: [1\n"
                                 << "t.yaml:3:1: YAML syntax error: end of sequence flow not found";
    QTest::newRow("newer version") << "version: 9\n"
                                   << "t.yaml:1:10: version: this file uses schema version 9, but this ZeroStudio reads up to version 2; update ZeroStudio";
    QTest::newRow("positive steps") << "training:\n  max_steps: 0\n"
                                    << "t.yaml:2:14: training.max_steps: must be >= 1 (got 0)";
    QTest::newRow("positive accumulation") << "training:\n  gradient_accumulation_steps: 0\n"
                                           << "t.yaml:2:32: training.gradient_accumulation_steps: must be >= 1 (got 0)";
    QTest::newRow("positive logging interval") << "logging:\n  every_n_steps: 0\n"
                                               << "t.yaml:2:18: logging.every_n_steps: must be >= 1 (got 0)";
    QTest::newRow("positive ema interval") << "ema:\n  every_n_steps: -2\n"
                                           << "t.yaml:2:18: ema.every_n_steps: must be >= 1 (got -2)";
    QTest::newRow("param offload below stage 3")
        << "zero:\n  stage: 2\n  offload_param:\n    device: cpu\n"
        << "t.yaml:4:13: zero.offload_param.device: parameter offload works with zero.stage 3 only (zero.stage is 2); "
           "set zero.stage: 3 or zero.offload_param.device: none";
    QTest::newRow("param offload with default stage")
        << "zero:\n  offload_param:\n    device: nvme\n    nvme_path: /tmp\n"
        << "t.yaml:3:13: zero.offload_param.device: parameter offload works with zero.stage 3 only (zero.stage is 0); "
           "set zero.stage: 3 or zero.offload_param.device: none";
    QTest::newRow("optimizer offload at stage 0")
        << "zero:\n  offload_optimizer:\n    device: cpu\n"
        << "t.yaml:3:13: zero.offload_optimizer.device: optimizer offload needs zero.stage 1, 2 or 3 (zero.stage is 0); "
           "stage 1 is the cheapest that allows it";
    QTest::newRow("nvme without path")
        << "zero:\n  stage: 3\n  offload_param:\n    device: nvme\n"
        << "t.yaml:3:3: zero.offload_param.nvme_path: offload to nvme needs a folder here (a fast local disk with free space)";
    QTest::newRow("nvme path missing")
        << "zero:\n  stage: 2\n  offload_optimizer:\n    device: nvme\n    nvme_path: /no/such/folder\n"
        << "t.yaml:5:16: zero.offload_optimizer.nvme_path: folder '/no/such/folder' does not exist; create it or choose another";
    QTest::newRow("nvme path unwritable")  // /proc refuses new files even for root
        << "zero:\n  stage: 3\n  offload_param:\n    device: nvme\n    nvme_path: /proc\n"
        << "t.yaml:5:16: zero.offload_param.nvme_path: folder '/proc' is not writable; check its permissions or choose another";
    QTest::newRow("nvme path is a file")
        << "zero:\n  stage: 3\n  offload_param:\n    device: nvme\n    nvme_path: /etc/hostname\n"
        << "t.yaml:5:16: zero.offload_param.nvme_path: '/etc/hostname' is not a folder";
    QTest::newRow("train_batch_size product")
        << "training:\n  batch_size: 4\n  gradient_accumulation_steps: 2\n  train_batch_size: 32\nlaunch:\n  num_processes: 2\n"
        << "t.yaml:4:21: training.train_batch_size: train_batch_size 32 must equal training.batch_size 4 x "
           "training.gradient_accumulation_steps 2 x launch.num_processes 2 = 16; fix one of them or remove train_batch_size";
    QTest::newRow("min_lr above lr")
        << "optimizer:\n  lr: 1e-4\nscheduler:\n  type: WarmupDecayLR\n  min_lr: 1e-3\n"
        << "t.yaml:5:11: scheduler.min_lr: must not exceed optimizer.lr (the peak learning rate)";
    QTest::newRow("warmup_min_lr above lr")
        << "optimizer:\n  lr: 1e-4\nscheduler:\n  type: WarmupLR\n  warmup_min_lr: 1e-2\n"
        << "t.yaml:5:18: scheduler.warmup_min_lr: must not exceed optimizer.lr (the peak learning rate)";
    QTest::newRow("adafactor relative_step with a schedule")
        << "optimizer:\n  type: Adafactor\n  adafactor:\n    relative_step: true\nscheduler:\n  type: cosine\n"
        << "t.yaml:4:20: optimizer.adafactor.relative_step: computes its own learning rate, so scheduler.type cosine would "
           "not be followed: use scheduler.type: constant without warmup, or relative_step: false (then optimizer.lr is used)";
    QTest::newRow("adafactor warmup_init without relative_step")
        << "optimizer:\n  type: Adafactor\n  adafactor:\n    warmup_init: true\n"
        << "t.yaml:4:18: optimizer.adafactor.warmup_init: needs optimizer.adafactor.relative_step: true (transformers refuses it too)";
    QTest::newRow("no master weights without bf16")
        << "optimizer:\n  master_weights: none\n"
        << "t.yaml:2:19: optimizer.master_weights: none keeps only bf16 weights: it needs precision: bf16 (fp32 has no "
           "masters to drop; fp16's loss scaling needs them)";
    QTest::newRow("fused backward under fp16")
        << "precision: fp16\noptimizer:\n  fused_backward: true\n"
        << "t.yaml:3:19: optimizer.fused_backward: cannot run under precision fp16: loss scaling must see every gradient "
           "before any unit steps; use precision: bf16";
    QTest::newRow("fused backward on nvme")
        << "optimizer:\n  type: AdamW8bit\n  fused_backward: true\nprecision: bf16\nzero:\n  stage: 2\n  offload_optimizer:\n"
           "    device: nvme\n    nvme_path: /tmp\n"
        << "t.yaml:3:19: optimizer.fused_backward: steps each unit from memory during backward; with "
           "zero.offload_optimizer.device nvme the state comes from files after backward: use device cpu";
    QTest::newRow("delayed update without cpu offload")
        << "zero:\n  stage: 2\n  offload_optimizer:\n    delayed_update: true\n"
        << "t.yaml:4:21: zero.offload_optimizer.delayed_update: needs zero.offload_optimizer.device: cpu (the update "
           "runs on a host thread)";
    QTest::newRow("delayed update with Adafactor")
        << "optimizer:\n  type: Adafactor\nzero:\n  stage: 2\n  offload_optimizer:\n    device: cpu\n    delayed_update: true\n"
        << "t.yaml:7:21: zero.offload_optimizer.delayed_update: works with AdamW and AdamW8bit; Adafactor sums its "
           "statistics over the ranks inside the step";
    QTest::newRow("resolution multiple of 8") << "data:\n  resolution: 100\n"
                                              << "t.yaml:2:15: data.resolution: must be a multiple of 8 (got 100)";
    QTest::newRow("machine rank") << "launch:\n  num_machines: 2\n  machine_rank: 2\n  num_processes: 4\n"
                                  << "t.yaml:3:17: launch.machine_rank: must be below launch.num_machines (2); ranks count from 0";
    QTest::newRow("processes per machine") << "launch:\n  num_machines: 2\n  num_processes: 3\n"
                                           << "t.yaml:3:18: launch.num_processes: total processes (3) must be a multiple of "
                                              "launch.num_machines (2)";
    QTest::newRow("ema sampling without ema") << "sampling:\n  use_ema: true\n"
                                              << "t.yaml:2:12: sampling.use_ema: sampling with EMA weights needs ema.enabled: true";
    QTest::newRow("lora without targets") << "training:\n  method: lora\nlora:\n  targets: []\n"
                                          << "t.yaml:4:12: lora.targets: training.method is lora but no layer is named; leave "
                                             "it null for the default (to_q, to_k, to_v, to_out.0) or name the layers that get "
                                             "adapters";
    QTest::newRow("lora rank") << "lora:\n  rank: 0\n" << "t.yaml:2:9: lora.rank: must be >= 1 (got 0)";
    QTest::newRow("method") << "training:\n  method: dora\n"
                            << "t.yaml:2:11: training.method: must be one of full, lora (got 'dora')";
  }

  // training.epochs takes precedence over training.max_steps: both set is valid, and a
  // max_steps other than the default (so not just the one every written config carries) warns
  // that it is ignored, naming both keys.
  void epochsTakePrecedenceOverMaxSteps() {
    const TrainerConfig d = TrainerConfig::defaults();
    QCOMPARE(d.training.epochs, std::optional<std::int64_t>{});
    QCOMPARE(d.data.repeats, std::int64_t{1});
    QCOMPARE(d.sampling.negative_prompt, std::string());
    auto warned = [](const LoadedConfig& loaded) {
      for (const auto& w : loaded.warnings)
        if (w.find("training.max_steps 50 is ignored: training.epochs 5 decides") != std::string::npos) return true;
      return false;
    };
    const auto both = load_config_string("training:\n  max_steps: 50\n  epochs: 5\ndata:\n  repeats: 50\n", "t.yaml");
    QCOMPARE(both.config.training.epochs, std::optional<std::int64_t>(5));
    QCOMPARE(both.config.data.repeats, std::int64_t{50});
    QVERIFY(warned(both));
    QVERIFY(!warned(load_config_string("training:\n  epochs: 5\n", "t.yaml")));
    QVERIFY(!warned(load_config_string("training:\n  max_steps: 50\n", "t.yaml")));
    // A written config (every key, max_steps at its default) reads back with no warning.
    TrainerConfig c = d;
    c.training.epochs = 5;
    const auto back = load_config_string(to_yaml(c), "back.yaml");
    QVERIFY(back.warnings.empty());
    QCOMPARE(back.config.training.epochs, std::optional<std::int64_t>(5));
    // The ranges.
    QVERIFY2(problemsOf("training:\n  epochs: 0\n").join('\n').contains("training.epochs"), "epochs 0");
    QVERIFY2(problemsOf("data:\n  repeats: 0\n").join('\n').contains("data.repeats"), "repeats 0");
    QVERIFY(problemsOf("training:\n  epochs: null\n").isEmpty());
  }

  void unusedTextEncoderLrOnlyWarns() {
    const auto loaded = load_config_string("model:\n  path: /x\noptimizer:\n  text_encoder_lr: 1e-5\n", "t.yaml");
    bool warned = false;
    for (const auto& w : loaded.warnings)
      warned |= w.find("optimizer.text_encoder_lr: no text encoder trains") != std::string::npos;
    QVERIFY(warned);
  }

  void validationRule() {
    QFETCH(QString, yaml);
    QFETCH(QString, expected);
    const QStringList problems = problemsOf(yaml.toStdString());
    QVERIFY2(problems.contains(expected), qPrintable("got:\n" + problems.join('\n')));
    QCOMPARE(problems.size(), 1);
  }

  void warmupAsLongAsScheduleOnlyWarns() {
    const auto loaded = load_config_string("training:\n  max_steps: 100\nscheduler:\n  type: cosine\n  warmup_steps: 100\n",
                                           "t.yaml");
    QCOMPARE(loaded.warnings.size(), size_t(1));
    QCOMPARE(QString::fromStdString(loaded.warnings[0]),
             QString("t.yaml:5:17: scheduler.warmup_steps: warmup (100 steps) is not shorter than the schedule (100 steps, "
                     "scheduler.total_steps or training.max_steps): the whole run stays in warmup"));
  }

  void reportsEveryProblemAtOnceInFileOrder() {
    const QStringList problems = problemsOf(
        "precision: fp9\n"
        "training:\n"
        "  batch_size: 0\n"
        "  max_stepz: 1\n"
        "zero:\n"
        "  stage: 1\n"
        "  offload_param:\n"
        "    device: cpu\n"
        "data:\n"
        "  resolution: 30\n");
    QCOMPARE(problems.size(), 5);
    QVERIFY(problems[0].startsWith("t.yaml:1:12: precision:"));
    QVERIFY(problems[1].startsWith("t.yaml:3:15: training.batch_size:"));
    QVERIFY(problems[2].startsWith("t.yaml:4:3: training.max_stepz:"));
    QVERIFY(problems[3].startsWith("t.yaml:8:13: zero.offload_param.device:"));
    QVERIFY(problems[4].startsWith("t.yaml:10:15: data.resolution:"));
  }

  void errorIsConfigKindAndMissingFileIsIo() {
    try {
      load_config_string("zero: {stage: 9}", "t.yaml");
      QFAIL("no error");
    } catch (const zs::Error& e) {
      QCOMPARE(e.kind(), zs::ErrorKind::config);
    }
    try {
      load_config_file("/no/such/run.yaml");
      QFAIL("no error");
    } catch (const zs::Error& e) {
      QCOMPARE(e.kind(), zs::ErrorKind::io);
      QVERIFY(QString(e.what()).startsWith("/no/such/run.yaml: cannot open"));
    }
  }

  void overrides() {
    const auto loaded = load_config_string("zero:\n  stage: 1\n", "t.yaml",
                                           {"zero.stage=3", "training.max_steps=20", "sampling.prompts=[a, b]",
                                            "logging.run_name=a:b", "zero.offload_param.device=cpu"});
    QCOMPARE(loaded.config.zero.stage, 3);
    QCOMPARE(loaded.config.training.max_steps, 20);
    QCOMPARE(loaded.config.sampling.prompts, (std::vector<std::string>{"a", "b"}));
    QCOMPARE(loaded.config.logging.run_name, std::string("a:b"));
    QCOMPARE(loaded.location_of("zero.stage").file, std::string("--set zero.stage=3"));

    const QStringList problems =
        problemsOf("", {"zero.stage=7", "zero.stag=1", "zero=1", "nonsense", "training.max_steps=ten"});
    QCOMPARE(problems.size(), 5);
    QVERIFY(problems.contains("--set nonsense: expected key.path=value, e.g. --set zero.stage=2"));
    QVERIFY(problems.contains("--set zero.stag=1: zero.stag: unknown key; did you mean zero.stage?"));
    QVERIFY(problems.contains("--set zero=1: zero: is a section; set one of its keys, e.g. zero.<key>=value"));
    QVERIFY(problems.contains("--set zero.stage=7: zero.stage: must be between 0 and 3 (got 7)"));
    QVERIFY(problems.contains("--set training.max_steps=ten: training.max_steps: expected a whole number, got 'ten'"));
    // Overrides take part in the cross-field rules too.
    QVERIFY(problemsOf("zero:\n  stage: 3\n  offload_param: {device: cpu}\n", {"zero.stage=2"})
                .contains("t.yaml:3:27: zero.offload_param.device: parameter offload works with zero.stage 3 only "
                          "(zero.stage is 2); set zero.stage: 3 or zero.offload_param.device: none"));
  }

  void mapKeys() {
    const auto c = load_config_string("data:\n  metadata:\n    replacements:\n      'princess cadance': cadance\n"
                                      "      ' ': _\n    tag_bonus_scores: {solo: 100, sketch: -75}\n",
                                      "t.yaml").config;
    QCOMPARE(c.data.metadata.replacements,
             (StringMap{{"princess cadance", "cadance"}, {" ", "_"}}));  // YAML order kept
    QCOMPARE(c.data.metadata.tag_bonus_scores, (StringMap{{"solo", "100"}, {"sketch", "-75"}}));
    QCOMPARE(problemsOf("data:\n  metadata:\n    tag_bonus_scores: {solo: lots}\n"),
             QStringList{"t.yaml:3:23: data.metadata.tag_bonus_scores: the value of 'solo' is not a number (got 'lots')"});
    QCOMPARE(problemsOf("data:\n  metadata:\n    replacements: [a, b]\n"),
             QStringList{"t.yaml:3:19: data.metadata.replacements: expected a map of strings such as {key: value}"});
  }

  void roundTrip_data() {
    QTest::addColumn<QString>("yaml");
    QTest::newRow("defaults") << "";
    QFile quick(zs::test::quickstart());
    QVERIFY(quick.open(QIODevice::ReadOnly));
    QTest::newRow("quickstart") << QString::fromUtf8(quick.readAll());
    QTest::newRow("metadata maps") << R"(
data:
  metadata:
    replacements: {'princess luna': luna, 'artist:': 'by=', ' ': _, ':': '='}
    tag_bonus_scores: {solo: 100, monochrome: -75, pride flag: 50.5}
    score_tags: [3200, 1600, 5]
    abs_min_score: 50
    tag_separator: ' '
    blacklist_tags: [animated, machine learning generated]
)";
    QTest::newRow("everything changed") << R"(
precision: bf16
model: {preset: sdxl, path: "/models/my sdxl", prediction_type: v_prediction}
data: {path: "data: with colon", generate: shapes, resolution: 1024, flip_p: 0.333, caption_dropout: 0.05}
training: {max_steps: 7, batch_size: 3, gradient_accumulation_steps: 5, train_batch_size: 60,
           gradient_clipping: 0.7, seed: 0, gradient_checkpointing: true, min_snr_gamma: 5}
optimizer: {lr: 3.3e-7, betas: [0.85, 0.995], eps: 1e-6, weight_decay: 0}
scheduler: {type: WarmupDecayLR, warmup_steps: 2, warmup_min_lr: 1e-9, warmup_type: linear, total_steps: 11, min_lr: 1e-8}
zero: {stage: 3, overlap_comm: true, offload_param: {device: cpu, pin_memory: true}, offload_optimizer: {device: cpu},
       sub_group_size: 123456789, aio: {single_submit: true}}
loss_scaling: {loss_scale: 128, hysteresis: 4}
ema: {enabled: true, decay: 0.999, every_n_steps: 10}
sampling: {every_n_steps: 0, prompts: ["no", "123", "", 'a "quoted" # thing', "- dash"], use_ema: true}
checkpointing: {every_n_steps: 0, keep_last: 3, on_exception: false}
logging: {run_name: "yes"}
launch: {num_processes: 4, num_machines: 2, machine_rank: 1, main_process_ip: 10.0.0.1, use_cpu: true, timeout_s: 5}
)";
  }

  void roundTrip() {
    QFETCH(QString, yaml);
    const TrainerConfig original = load_config_string(yaml.toStdString(), "t.yaml").config;
    for (const WriteOptions options : {WriteOptions{}, WriteOptions{true, false}, WriteOptions{false, true}}) {
      const std::string written = to_yaml(original, options);
      const TrainerConfig again = load_config_string(written, "written.yaml").config;
      QVERIFY2(again == original, written.c_str());
      QCOMPARE(to_yaml(again, options), written);  // stable
    }
  }

  void yamlScalarQuotesWhatWouldChangeMeaning() {
    QCOMPARE(yaml_scalar("cpu"), std::string("cpu"));
    QCOMPARE(yaml_scalar("/mnt/nvme/zs"), std::string("/mnt/nvme/zs"));
    QCOMPARE(yaml_scalar("a red circle"), std::string("a red circle"));
    QCOMPARE(yaml_scalar("no"), std::string("\"no\""));
    QCOMPARE(yaml_scalar("Null"), std::string("\"Null\""));
    QCOMPARE(yaml_scalar("1e5"), std::string("\"1e5\""));
    QCOMPARE(yaml_scalar(""), std::string("\"\""));
    QCOMPARE(yaml_scalar("a: b"), std::string("\"a: b\""));
    QCOMPARE(yaml_scalar("#x"), std::string("\"#x\""));
    QCOMPARE(yaml_scalar("say \"hi\""), std::string("\"say \\\"hi\\\"\""));
  }

  void savesAtomically() {
    QTemporaryDir dir;
    const std::string path = (dir.path() + "/sub/run.yaml").toStdString();
    TrainerConfig c = TrainerConfig::defaults();
    c.zero.stage = 2;
    save_config(c, path);
    QCOMPARE(load_config_file(path).config, c);
    QCOMPARE(QDir(dir.path() + "/sub").entryList(QDir::Files), QStringList{"run.yaml"});  // no temporary left
  }

  void versionIsOptionalAndMigrationKeepsCurrent() {
    QCOMPARE(load_config_string("zero: {stage: 1}", "t.yaml").config.version, kSchemaVersion);
    QCOMPARE(load_config_string("version: 1", "t.yaml").config.version, kSchemaVersion);
  }

  // Schema 2 (Flux.1) renamed sampling.ddim_steps to sampling.steps: a version-1 file (and one
  // without a version) migrates; a version-2 file with the old key is refused with a suggestion.
  // sampling.steps and sampling.guidance_scale default to null, the family's (SD: 50 and 7.5).
  void samplingStepsMigrateFromDdimSteps() {
    const auto v1 = load_config_string("version: 1\nsampling: {ddim_steps: 7, guidance_scale: 2}\n", "t.yaml").config;
    QCOMPARE(v1.sampling.steps, std::optional<std::int64_t>(7));
    QCOMPARE(v1.version, std::int64_t{2});
    QCOMPARE(load_config_string("sampling: {ddim_steps: 9}\n", "t.yaml").config.sampling.steps, std::optional<std::int64_t>(9));
    try {
      load_config_string("version: 2\nsampling: {ddim_steps: 9}\n", "t.yaml");
      QFAIL("a version-2 file with ddim_steps loaded");
    } catch (const ConfigError& e) {
      QVERIFY2(QString(e.what()).contains("sampling.ddim_steps"), e.what());
    }
    const auto defaults = load_config_string("version: 2\n", "t.yaml").config;
    QVERIFY(!defaults.sampling.steps && !defaults.sampling.guidance_scale);
    QCOMPARE(zs::models::sampling_steps(defaults), std::int64_t{50});
    QCOMPARE(zs::models::sampling_guidance(defaults), 7.5);
  }

  void suggestions() {
    QCOMPARE(suggest_paths("zero.stag").front(), std::string("zero.stage"));
    QCOMPARE(suggest_paths("zero.offload_optimiser.device").front(), std::string("zero.offload_optimizer.device"));
    QVERIFY(suggest_paths("completely.unrelated.thing").empty());
  }

  // The model page's first question (issue 40): choosing a family fills its defaults, as its
  // ready config sets them, into the answers, and they land in the config the answers make:
  // the preset, resolution, prediction type (DDPM) or timestep sampling (rectified flow), LoRA's
  // targets (the registry family's defaults), batch size, the learning rate for the method
  // (following a later change of method) and its schedule, and for a full-size model a GPU run
  // in bf16. The
  // model sources offered are the family's; the family round-trips through answers_from_config.
  void familyDefaultsLandInTheConfig_data() {
    QTest::addColumn<QString>("family");
    QTest::addColumn<QString>("preset");
    QTest::addColumn<qint64>("resolution");
    QTest::addColumn<QString>("prediction");   // empty: rectified flow
    QTest::addColumn<QString>("readyConfig");  // configs/ file whose settings the defaults follow
    QTest::addColumn<QStringList>("sources");
    QTest::newRow("SD 1.x") << "sd1" << "sd15" << qint64{512} << "epsilon" << "sd15-lora.yaml"
                            << QStringList{"sd15", "folder", "file"};
    QTest::newRow("SDXL") << "sdxl" << "sdxl" << qint64{1024} << "epsilon" << "sdxl-finetune-adafactor.yaml"
                          << QStringList{"sdxl", "folder", "file"};
    QTest::newRow("Flux.1 [dev]") << "flux-dev" << "flux-dev" << qint64{1024} << "" << "flux-dev-lora.yaml"
                                  << QStringList{"flux-dev", "folder", "file"};
    QTest::newRow("Flux.1 [schnell]") << "flux-schnell" << "flux-schnell" << qint64{1024} << "" << ""
                                      << QStringList{"flux-schnell", "folder", "file"};
    QTest::newRow("Qwen-Image") << "qwen-image" << "qwen-image" << qint64{1024} << ""
                                << "qwen-image-lora-zero3-offload.yaml" << QStringList{"qwen-image", "folder"};
    QTest::newRow("FLUX.2 [klein] 4B") << "flux2-klein-4b" << "flux2-klein-4b" << qint64{1024} << ""
                                       << "flux2-klein-4b-lora.yaml" << QStringList{"flux2-klein-4b", "folder", "file"};
    QTest::newRow("demo") << "demo" << "tiny" << qint64{16} << "v_prediction" << "quickstart.yaml"
                          << QStringList{"tiny", "flux-tiny", "flux2-tiny", "qwen-image-tiny", "z-image-tiny"};
  }
  void familyDefaultsLandInTheConfig() {
    QFETCH(QString, family);
    QFETCH(QString, preset);
    QFETCH(qint64, resolution);
    QFETCH(QString, prediction);
    QFETCH(QString, readyConfig);
    QFETCH(QStringList, sources);
    const SetupFamily* f = find_setup_family(family.toStdString());
    QVERIFY(f);
    const LoadedConfig start = load_config_string(quickstart_yaml(), "quickstart");
    SetupAnswers a = answers_from_config(start.config);
    QCOMPARE(a["model_family"], std::string("demo"));  // the quickstart's tiny model
    // Another family first, so every row changes the family (the demo row comes back to it).
    set_answer(a, "model_family", family == "sd1" ? "sdxl" : "sd1");
    const auto changed = set_answer(a, "model_family", family.toStdString());
    QVERIFY(std::find(changed.begin(), changed.end(), "resolution") != changed.end());
    QStringList offered;
    for (const auto& [value, label] : question_choices(setup_question("model_source"), a))
      offered << QString::fromStdString(value);
    QCOMPARE(offered, sources);
    set_answer(a, "training_method", "lora");
    set_answer(a, "train_text_encoder", "none");
    const SetupResult r = apply_answers(a, to_yaml(start.config));
    QStringList problems;
    for (const auto& p : r.problems) problems << QString::fromStdString(p.to_string());
    QVERIFY2(r.loaded, qPrintable(problems.join('\n')));
    const TrainerConfig& c = r.loaded->config;
    QCOMPARE(QString::fromStdString(c.model.preset), preset);
    QCOMPARE(c.data.resolution, resolution);
    QCOMPARE(c.training.batch_size, f->batch_size);
    QCOMPARE(c.optimizer.lr, f->lr_lora);  // LoRA chosen after the family: its learning rate followed
    QCOMPARE(c.scheduler.type, f->scheduler);
    const auto not_applying = zs::models::family_of(c).keys_not_applying();
    const bool flow = std::find(not_applying.begin(), not_applying.end(), "model.prediction_type") != not_applying.end();
    QCOMPARE(flow, prediction.isEmpty());
    if (!flow) QCOMPARE(QString::fromStdString(c.model.prediction_type), prediction);
    QCOMPARE(c.training.timestep_sampling, std::string("shift"));  // rectified flow's; SD's key at its default
    QVERIFY(is_asked(setup_question("timestep_sampling"), a) == flow);
    QVERIFY(is_asked(setup_question("prediction_type"), a) == !flow);
    // LoRA's targets: the family's defaults written out (the demo's: null, each tiny model's own).
    if (f->full_size) {
      QVERIFY(c.lora.targets);
      QCOMPARE(*c.lora.targets, zs::models::family_of(c).default_lora_targets());
      QCOMPARE(c.precision, std::string("bf16"));
      QVERIFY(!c.launch.use_cpu);
    } else {
      QVERIFY(!c.lora.targets);
      QCOMPARE(c.precision, std::string("bf16"));  // the demo leaves the device and precision as SD 1.x set them
      QVERIFY(!c.launch.use_cpu);
    }
    QCOMPARE(answers_from_config(c)["model_family"], family.toStdString());
    // The ready config of the family sets what the defaults fill (and is read as that family).
    if (!readyConfig.isEmpty()) {
      const auto ready =
          load_config_file((zs::test::sourceDir() + "/configs/" + readyConfig).toStdString()).config;
      QCOMPARE(setup_family_id(ready), family.toStdString());
      QCOMPARE(ready.data.resolution, resolution);
      QCOMPARE(ready.training.batch_size, f->batch_size);
      QCOMPARE(ready.optimizer.lr, ready.training.method == "lora" ? f->lr_lora : f->lr_full);
      QCOMPARE(ready.scheduler.type, f->scheduler);
      QCOMPARE(ready.scheduler.warmup_steps, f->warmup_steps);
      if (!flow) QCOMPARE(QString::fromStdString(ready.model.prediction_type), prediction);
      QCOMPARE(ready.training.timestep_sampling, c.training.timestep_sampling);
      if (ready.lora.targets) QCOMPARE(*ready.lora.targets, *c.lora.targets);
    }
    // Choosing a source of another family takes the family along and leaves the defaults.
    const std::string other = family == "sd1" ? "sdxl" : "sd15";
    const auto moved = set_answer(a, "model_source", other);
    QCOMPARE(moved, std::vector<std::string>{"model_family"});
    QCOMPARE(a["model_family"], setup_family_of_preset(other)->id);
    QCOMPARE(a["resolution"], std::to_string(resolution));
  }

  // model.base_precision and text_encoder_precision (issue 53) store frozen weights: refused, naming
  // the key and what to change, where those weights train; an unknown format names the choices.
  void quantizedStorageIsForFrozenWeightsOnly() {
    QVERIFY(problemsOf("", {"model.preset=flux-tiny", "training.method=lora", "model.base_precision=nf4",
                            "model.text_encoder_precision=fp8", "training.train_text_encoder=none"})
                .isEmpty());
    QStringList p = problemsOf("", {"model.preset=flux-tiny", "training.method=full", "model.base_precision=fp8"});
    QVERIFY2(p.size() == 1 && p[0].contains("model.base_precision") && p[0].contains("training.method: lora"), qPrintable(p.join('\n')));
    p = problemsOf("", {"model.preset=flux-tiny", "training.method=lora", "training.train_text_encoder=lora",
                        "model.text_encoder_precision=int8"});
    QVERIFY2(p.size() == 1 && p[0].contains("model.text_encoder_precision") && p[0].contains("train_text_encoder: none"),
             qPrintable(p.join('\n')));
    p = problemsOf("", {"model.base_precision=fp4"});
    QVERIFY2(!p.isEmpty() && p[0].contains("model.base_precision") && p[0].contains("nf4"), qPrintable(p.join('\n')));
  }

  void docsConfigMdIsGeneratedFromSchema() {
    QFile doc(zs::test::sourceDir() + "/docs/CONFIG.md");
    QVERIFY2(doc.open(QIODevice::ReadOnly), "docs/CONFIG.md missing");
    QVERIFY2(QString::fromUtf8(doc.readAll()) == QString::fromStdString(schema_markdown()),
             "docs/CONFIG.md differs from the schema: run `make docs`");
    for (const auto& f : schema_fields())
      QVERIFY2(schema_markdown().find("`" + f.path + "`") != std::string::npos, f.path.c_str());
  }
};

ZS_TEST_MAIN(TestConfig);
#include "tst_config.moc"
