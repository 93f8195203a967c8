// accelerate YAML / DeepSpeed JSON import and export: the seed configs, conflicts, "auto",
// unused keys, and export -> import round trips.
#include <QDir>
#include <QFile>
#include <QTemporaryDir>
#include <QtTest>

#include <nlohmann/json.hpp>

#include "config/config_import.h"
#include "config/config_writer.h"
#include "io/atomic_file.h"
#include "test_support.h"

using namespace zs::config;

namespace {

std::string seed(const char* name) { return (zs::test::testDataDir() + "/seeds/" + name).toStdString(); }

QStringList problemsOf(const ImportRequest& request) {
  try {
    import_configs(request);
  } catch (const ConfigError& e) {
    QStringList out;
    for (const auto& p : e.problems()) out << QString::fromStdString(p.to_string());
    return out;
  }
  return {};
}

QString joined(const std::vector<std::string>& warnings) {
  QString out;
  for (const auto& w : warnings) out += QString::fromStdString(w) + "\n";
  return out;
}

/// Writes `text` to `name` in `dir` and returns the path.
std::string write(const QTemporaryDir& dir, const QString& name, const std::string& text) {
  const std::string path = (dir.path() + "/" + name).toStdString();
  zs::io::write_file_atomic(path, text);
  return path;
}

}  // namespace

class TestConfigImport : public QObject {
  Q_OBJECT

 private slots:
  void seed000SimpleTunerAccelerate() {
    const ImportResult r = import_configs({seed("simpletuner_accelerate.yaml"), "", std::nullopt});
    const TrainerConfig& c = r.loaded.config;
    QCOMPARE(c.zero.stage, 1);
    QCOMPARE(c.precision, std::string("bf16"));
    QCOMPARE(c.training.gradient_accumulation_steps, 4);
    QVERIFY(!c.zero.zero3_init_flag);
    QCOMPARE(c.launch.num_processes, 1);
    QCOMPARE(c.launch.num_machines, 1);
    QCOMPARE(c.launch.machine_rank, 0);
    QVERIFY(!c.launch.use_cpu);
    // Every other setting of the file is named in the warning.
    const QString w = joined(r.warnings);
    for (const char* key : {"compute_environment", "debug", "downcast_bf16", "main_training_function", "rdzv_backend",
                            "same_network", "tpu_env", "tpu_use_cluster", "tpu_use_sudo"})
      QVERIFY2(w.contains(key), key);
    QVERIFY(r.deepspeed_json.empty());
  }

  void seed002ZeroTwoOffloadJson() {
    const ImportResult r = import_configs({"", seed("zero2_offload.json"), std::nullopt});
    const TrainerConfig& c = r.loaded.config;
    QCOMPARE(c.zero.stage, 2);
    QCOMPARE(c.zero.offload_optimizer.device, std::string("cpu"));
    QVERIFY(c.zero.offload_optimizer.pin_memory);
    QVERIFY(c.zero.contiguous_gradients);
    QCOMPARE(c.zero.overlap_comm, std::optional<bool>(true));
    QCOMPARE(c.zero.reduce_bucket_size, 50000000);
    QCOMPARE(c.zero.stage3_max_live_parameters, 100000000);
    QCOMPARE(c.precision, std::string("fp16"));
    QCOMPARE(c.loss_scaling.loss_scale, 0.0);
    QCOMPARE(c.loss_scaling.initial_scale_power, 16);
    QCOMPARE(c.training.gradient_accumulation_steps, 4);
    QCOMPARE(c.optimizer.lr, 1e-5);
    QCOMPARE(c.optimizer.betas, (std::vector<double>{0.9, 0.999}));
    QCOMPARE(c.optimizer.eps, 1e-8);
    QVERIFY(c.training.gradient_checkpointing);  // activation_checkpointing -> training.gradient_checkpointing
    QVERIFY(c.training.cpu_checkpointing);       // activation_checkpointing.cpu_checkpointing: true
    const QString w = joined(r.warnings);
    for (const char* key : {"zero_optimization.stage3_max_reuse_parameters", "wall_clock_breakdown",
                            "activation_checkpointing.partition_activations"})
      QVERIFY2(w.contains(key), key);
    QVERIFY2(!w.contains("cpu_checkpointing"), qPrintable(w));
  }

