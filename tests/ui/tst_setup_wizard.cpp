// The setup wizard: a full pass writes the expected YAML (and accelerate/DeepSpeed files),
// problems block Next with a visible message, questions follow accelerate's conditions, the seed
// configs fill the answers, the memory panel follows stage and offload; every page is grabbed.
#include "checkpoint/export.h"
#include "models/sd/sd_export.h"
#include "config/config_import.h"
#include "config/config_loader.h"
#include "config/family_defaults.h"
#include "models/model_family.h"

#include <nlohmann/json.hpp>

#include <QAbstractButton>
#include <QCheckBox>
#include <QComboBox>
#include <QDir>
#include <QFile>
#include <QImage>
#include <QLabel>
#include <QLineEdit>
#include <QListWidget>
#include <QProcess>
#include <QPushButton>
#include <QRegularExpression>
#include <QSignalSpy>
#include <QTemporaryDir>
#include <QThread>
#include <QtTest>

#include "core/memory.h"
#include "memory_panel.h"
#include "setup_wizard.h"
#include "screenshot.h"
#include "test_support.h"

using zs::ui::SetupWizard;

namespace {

/// Waits until the model shapes and dataset scans the last answers started (off the GUI
/// thread) are shown.
bool wizardSettled(const SetupWizard& w) { return QTest::qWaitFor([&] { return w.idle(); }, 120000); }

bool nextEnabled(SetupWizard& w) { return w.button(QWizard::NextButton)->isEnabled(); }

/// Moves to page `pageId` with Next, failing if a page on the way blocks it.
bool goTo(SetupWizard& w, const QString& pageId) {
  for (int i = 0; i < 20 && w.currentPageId() != pageId; ++i) {
    if (!nextEnabled(w)) {
      qWarning() << "blocked on" << w.currentPageId() << w.problemsOnPage(w.currentPageId());
      return false;
    }
    w.next();
  }
  return w.currentPageId() == pageId;
}

}  // namespace

class TestSetupWizard : public QObject {
  Q_OBJECT

 private slots:
  // Every page in order, answered partly by typing, ends in the YAML those answers mean.
  void fullPassWritesTheExpectedYaml() {
    QTemporaryDir dir;
    SetupWizard w;
    w.show();
    QVERIFY(QTest::qWaitForWindowExposed(&w));
    QCOMPARE(w.currentPageId(), QString("environment"));
    w.setAnswer("machine_type", "multi_cpu");
    QVERIFY(w.isAsked("num_machines"));
    QVERIFY(!w.isAsked("machine_rank"));  // one machine: no rank, IP or port
    QVERIFY(goTo(w, "deepspeed"));
    w.setAnswer("use_deepspeed", "yes");
    QCOMPARE(w.answer("zero_stage"), QString("2"));  // accelerate's default
    w.setAnswer("offload_optimizer", "cpu");
    auto* accumulation = qobject_cast<QLineEdit*>(w.questionWidget("gradient_accumulation_steps"));
    QVERIFY(accumulation);
    accumulation->selectAll();
    QTest::keyClicks(accumulation, "2");
    QCOMPARE(w.answer("gradient_accumulation_steps"), QString("2"));
    w.setAnswer("gradient_clipping", "1.0");
    QVERIFY(goTo(w, "processes"));
    w.setAnswer("num_processes", "2");
    w.setAnswer("mixed_precision", "bf16");
    QVERIFY(goTo(w, "training"));
    auto* batch = qobject_cast<QLineEdit*>(w.questionWidget("batch_size"));
    batch->selectAll();
    QTest::keyClicks(batch, "4");
    w.setField("max_steps", "50");  // QWizard fields are the questions' inputs
    w.setField("ema", true);
    QCOMPARE(w.answer("max_steps"), QString("50"));
    QVERIFY(goTo(w, "sampling"));
    w.setAnswer("sampling_prompts", "a red circle on a black background\na blue square on a white background\n");
    QVERIFY(goTo(w, "output"));
    w.setAnswer("runs_root", dir.path());
    w.setAnswer("run_name", "wizard-run");
    QVERIFY(goTo(w, "summary"));
    QVERIFY(w.yamlText().contains("stage: 2"));
    const QString path = dir.path() + "/train.yaml";
    QString error;
    QSignalSpy saved(&w, &SetupWizard::configSaved);
    QVERIFY2(w.saveTo(path, true, &error), qPrintable(error));
    QCOMPARE(saved.count(), 1);

    const auto c = zs::config::load_config_file(path.toStdString()).config;
    QCOMPARE(c.zero.stage, std::int64_t{2});
    QCOMPARE(c.zero.offload_optimizer.device, std::string("cpu"));
    QCOMPARE(c.zero.offload_param.device, std::string("none"));
    QCOMPARE(c.precision, std::string("bf16"));
    QCOMPARE(c.launch.num_processes, std::int64_t{2});
    QCOMPARE(c.launch.use_cpu, true);
    QCOMPARE(c.training.gradient_accumulation_steps, std::int64_t{2});
    QCOMPARE(c.training.gradient_clipping, 1.0);
    QCOMPARE(c.training.batch_size, std::int64_t{4});
    QCOMPARE(c.training.max_steps, std::int64_t{50});
    QCOMPARE(c.ema.enabled, true);
    QCOMPARE(c.sampling.prompts.size(), std::size_t{2});
    QCOMPARE(c.sampling.prompts[1], std::string("a blue square on a white background"));
    QCOMPARE(c.logging.run_name, std::string("wizard-run"));
    // Everything not asked stays as the quickstart has it.
    QCOMPARE(c.model.preset, std::string("tiny"));
    QCOMPARE(c.data.resolution, std::int64_t{16});
    // The accelerate YAML + DeepSpeed JSON written beside it import back to the same ZeRO setup.
    QVERIFY(QFile::exists(dir.path() + "/train.accelerate.yaml"));
    QVERIFY(QFile::exists(dir.path() + "/train.deepspeed.json"));
    zs::config::ImportRequest request;
    request.accelerate_yaml = (dir.path() + "/train.accelerate.yaml").toStdString();
    const auto imported = zs::config::import_configs(request).loaded.config;
    QCOMPARE(imported.zero.stage, std::int64_t{2});
    QCOMPARE(imported.zero.offload_optimizer.device, std::string("cpu"));
    QCOMPARE(imported.training.gradient_accumulation_steps, std::int64_t{2});
    QCOMPARE(imported.launch.num_processes, std::int64_t{2});
  }