  void seed003DiffSynthZeroThree() {
    LoadedConfig base;
    base.config.precision = "bf16";
    base.config.training.batch_size = 2;
    base.config.training.gradient_clipping = 0.5;
    const ImportResult r =
        import_configs({seed("diffsynth_zero3_cpuoffload.yaml"), seed("ds_z3_cpuoffload.json"), base});
    const TrainerConfig& c = r.loaded.config;
    QCOMPARE(c.zero.stage, 3);
    QCOMPARE(c.zero.offload_optimizer.device, std::string("cpu"));
    QCOMPARE(c.zero.offload_param.device, std::string("cpu"));
    QVERIFY(c.zero.offload_optimizer.pin_memory && c.zero.offload_param.pin_memory);
    QCOMPARE(c.zero.overlap_comm, std::optional<bool>(false));
    QCOMPARE(c.zero.sub_group_size, 1000000000);
    QCOMPARE(c.zero.reduce_bucket_size, 50000000);
    QCOMPARE(c.zero.stage3_prefetch_bucket_size, 50000000);
    QCOMPARE(c.zero.stage3_param_persistence_threshold, 100000);
    QCOMPARE(c.zero.stage3_max_live_parameters, 100000000);
    QCOMPARE(c.zero.stage3_max_reuse_distance, 100000000);
    QVERIFY(c.zero.stage3_gather_16bit_weights_on_model_save);
    QVERIFY(c.zero.zero3_init_flag);
    QVERIFY(c.training.gradient_checkpointing);
    QCOMPARE(c.loss_scaling.loss_scale_window, 1000);
    QCOMPARE(c.loss_scaling.hysteresis, 2);
    // "auto" values come from the trainer config.
    QCOMPARE(c.precision, std::string("bf16"));
    QCOMPARE(c.training.batch_size, 2);
    QCOMPARE(c.training.gradient_clipping, 0.5);
    const QString w = joined(r.warnings);
    for (const char* key : {"compute_environment", "enable_cpu_affinity", "wall_clock_breakdown",
                            "activation_checkpointing.contiguous_memory_optimization"})
      QVERIFY2(w.contains(key), key);
    QVERIFY(w.contains("replaces deepspeed_config_file"));  // --deepspeed won over the YAML's path
  }

  // The seed's DeepSpeed JSON says fp16/bf16 "auto" and its accelerate YAML has no
  // mixed_precision (with a DeepSpeed file it may not have one: that is refused, as accelerate
  // does). accelerate fills "auto" from its mixed_precision, "no" unless the script or the launch
  // sets it, which enables neither (DeepSpeedPlugin.set_mixed_precision): fp32. We fill "auto"
  // from the base config, whose default is fp32, so the two agree; a base config's precision plays
  // the script's part.
  void seed003PrecisionAutoResolvesLikeAccelerate() {
    const TrainerConfig plain =
        import_configs({seed("diffsynth_zero3_cpuoffload.yaml"), seed("ds_z3_cpuoffload.json"), std::nullopt}).loaded.config;
    QCOMPARE(plain.precision, std::string("fp32"));
    LoadedConfig base;
    base.config.precision = "fp16";
    QCOMPARE(import_configs({seed("diffsynth_zero3_cpuoffload.yaml"), seed("ds_z3_cpuoffload.json"), base}).loaded.config.precision,
             std::string("fp16"));
    QTemporaryDir dir;
    const std::string yaml = zs::io::read_file(seed("diffsynth_zero3_cpuoffload.yaml"));
    const QStringList problems =
        problemsOf({write(dir, "bf16.yaml", yaml + "mixed_precision: bf16\n"), seed("ds_z3_cpuoffload.json"), std::nullopt});
    QCOMPARE(problems.size(), 1);
    QVERIFY2(problems[0].contains("mixed_precision: conflicts with the DeepSpeed config file"), qPrintable(problems[0]));
    // Without "auto" the JSON decides.
    const std::string json = write(dir, "bf16.json", R"({"bf16": {"enabled": true}, "fp16": {"enabled": false}})");
    QCOMPARE(import_configs({seed("diffsynth_zero3_cpuoffload.yaml"), json, base}).loaded.config.precision, std::string("bf16"));
  }