  // NVMe offload into a folder that cannot be written: Next is disabled and the page says why.
  void unwritableNvmePathBlocksNext() {
    SetupWizard w;
    w.show();
    QVERIFY(QTest::qWaitForWindowExposed(&w));
    QVERIFY(goTo(w, "deepspeed"));
    w.setAnswer("use_deepspeed", "yes");
    w.setField("zero_stage", 3);  // the combo's index
    QCOMPARE(w.answer("zero_stage"), QString("3"));
    w.setAnswer("offload_optimizer", "nvme");
    QVERIFY(w.isAsked("offload_optimizer_nvme_path"));
    w.setAnswer("offload_optimizer_nvme_path", "/proc");  // even root cannot create files there
    QVERIFY(!nextEnabled(w));
    const QStringList problems = w.problemsOnPage("deepspeed");
    QCOMPARE(problems.size(), 1);
    QVERIFY2(problems[0].contains("zero.offload_optimizer.nvme_path: folder '/proc' is not writable"),
             qPrintable(problems[0]));
    auto* label = w.currentPage()->findChild<QLabel*>("problems");
    QVERIFY(label && label->isVisible());
    QVERIFY(label->text().contains("not writable"));
    QVERIFY(!w.saveTo(QDir::tempPath() + "/never.yaml", false));
    // A writable folder clears it.
    QTemporaryDir nvme;
    w.setAnswer("offload_optimizer_nvme_path", nvme.path());
    QVERIFY(nextEnabled(w));
    QVERIFY(!label->isVisible());
  }

  // Parameter offload is asked at stage 3 only; the NVMe path only for nvme.
  void parameterOffloadOnlyAtStage3() {
    SetupWizard w;
    w.show();
    QVERIFY(QTest::qWaitForWindowExposed(&w));
    QVERIFY(goTo(w, "deepspeed"));
    w.setAnswer("use_deepspeed", "yes");
    QWidget* param = w.questionWidget("offload_param");
    for (const char* stage : {"0", "1", "2"}) {
      w.setAnswer("zero_stage", stage);
      QVERIFY(!w.isAsked("offload_param"));
      QVERIFY(!param->isVisible());
    }
    w.setAnswer("zero_stage", "3");
    QVERIFY(w.isAsked("offload_param"));
    QVERIFY(param->isVisible());
    QVERIFY(!w.questionWidget("offload_param_nvme_path")->isVisible());
    w.setAnswer("offload_param", "nvme");
    QVERIFY(w.questionWidget("offload_param_nvme_path")->isVisible());
    // Without DeepSpeed none of the ZeRO questions is asked.
    w.setAnswer("use_deepspeed", "no");
    QVERIFY(!w.questionWidget("zero_stage")->isVisible());
    QVERIFY(!param->isVisible());
  }

  // An existing DeepSpeed JSON replaces the ZeRO questions and is imported.
  void deepspeedFileIsImported() {
    SetupWizard w;
    w.show();
    QVERIFY(goTo(w, "deepspeed"));
    w.setAnswer("use_deepspeed", "yes");
    w.setAnswer("deepspeed_config_file", zs::test::testDataDir() + "/seeds/zero2_offload.json");
    QVERIFY(!w.questionWidget("zero_stage")->isVisible());
    QVERIFY(!w.questionWidget("offload_optimizer")->isVisible());
    QVERIFY(w.result().has_value());
    QCOMPARE(w.result()->config.zero.stage, std::int64_t{2});
    QCOMPARE(w.result()->config.zero.offload_optimizer.device, std::string("cpu"));
    w.setAnswer("deepspeed_config_file", zs::test::testDataDir() + "/seeds/missing.json");
    QVERIFY(!nextEnabled(w));
    QVERIFY(!w.problemsOnPage("deepspeed").isEmpty());
  }