  void missingDeepSpeedFileNamesIt() {
    const QStringList problems = problemsOf({seed("diffsynth_zero3_cpuoffload.yaml"), "", std::nullopt});
    QCOMPARE(problems.size(), 1);
    QVERIFY2(problems[0].contains("diffsynth_zero3_cpuoffload.yaml:4:26: deepspeed_config_file: DeepSpeed config "
                                  "'examples/qwen_image/model_training/special/low_vram_training/ds_z3_cpuoffload.json' not found"),
             qPrintable(problems.join('\n')));
  }

  void relativeDeepSpeedPathResolvesBesideTheYaml() {
    QTemporaryDir dir;
    write(dir, "ds.json", R"({"zero_optimization": {"stage": 3}})");
    const std::string yaml = write(dir, "acc.yaml", "distributed_type: DEEPSPEED\ndeepspeed_config:\n  deepspeed_config_file: ds.json\n");
    QVERIFY(QDir::current().absolutePath() != dir.path());
    const ImportResult r = import_configs({yaml, "", std::nullopt});
    QCOMPARE(r.loaded.config.zero.stage, 3);
    QCOMPARE(QString::fromStdString(r.deepspeed_json), dir.path() + "/ds.json");
  }

  void conflictsWithDeepSpeedFileNameEachKey() {
    QTemporaryDir dir;
    write(dir, "ds.json", R"({"zero_optimization": {"stage": 2}})");
    const std::string yaml = write(dir, "acc.yaml",
                                   "distributed_type: DEEPSPEED\n"
                                   "deepspeed_config:\n"
                                   "  deepspeed_config_file: ds.json\n"
                                   "  zero_stage: 3\n"
                                   "  gradient_accumulation_steps: 2\n"
                                   "  offload_optimizer_device: cpu\n"
                                   "  zero3_init_flag: true\n"
                                   "mixed_precision: bf16\n");
    const QStringList problems = problemsOf({yaml, "", std::nullopt});
    QCOMPARE(problems.size(), 4);
    for (const char* key : {"deepspeed_config.zero_stage", "deepspeed_config.gradient_accumulation_steps",
                            "deepspeed_config.offload_optimizer_device", "mixed_precision"})
      QVERIFY2(problems.filter(QString(key) + ": conflicts with the DeepSpeed config file").size() == 1,
               qPrintable(problems.join('\n')));
    QVERIFY(problems[0].contains("acc.yaml:4:3: deepspeed_config.zero_stage"));
  }