  // The seed configs (accelerate YAML, DeepSpeed JSON) fill the answers they hold.
  void seedConfigsFillTheAnswers() {
    SetupWizard w;
    QString error;
    QVERIFY2(w.loadConfig(zs::test::testDataDir() + "/seeds/simpletuner_accelerate.yaml", &error), qPrintable(error));
    QCOMPARE(w.answer("use_deepspeed"), QString("yes"));
    QCOMPARE(w.answer("zero_stage"), QString("1"));
    QCOMPARE(w.answer("gradient_accumulation_steps"), QString("4"));
    QCOMPARE(w.answer("mixed_precision"), QString("bf16"));
    QCOMPARE(w.answer("machine_type"), QString("no"));
    QCOMPARE(qobject_cast<QComboBox*>(w.questionWidget("zero_stage"))->currentData().toString(), QString("1"));
    QVERIFY2(w.loadConfig(zs::test::testDataDir() + "/seeds/zero2_offload.json", &error), qPrintable(error));
    QCOMPARE(w.answer("zero_stage"), QString("2"));
    QCOMPARE(w.answer("offload_optimizer"), QString("cpu"));
    QVERIFY2(w.loadConfig(zs::test::testDataDir() + "/seeds/ds_z3_cpuoffload.json", &error), qPrintable(error));
    QCOMPARE(w.answer("zero_stage"), QString("3"));
    QCOMPARE(w.answer("offload_optimizer"), QString("cpu"));
    QCOMPARE(w.answer("offload_param"), QString("cpu"));
    QVERIFY(w.result().has_value());
    // A file that is not a config leaves the answers alone and says why.
    QVERIFY(!w.loadConfig(zs::test::testDataDir() + "/seeds/README.md", &error));
    QVERIFY(!error.isEmpty());
    QCOMPARE(w.answer("zero_stage"), QString("3"));
  }

  // The memory panel follows stage and offload, and applies its suggestion.
  void memoryPanelFollowsStageAndOffload() {
    SetupWizard w;
    w.show();
    QVERIFY(QTest::qWaitForWindowExposed(&w));
    w.setAnswer("machine_type", "multi_gpu");
    w.setAnswer("num_processes", "4");
    w.setAnswer("mixed_precision", "bf16");
    w.setAnswer("model_source", "sd15");
    w.setAnswer("resolution", "512");
    w.setAnswer("batch_size", "1");
    w.setAnswer("use_deepspeed", "no");
    QVERIFY(w.result().has_value());
    auto* panel = w.memoryPanel();
    panel->setCardBytes(qint64{80} << 30);
    QVERIFY(wizardSettled(w));
    const qint64 ddp = panel->deviceBytes();
    w.setAnswer("use_deepspeed", "yes");
    w.setAnswer("zero_stage", "2");
    QVERIFY(wizardSettled(w));
    const qint64 stage2 = panel->deviceBytes();
    w.setAnswer("offload_optimizer", "cpu");
    QVERIFY(wizardSettled(w));
    const qint64 offloaded = panel->deviceBytes();
    w.setAnswer("zero_stage", "3");
    w.setAnswer("offload_param", "cpu");
    QVERIFY(wizardSettled(w));
    const qint64 everything = panel->deviceBytes();
    qInfo("SD 1.5, bf16, 4 GPUs: DDP %lld, ZeRO-2 %lld, + CPU optimizer %lld, ZeRO-3 + CPU both %lld bytes",
          static_cast<long long>(ddp), static_cast<long long>(stage2), static_cast<long long>(offloaded),
          static_cast<long long>(everything));
    QVERIFY(ddp > stage2 && stage2 > offloaded && offloaded > everything);
    QVERIFY(panel->cpuBytes() > 0);
    QVERIFY(panel->fitText().contains("fits"));
    // An 8 GB card does not hold DDP; the suggestion is applied with one click.
    w.setAnswer("use_deepspeed", "no");
    panel->setCardBytes(qint64{8} << 30);
    QVERIFY(panel->fitText().contains("does not fit"));
    QVERIFY(panel->suggestionText().contains("Lowest setting that fits: ZeRO stage"));
    panel->applySuggestionNow();
    QCOMPARE(w.answer("use_deepspeed"), QString("yes"));
    QVERIFY(w.answer("zero_stage").toInt() >= 1);
    QVERIFY(panel->fitText().contains("fits") && !panel->fitText().contains("does not"));
  }

  // LoRA: the method, rank, targets and text encoders are asked (the rank and targets only for
  // LoRA, the encoders' learning rate only when they train), written to the YAML, and the
  // estimate follows: SD 1.5 LoRA at rank 16, 512 px, batch 4 fits an 8 GB card without ZeRO.
  void loraQuestionsWriteTheLoraSectionAndTheEstimateFollows() {
    QTemporaryDir dir;
    SetupWizard w;
    w.show();
    QVERIFY(QTest::qWaitForWindowExposed(&w));
    w.setAnswer("use_cpu", "no");  // one GPU
    w.setAnswer("mixed_precision", "bf16");
    w.setAnswer("model_source", "sd15");
    w.setAnswer("resolution", "512");
    w.setAnswer("batch_size", "4");
    w.setAnswer("ema", "no");
    w.setAnswer("use_deepspeed", "no");
    QVERIFY(!w.isAsked("lora_rank") && !w.isAsked("text_encoder_lr"));
    auto* panel = w.memoryPanel();
    panel->setCardBytes(qint64{8} << 30);
    QVERIFY(wizardSettled(w));
    const qint64 full = panel->deviceBytes();
    QVERIFY2(panel->fitText().contains("does not fit"), qPrintable(panel->fitText() + QString(" %1").arg(full)));
    w.setAnswer("training_method", "lora");
    QVERIFY(w.isAsked("lora_rank") && w.isAsked("lora_targets"));
    w.setAnswer("lora_rank", "16");
    QVERIFY(wizardSettled(w));
    const qint64 lora = panel->deviceBytes();
    qInfo("SD 1.5, bf16, 512 px, batch 4: full %lld, LoRA rank 16 %lld bytes", static_cast<long long>(full),
          static_cast<long long>(lora));
    QVERIFY(lora < full / 2);
    QVERIFY(panel->fitText().contains("fits") && !panel->fitText().contains("does not"));
    w.setAnswer("runs_root", dir.path());
    // The panel's figure is `zerostudio estimate`'s for the same answers, whatever changed last
    // (the wizard once kept the shape of the first model it saw and ignored LoRA's rank and targets).
    QString error;
    const QString path = dir.path() + "/lora.yaml";
    auto sameAsTheCli = [&](const char* what) {
      QVERIFY(wizardSettled(w));
      QVERIFY2(w.saveTo(path, false, &error), qPrintable(error));
      QProcess p;
      p.start(zs::test::cliPath(), {"estimate", path, "--json"});
      QVERIFY(p.waitForFinished(120000));
      const QByteArray out = p.readAllStandardOutput();
      QVERIFY2(p.exitCode() == 0, p.readAllStandardError().constData());
      const auto e = nlohmann::json::parse(out.toStdString());
      const qint64 cli = e["gpu"]["total"].get<qint64>();
      QVERIFY2(panel->deviceBytes() == cli,
               qPrintable(QString("%1: wizard %2, zerostudio estimate %3").arg(what).arg(panel->deviceBytes()).arg(cli)));
    };
    sameAsTheCli("LoRA rank 16");
    w.setAnswer("lora_rank", "64");
    QVERIFY(wizardSettled(w));
    QVERIFY(panel->deviceBytes() > lora);
    sameAsTheCli("LoRA rank 64");
    w.setAnswer("lora_rank", "16");
    w.setAnswer("lora_targets", "to_q\nto_v\nff.net.2\n");
    sameAsTheCli("LoRA on to_q, to_v, ff.net.2");
    w.setAnswer("train_text_encoder", "lora");
    QVERIFY(w.isAsked("text_encoder_lr"));
    w.setAnswer("text_encoder_lr", "5e-5");
    sameAsTheCli("LoRA with text-encoder LoRA");
    // Flux.1 [dev] is on the model page (its family's presets) and the figure follows it.
    const qint64 sd15 = panel->deviceBytes();
    w.setAnswer("model_source", "flux-dev");
    w.setAnswer("resolution", "1024");
    w.setAnswer("batch_size", "1");
    QVERIFY(wizardSettled(w));
    QStringList problems;
    for (const char* page : {"machine", "model", "training", "lora", "deepspeed", "data", "sampling", "summary"})
      problems += w.problemsOnPage(page);
    QVERIFY2(panel->deviceBytes() > sd15, qPrintable(problems.join("; ")));
    sameAsTheCli("Flux.1 [dev] LoRA at 1024 px");
    w.setAnswer("model_source", "sd15");
    w.setAnswer("resolution", "512");
    w.setAnswer("batch_size", "4");
    QVERIFY(goTo(w, "summary"));
    QVERIFY2(w.saveTo(path, false, &error), qPrintable(error));
    const auto c = zs::config::load_config_file(path.toStdString()).config;
    QCOMPARE(c.training.method, std::string("lora"));
    QCOMPARE(c.lora.rank, std::int64_t{16});
    QVERIFY(c.lora.targets);
    QCOMPARE(*c.lora.targets, (std::vector<std::string>{"to_q", "to_v", "ff.net.2"}));
    QCOMPARE(c.training.train_text_encoder, std::string("lora"));
    QVERIFY(c.optimizer.text_encoder_lr && *c.optimizer.text_encoder_lr == 5e-5);
    QVERIFY(!c.lora.alpha);
    // A target that names no layer is refused when the run starts, naming it. No targets: the
    // model family's default (lora.targets: null).
    w.setAnswer("lora_targets", "");
    QVERIFY(w.problemsOnPage("method").isEmpty());
    QVERIFY(wizardSettled(w));
    QVERIFY2(w.saveTo(path, false, &error), qPrintable(error));
    const auto d = zs::config::load_config_file(path.toStdString()).config;
    QVERIFY(!d.lora.targets);
    QCOMPARE(zs::models::lora_targets(d), zs::models::family_of(d).default_lora_targets());
  }