  void deepSpeedRules_data() {
    QTest::addColumn<QString>("json");
    QTest::addColumn<QString>("expected");
    QTest::newRow("fp16 and bf16") << R"({"fp16": {"enabled": true}, "bf16": {"enabled": true}})"
                                   << "d.json:1:38: precision: fp16.enabled and bf16.enabled are both true; turn one of them off";
    QTest::newRow("batch product") << R"({"train_batch_size": 10, "train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 2})"
                                   << "d.json:1:2: training.train_batch_size: train_batch_size 10 must equal "
                                      "train_micro_batch_size_per_gpu 2 x gradient_accumulation_steps 2 x processes 1 = 4";
    QTest::newRow("batch not divisible") << R"({"train_batch_size": 10, "gradient_accumulation_steps": 4})"
                                         << "d.json:1:2: training.train_batch_size: train_batch_size 10 is not divisible by "
                                            "gradient_accumulation_steps 4 x processes 1 [from train_batch_size]";
    QTest::newRow("auto where it cannot be filled") << R"({"zero_optimization": {"stage": "auto"}})"
                                                    << "d.json:1:24: zero_optimization.stage: \"auto\" can only be filled in";
    QTest::newRow("bad value") << R"({"zero_optimization": {"stage": 5}})"
                               << "d.json:1:24: zero.stage: must be between 0 and 3 (got 5) [from zero_optimization.stage]";
    QTest::newRow("invalid json") << "{\n  \"fp16\": {,\n}"
                                  << "d.json:2:12: invalid JSON:";
    // A number beyond a double's range is nlohmann's out_of_range, not a parse_error: it was
    // "unexpected failure" (found by make fuzz, tests/fuzz/regressions/deepspeed_json).
    QTest::newRow("number out of range") << R"({"gradient_clipping": 3e1000})"
                                         << "d.json:1:1: invalid JSON:";
  }

  void deepSpeedRules() {
    QFETCH(QString, json);
    QFETCH(QString, expected);
    QTemporaryDir dir;
    const std::string path = write(dir, "d.json", json.toStdString());
    const QStringList problems = problemsOf({"", path, std::nullopt});
    QCOMPARE(problems.size(), 1);
    QVERIFY2(problems[0].startsWith(dir.path() + "/" + expected), qPrintable(problems[0]));
  }

  void deepSpeedDerivesMicroBatchAndFillsAuto() {
    QTemporaryDir dir;
    LoadedConfig base;
    base.config.optimizer.lr = 3e-4;
    base.config.launch.num_processes = 2;
    const std::string path = write(dir, "d.json", R"({
      "train_batch_size": 16, "gradient_accumulation_steps": 2,
      "optimizer": {"type": "AdamW", "params": {"lr": "auto", "weight_decay": 0.1}},
      "scheduler": {"type": "WarmupCosineLR", "params": {"total_num_steps": 900, "warmup_num_steps": 30,
                    "cos_min_ratio": 0.5, "warmup_min_ratio": 0}},
      "amp": {"enabled": false}})");
    const ImportResult r = import_configs({"", path, base});
    const TrainerConfig& c = r.loaded.config;
    QCOMPARE(c.training.batch_size, 4);  // 16 / (2 x 2 processes)
    QCOMPARE(c.optimizer.lr, 3e-4);
    QCOMPARE(c.optimizer.weight_decay, 0.1);
    QCOMPARE(c.scheduler.type, std::string("cosine"));
    QCOMPARE(c.scheduler.total_steps, std::optional<std::int64_t>(900));
    QCOMPARE(c.scheduler.warmup_steps, 30);
    QCOMPARE(c.scheduler.min_lr, 1.5e-4);
    QVERIFY(joined(r.warnings).contains("amp.enabled"));
  }

  void accelerateDistributedTypes() {
    QTemporaryDir dir;
    const auto multi_cpu = import_configs({write(dir, "a.yaml", "distributed_type: MULTI_CPU\nnum_processes: 4\n"), "", std::nullopt});
    QVERIFY(multi_cpu.loaded.config.launch.use_cpu);
    QCOMPARE(multi_cpu.loaded.config.zero.stage, 0);
    QCOMPARE(multi_cpu.loaded.config.launch.num_processes, 4);
    const auto fsdp = import_configs({write(dir, "b.yaml", "distributed_type: FSDP\nmixed_precision: 'no'\n"), "", std::nullopt});
    QVERIFY(joined(fsdp.warnings).contains("distributed_type (FSDP"));
    QCOMPARE(fsdp.loaded.config.precision, std::string("fp32"));
    const QStringList fp8 = problemsOf({write(dir, "c.yaml", "mixed_precision: fp8\n"), "", std::nullopt});
    QCOMPARE(fp8.size(), 1);
    QVERIFY(fp8[0].contains("c.yaml:1:18: precision: mixed_precision 'fp8' is not supported"));
  }

  void exportFormats() {
    TrainerConfig c = TrainerConfig::defaults();
    c.zero.stage = 2;
    c.zero.offload_optimizer.device = "cpu";
    const std::string inline_yaml = to_accelerate_yaml(c);
    QVERIFY(inline_yaml.find("mixed_precision: 'no'\n") != std::string::npos);
    QVERIFY(inline_yaml.find("distributed_type: DEEPSPEED\n") != std::string::npos);
    QVERIFY(inline_yaml.find("deepspeed_config:\n  gradient_accumulation_steps: 1\n") != std::string::npos);
    QVERIFY(inline_yaml.find("  zero_stage: 2\n") != std::string::npos);
    // Top-level keys are sorted, as accelerate writes them.
    QVERIFY(inline_yaml.find("compute_environment") < inline_yaml.find("deepspeed_config") &&
            inline_yaml.find("deepspeed_config") < inline_yaml.find("distributed_type") &&
            inline_yaml.find("num_processes") < inline_yaml.find("use_cpu"));
    const std::string with_json = to_accelerate_yaml(c, "ds.json");
    QVERIFY(with_json.find("deepspeed_config_file: ds.json") != std::string::npos);
    QVERIFY(with_json.find("zero_stage") == std::string::npos);
    QVERIFY(with_json.find("mixed_precision") == std::string::npos);
    const nlohmann::json j = to_deepspeed_json(c);
    QCOMPARE(j["zero_optimization"]["stage"].get<int>(), 2);
    QCOMPARE(j["zero_optimization"]["reduce_bucket_size"].get<std::int64_t>(), 500000000);
    QCOMPARE(j["train_batch_size"].get<int>(), 1);
    QVERIFY(!j["fp16"]["enabled"].get<bool>());
  }

  void exportImportRoundTrip_data() {
    QTest::addColumn<QString>("yaml");
    QTest::newRow("defaults") << "";
    QTest::newRow("stage 2 cpu offload bf16") << "precision: bf16\nzero: {stage: 2, offload_optimizer: {device: cpu, pin_memory: true}}\n"
                                                 "training: {gradient_accumulation_steps: 4, gradient_clipping: 1.0, batch_size: 8}\n";
    QTest::newRow("stage 3 nvme fp16, two machines")
        << "precision: fp16\n"
           "zero: {stage: 3, overlap_comm: false, offload_param: {device: nvme, nvme_path: NVME, buffer_count: 7},\n"
           "       offload_optimizer: {device: nvme, nvme_path: NVME}, stage3_gather_16bit_weights_on_model_save: true,\n"
           "       zero3_init_flag: true, sub_group_size: 100000, aio: {queue_depth: 32, single_submit: true}}\n"
           "loss_scaling: {loss_scale_window: 500, hysteresis: 3, min_loss_scale: 0.5}\n"
           "launch: {num_processes: 4, num_machines: 2, machine_rank: 1, main_process_ip: 10.1.2.3, main_process_port: 29400}\n"
           "training: {gradient_checkpointing: true, cpu_checkpointing: true}\n";
    QTest::newRow("schedules") << "optimizer: {lr: 2.0e-4, betas: [0.8, 0.99], eps: 1.0e-6, weight_decay: 0.0}\n"
                                  "scheduler: {type: cosine, warmup_steps: 50, total_steps: 2000, min_lr: 5.0e-5}\n";
    QTest::newRow("warmup decay") << "scheduler: {type: WarmupDecayLR, warmup_steps: 5, warmup_min_lr: 1.0e-6, warmup_type: linear}\n";
  }

  void exportImportRoundTrip() {
    QFETCH(QString, yaml);
    QTemporaryDir dir;
    yaml.replace("NVME", dir.path());
    const LoadedConfig original = load_config_string(yaml.toStdString(), "t.yaml");
    // The files carry launch and ZeRO settings; the rest comes from the same base, as it would in use.
    LoadedConfig base;
    base.config = original.config;
    const std::string json_path = (dir.path() + "/ds.json").toStdString();
    zs::io::write_file_atomic(json_path, to_deepspeed_json(original.config).dump(2));
    const std::string yaml_inline = write(dir, "inline.yaml", to_accelerate_yaml(original.config));
    const std::string yaml_ref = write(dir, "ref.yaml", to_accelerate_yaml(original.config, "ds.json"));
    LoadedConfig defaults_base;
    defaults_base.config.data = original.config.data;  // not carried by either format
    for (const ImportRequest& request : {ImportRequest{yaml_inline, "", base}, ImportRequest{"", json_path, base},
                                         ImportRequest{yaml_ref, "", base}}) {
      const ImportResult r = import_configs(request);
      QVERIFY2(r.loaded.config == original.config, to_yaml(r.loaded.config).c_str());
    }
    // From the defaults, both files together restore every setting they carry.
    const TrainerConfig from_files = import_configs({yaml_ref, "", std::nullopt}).loaded.config;
    QCOMPARE(from_files.zero.stage, original.config.zero.stage);
    QCOMPARE(from_files.zero.offload_param.device, original.config.zero.offload_param.device);
    QCOMPARE(from_files.precision, original.config.precision);
    QCOMPARE(from_files.optimizer.lr, original.config.optimizer.lr);
    QCOMPARE(from_files.launch.num_processes, original.config.launch.num_processes);
    QCOMPARE(from_files.training.gradient_checkpointing, original.config.training.gradient_checkpointing);
    QCOMPARE(from_files.training.cpu_checkpointing, original.config.training.cpu_checkpointing);
    QCOMPARE(from_files.loss_scaling.hysteresis, original.config.loss_scaling.hysteresis);
  }
};

ZS_TEST_MAIN(TestConfigImport);
#include "tst_config_import.moc"