  // The device bar is stacked: parameters, gradients, optimizer states, activations, frozen
  // parts and buffers, summing to the device total, each drawn in its colour (checked on a grab
  // of the panel); SDXL with the optimizer in CPU memory needs more host memory than this
  // machine has, and the panel says how much.
  // The training page offers the optimizer, master weights and the fused step (issue 37); the memory
  // panel follows them (SDXL at 1024 px, stage 2: what sdxl-finetune-adafactor.yaml sets), equals
  // `zerostudio estimate` on the file the wizard writes, and that file carries the three keys.
  void leanOptimizerQuestionsLowerTheEstimate() {
    QTemporaryDir dir;
    SetupWizard w;
    w.show();
    QVERIFY(QTest::qWaitForWindowExposed(&w));
    w.setAnswer("use_cpu", "no");
    w.setAnswer("mixed_precision", "bf16");
    w.setAnswer("model_source", "sdxl");
    w.setAnswer("resolution", "1024");
    w.setAnswer("batch_size", "1");
    w.setAnswer("gradient_checkpointing", "yes");
    w.setAnswer("ema", "no");
    w.setAnswer("use_deepspeed", "yes");
    w.setAnswer("zero_stage", "2");
    QVERIFY(w.isAsked("optimizer_type") && w.isAsked("master_weights") && w.isAsked("fused_backward"));
    auto* panel = w.memoryPanel();
    panel->setCardBytes(qint64{8} << 30);
    QVERIFY(wizardSettled(w));
    const qint64 adamw = panel->deviceBytes();
    w.setAnswer("optimizer_type", "Adafactor");
    w.setAnswer("master_weights", "none");
    w.setAnswer("fused_backward", "yes");
    QVERIFY(wizardSettled(w));
    const qint64 lean = panel->deviceBytes();
    qInfo("SDXL, bf16, 1024 px, stage 2: AdamW %.2f GiB, Adafactor without masters, fused %.2f GiB", adamw / 1073741824.0,
          lean / 1073741824.0);
    QVERIFY(lean < adamw / 3);
    QVERIFY2(panel->fitText().contains("fits") && !panel->fitText().contains("does not"), qPrintable(panel->fitText()));
    w.setAnswer("runs_root", dir.path());
    QString error;
    const QString path = dir.path() + "/lean.yaml";
    QVERIFY2(w.saveTo(path, false, &error), qPrintable(error));
    const auto cfg = zs::config::load_config_file(path.toStdString()).config;
    QCOMPARE(cfg.optimizer.type, std::string("Adafactor"));
    QCOMPARE(cfg.optimizer.master_weights, std::string("none"));
    QVERIFY(cfg.optimizer.fused_backward);
    QProcess p;
    p.start(zs::test::cliPath(), {"estimate", path, "--json"});
    QVERIFY(p.waitForFinished(120000));
    QVERIFY2(p.exitCode() == 0, p.readAllStandardError().constData());
    const auto e = nlohmann::json::parse(p.readAllStandardOutput().toStdString());
    QCOMPARE(panel->deviceBytes(), e["gpu"]["total"].get<qint64>());
    // fp16 has neither question (loss scaling needs masters and every gradient first).
    w.setAnswer("mixed_precision", "fp16");
    QVERIFY(!w.isAsked("master_weights") && !w.isAsked("fused_backward"));
    // The delayed update (issue 38) is asked with AdamW in CPU memory, unfused, and lands in the config.
    QVERIFY(!w.isAsked("delayed_update"));  // Adafactor, no offload
    w.setAnswer("mixed_precision", "bf16");
    w.setAnswer("optimizer_type", "AdamW");
    w.setAnswer("master_weights", "fp32");
    w.setAnswer("fused_backward", "no");
    w.setAnswer("offload_optimizer", "cpu");
    QVERIFY(w.isAsked("delayed_update"));
    w.setAnswer("delayed_update", "yes");
    const QString delayed = dir.path() + "/delayed.yaml";
    QVERIFY2(w.saveTo(delayed, false, &error), qPrintable(error));
    QVERIFY(zs::config::load_config_file(delayed.toStdString()).config.zero.offload_optimizer.delayed_update);
    w.setAnswer("fused_backward", "yes");
    QVERIFY(!w.isAsked("delayed_update"));
  }

  void memoryPanelStacksTheBreakdown() {
    SetupWizard w;
    w.show();
    QVERIFY(QTest::qWaitForWindowExposed(&w));
    w.setAnswer("use_cpu", "no");  // one GPU: the bar is against the card
    w.setAnswer("mixed_precision", "bf16");
    w.setAnswer("model_source", "sdxl");
    w.setAnswer("resolution", "1024");
    w.setAnswer("batch_size", "2");
    w.setAnswer("gradient_checkpointing", "yes");
    w.setAnswer("use_deepspeed", "yes");
    w.setAnswer("zero_stage", "2");
    w.setAnswer("offload_optimizer", "cpu");
    QVERIFY(w.result().has_value());
    auto* panel = w.memoryPanel();
    panel->setCardBytes(qint64{24} << 30);
    QVERIFY(wizardSettled(w));
    const auto parts = panel->deviceSegments();
    QCOMPARE(parts.size(), 6);
    const QStringList names = {"parameters", "gradients", "optimizer states", "activations", "frozen parts", "buffers"};
    qint64 sum = 0;
    for (int i = 0; i < parts.size(); ++i) {
      QCOMPARE(parts[i].name, names[i]);
      sum += parts[i].bytes;
    }
    QCOMPARE(sum, panel->deviceBytes());
    // The caches are on (the default): the frozen parts wait in CPU memory, for a preset as for
    // a model.path (before issue 33 a preset counted them on the device).
    QCOMPARE(parts[4].bytes, qint64{0});
    QVERIFY(panel->cpuBytes() > (qint64{30} << 30));
    if (zs::physical_memory_bytes() < panel->cpuBytes())
      QVERIFY2(panel->hostWarning().contains("of CPU memory") && panel->hostWarning().contains("this machine has"),
               qPrintable(panel->hostWarning()));
    QVERIFY(panel->deviceText().endsWith("of 24.0 GiB"));
    QCoreApplication::processEvents();  // the labels' new heights
    const QImage shot = panel->grab().toImage();
    QVERIFY(shot.save(QDir(QCoreApplication::applicationDirPath()).filePath("memory_panel_sdxl.png")));
    auto shows = [&](const QColor& c) {
      for (int y = 0; y < shot.height(); ++y)
        for (int x = 0; x < shot.width(); ++x)
          if (shot.pixelColor(x, y) == c) return true;
      return false;
    };
    for (const auto& part : parts)
      if (part.bytes > panel->deviceBytes() / 50) QVERIFY2(shows(part.color), qPrintable(part.name));
  }

  // The model page shows the parameter count; the dataset page the layout, count and thumbnails.
  // What a valid config still needs before it trains is a note on the last page (the same
  // trainability checks as `config validate`), not a problem that blocks saving.
  void summaryNotesWhatTrainingStillNeeds() {
    zs::ui::SetupWizard w;
    QVERIFY(w.warnings().filter("model.preset").isEmpty());  // the quickstart trains as it is
    w.setAnswer("model_source", "sd15");
    QVERIFY(w.result().has_value());
    QVERIFY2(!w.warnings().filter("model.preset: sd15 describes the architecture for estimates only").isEmpty(),
             qPrintable(w.warnings().join('\n')));
    auto* label = w.findChild<QLabel*>("warnings");
    QVERIFY(label);
    QVERIFY(label->text().contains("needed before training"));
  }

  void modelAndDatasetPagesShowWhatTheyFound() {
    QTemporaryDir dir;
    QDir(dir.path()).mkpath("images");
    QDir(dir.path()).mkpath("captions");
    QImage img(32, 32, QImage::Format_RGB32);
    for (int i = 0; i < 3; ++i) {
      img.fill(QColor::fromHsv(i * 100, 200, 200));
      QVERIFY(img.save(dir.path() + QString("/images/%1.png").arg(i)));
      QFile cap(dir.path() + QString("/captions/%1.txt").arg(i));
      QVERIFY(cap.open(QIODevice::WriteOnly));
      cap.write(QString("caption number %1").arg(i).toUtf8());
    }
    SetupWizard w;
    w.show();
    QVERIFY(goTo(w, "model"));
    auto* info = w.findChild<QLabel*>("modelInfo");
    w.setAnswer("model_source", "sdxl");
    // The model's shape too (the tiny preset is built with real tensors): off the GUI thread.
    QVERIFY2(info->text().startsWith("Reading"), qPrintable(info->text()));
    QVERIFY(wizardSettled(w));
    QVERIFY(w.lastWorkThread() != nullptr && w.lastWorkThread() != QThread::currentThread());
    QVERIFY2(info->text().contains(QLocale().toString(2567463684LL)), qPrintable(info->text()));
    if (zs::test::sharedAvailable()) {
      // A single file: counted from its header; the tokenizer folder goes into model.config_path.
      const QString fixture = zs::test::sharedDir() + "/fixtures/sd15-tiny";
      const std::string file = (dir.path() + "/tiny.safetensors").toStdString();
      zs::checkpoint::convert_to_single_file(fixture.toStdString(), file, {});
      w.setAnswer("model_source", "file");
      QVERIFY2(info->text().contains("Choose the checkpoint file"), qPrintable(info->text()));
      w.setAnswer("model_file", QString::fromStdString(file));
      w.setAnswer("model_config_path", fixture);
      QVERIFY(wizardSettled(w));
      QVERIFY2(info->text().contains(QLocale().toString(792964LL)), qPrintable(info->text()));
      const std::string yaml = w.yamlText().toStdString();
      QVERIFY2(yaml.find("path: " + file) != std::string::npos && yaml.find("config_path: " + fixture.toStdString()) != std::string::npos,
               yaml.c_str());
    }
    w.setAnswer("model_source", "tiny");
    QVERIFY(goTo(w, "dataset"));
    w.setAnswer("data_source", "folder");
    auto* data = w.findChild<QLabel*>("datasetInfo");
    w.setAnswer("data_path", dir.path());
    // The scan runs off the GUI thread: its answer arrives through the event loop, never inside
    // the edit (issue 33: the wizard rescanned the folder on the GUI thread on every keystroke).
    QVERIFY2(data->text().startsWith("Reading"), qPrintable(data->text()));
    QVERIFY(wizardSettled(w));
    QVERIFY(w.lastWorkThread() != nullptr && w.lastWorkThread() != QThread::currentThread());
    QVERIFY2(data->text().contains("images/ + captions/: 3 image(s)"), qPrintable(data->text()));
    auto* thumbs = w.findChild<QListWidget*>("thumbnails");
    QCOMPARE(thumbs->count(), 3);
    QCOMPARE(thumbs->item(1)->text(), QString("caption number 1"));
    w.setAnswer("data_path", dir.path() + "/missing");
    QVERIFY(nextEnabled(w) == false);
  }

  // The model page starts with the family (issue 40): choosing each, as a user does in its combo,
  // fills the family's defaults into the config the answers make (preset, resolution, prediction
  // type or timestep sampling, LoRA targets, batch, learning rate, a GPU run in bf16) and lists
  // only its model sources. For each card size the memory panel offers the fastest setting that
  // fits, with the host memory it needs; one click sets stage, offload, optimizer, masters, fused
  // step and checkpointing, and the panel's estimate of the answers then fits that card. The
  // model page with the family and the card picker is grabbed for the guide.
  void familyFirstAndTheFastestSettingForACard() {
    SetupWizard w;
    w.show();
    QVERIFY(QTest::qWaitForWindowExposed(&w));
    QVERIFY(goTo(w, "model"));
    auto* family = qobject_cast<QComboBox*>(w.questionWidget("model_family"));
    auto* source = qobject_cast<QComboBox*>(w.questionWidget("model_source"));
    QVERIFY(family && family->isVisible() && source);
    QVERIFY(family->mapTo(&w, QPoint()).y() < source->mapTo(&w, QPoint()).y());  // the page's first question
    QCOMPARE(family->currentData().toString(), QString("demo"));  // the quickstart's tiny model
    w.setAnswer("training_method", "lora");
    w.setAnswer("train_text_encoder", "none");
    for (const auto& f : zs::config::setup_families()) {
      family->setCurrentIndex(family->findData(QString::fromStdString(f.id)));  // as a user picks it
      QVERIFY(wizardSettled(w));
      QStringList problems;
      for (const auto& [page, title] : zs::config::setup_pages())
        problems += w.problemsOnPage(QString::fromStdString(page));
      QVERIFY2(w.result().has_value(), qPrintable(QString::fromStdString(f.id) + ": " + problems.join("; ")));
      const auto& c = w.result()->config;
      QCOMPARE(c.model.preset, f.presets.front());
      QCOMPARE(c.data.resolution, f.resolution);
      QCOMPARE(qobject_cast<QLineEdit*>(w.questionWidget("resolution"))->text(), QString::number(f.resolution));
      QCOMPARE(c.training.batch_size, f.batch_size);
      QCOMPARE(c.optimizer.lr, f.lr_lora);
      if (!f.prediction_type.empty()) QCOMPARE(c.model.prediction_type, f.prediction_type);
      QCOMPARE(c.training.timestep_sampling, std::string("shift"));
      QCOMPARE(w.isAsked("prediction_type"), !f.prediction_type.empty());
      QCOMPARE(w.isAsked("timestep_sampling"), f.prediction_type.empty());
      QCOMPARE(source->count(), static_cast<int>(f.presets.size()) + int(f.folder) + int(f.single_file));
      QCOMPARE(source->itemData(0).toString(), QString::fromStdString(f.presets.front()));
      if (f.full_size) {
        QVERIFY(c.lora.targets && *c.lora.targets == zs::models::family_of(c).default_lora_targets());
        QCOMPARE(c.precision, std::string("bf16"));
        QVERIFY(!c.launch.use_cpu);
      }
    }
    // SDXL's full fine-tune: its AdamW setting does not fit a 24 GB card; the panel offers the
    // fastest that does.
    family->setCurrentIndex(family->findData(QString("sdxl")));
    w.setAnswer("training_method", "full");
    QCOMPARE(w.answer("learning_rate").toDouble(), 4e-7);
    auto* panel = w.memoryPanel();
    auto* cards = panel->findChild<QComboBox*>("cardSize");
    QVERIFY(cards);
    const qint64 detected = zs::gpu_total_bytes(0);
    QCOMPARE(cards->count(), 6 + int(detected > 0));
    if (detected > 0) QCOMPARE(cards->itemData(0).toLongLong(), detected);
    auto* use = panel->findChild<QPushButton*>("applyFastest");
    QVERIFY(use && use->isVisible());
    const QRegularExpression bytes(QStringLiteral("Host memory it needs: [0-9.]+ [KMGT]?i?B"));
    // The page as the guide shows it: AdamW at stage 0 does not fit 24 GB, the fastest that does
    // is offered.
    panel->setCardBytes(qint64{24} << 30);
    QVERIFY(wizardSettled(w));
    QVERIFY2(panel->fitText().contains("does not fit"), qPrintable(panel->fitText()));
    QVERIFY(use->isEnabled());
    QTest::qWait(50);  // the labels' new heights
    ZS_SAVE_SCREENSHOT(&w, "wizard_model_family_card");
    for (int gb : {8, 12, 16, 24, 48, 80}) {
      const qint64 card = qint64{gb} << 30;
      panel->setCardBytes(card);
      QVERIFY(wizardSettled(w));
      QStringList problems;
      for (const auto& [page, title] : zs::config::setup_pages())
        problems += w.problemsOnPage(QString::fromStdString(page));
      QVERIFY2(w.fastestFit() && w.fastestFit()->found, qPrintable(panel->fastestText() + " " + problems.join("; ")));
      const zs::estimate::FastestFit fit = *w.fastestFit();
      QVERIFY2(panel->fastestText().contains(QString("Fastest that fits the %1 GB card").arg(gb)),
               qPrintable(panel->fastestText()));
      QVERIFY2(panel->fastestHostText().contains(bytes), qPrintable(panel->fastestHostText()));
      if (use->isEnabled()) QTest::mouseClick(use, Qt::LeftButton);
      QVERIFY(wizardSettled(w));
      // The answers are the setting, the estimate of the config they make fits the card.
      QVERIFY(w.result().has_value());
      const auto& c = w.result()->config;
      QCOMPARE(c.zero.stage, std::int64_t{fit.setting.stage});
      QCOMPARE(c.zero.offload_optimizer.device, std::string(zs::estimate::offload_name(fit.setting.offload_optimizer)));
      QCOMPARE(c.zero.offload_param.device, std::string(zs::estimate::offload_name(fit.setting.offload_param)));
      QCOMPARE(c.optimizer.type, fit.setting.optimizer);
      QCOMPARE(c.optimizer.master_weights, std::string(fit.setting.master_weights ? "fp32" : "none"));
      QCOMPARE(c.optimizer.fused_backward, fit.setting.fused_backward);
      QCOMPARE(c.training.gradient_checkpointing, fit.setting.gradient_checkpointing);
      QCOMPARE(c.training.cpu_checkpointing, fit.setting.cpu_checkpointing);
      QCOMPARE(panel->deviceBytes(), fit.estimate.gpu.total());
      QVERIFY2(panel->deviceBytes() <= card && panel->fitText().contains("fits") &&
                   !panel->fitText().contains("does not"),
               qPrintable(panel->fitText()));
      QVERIFY(!use->isEnabled());  // the answers are that setting now
      QVERIFY(panel->fastestText().contains("the current answers"));
      qInfo("SDXL full, 1024 px, batch 1, %d GB: %s; device %.1f GiB, host %s", gb, fit.setting.describe().c_str(),
            fit.estimate.gpu.total() / 1073741824.0, qPrintable(panel->fastestHostText()));
    }
  }

  // Every page grabbed to PNG in the build folder, to be looked at.
  void grabsEveryPage() {
    SetupWizard w;
    w.show();
    QVERIFY(QTest::qWaitForWindowExposed(&w));
    int pages = 0;
    for (;;) {
      QTest::qWait(50);  // word-wrapped labels take a second layout pass for their heights
      ZS_SAVE_SCREENSHOT(&w, "wizard_" + QString::number(pages) + "_" + w.currentPageId());
      ++pages;
      if (w.currentPageId() == "summary") break;
      QVERIFY(nextEnabled(w));
      w.next();
    }
    QCOMPARE(pages, 10);  // nine question pages and the YAML
  }
};

ZS_TEST_MAIN(TestSetupWizard);
#include "tst_setup_wizard.moc"
