// End to end under xvfb-run: the main window starts the quickstart in-process with sampling and
// checkpoints, the panels fill as it trains; a checkpoint is exported from the browser; two
// ranks started through `zerostudio launch` obey Pause, Save now, Sample now and Stop through the
// run directory. Screenshots of the window and every panel go to the build folder.
#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QImage>
#include <QPushButton>
#include <QTableWidget>
#include <QTabWidget>
#include <QTemporaryDir>
#include <QElapsedTimer>
#include <QtTest>

#include <chrono>
#include <thread>

#include "checkpoint_browser.h"
#include "log_view.h"
#include "main_window.h"
#include "metrics_panel.h"
#include "model_support.h"
#include "run_controller.h"
#include "sample_gallery.h"
#include "settings/trainer_config.h"
#include "test_support.h"
#include "train/trainer.h"
#include "ui/screenshot.h"

using namespace zs::ui;

namespace {

QStringList smallRun(const QString& root) {
  return {"data.generate_count=64", "training.batch_size=8", "training.max_steps=30", "sampling.every_n_steps=10",
          "sampling.steps=4", "checkpointing.every_n_steps=20", "logging.every_n_steps=2",
          "logging.runs_root=" + root, "launch.timeout_s=20"};
}

}  // namespace

class TestDashboardE2e : public QObject {
  Q_OBJECT

 private slots:
  void initTestCase() { QCoreApplication::setOrganizationName("ZeroStudioTests"); }

  void quickstartInProcessFillsEveryPanel() {
    QTemporaryDir tmp;
    MainWindow w;
    w.resize(1280, 820);
    w.show();
    QVERIFY(QTest::qWaitForWindowExposed(&w));
    QVERIFY(w.openConfig(zs::test::quickstart()));
    w.controller()->setOverrides(smallRun(tmp.path()));
    QVERIFY(w.startRun());
    QVERIFY(w.controller()->ownsRun());
    QTRY_VERIFY_WITH_TIMEOUT(w.controller()->state() == RunState::finished || w.controller()->state() == RunState::failed,
                             240000);
    QVERIFY2(w.controller()->state() == RunState::finished, qPrintable(w.controller()->errorMessage()));
    w.controller()->poll();
    QCOMPARE(w.metricsPanel()->pointCount("loss"), 15);  // every 2 steps of 30
    QCOMPARE(w.metricsPanel()->pointCount("lr"), 15);
    QVERIFY(w.metricsPanel()->pointCount("memory") == 15);
    QCOMPARE(w.gallery()->stepCount(), 3);  // steps 10, 20, 30
    QCOMPARE(w.gallery()->imageCount(), 8);
    QCOMPARE(w.gallery()->shownPrompts().value(0), QString("a red circle on a black background"));
    QTRY_COMPARE(w.checkpoints()->rowCount(), 2);  // step 20 (periodic) and 30 (final)
    QVERIFY(w.logView()->shownLines() > 0);
    QVERIFY(w.progressText().contains("step 30/30"));
    // Export the last checkpoint from the browser (the worker thread, waited for).
    const QString out = tmp.path() + "/unet.safetensors";
    const QString error = w.checkpoints()->exportCheckpoint(1, "safetensors", "fp16", false, out, true);
    QVERIFY2(error.isEmpty(), qPrintable(error));
    QVERIFY(QFile(out).size() > 1000000);
    // A browser that goes away while its export runs cancels it and joins its thread: no crash,
    // no half-written file (the export writes to a temporary name).
    {
      CheckpointBrowser browser;
      browser.setController(w.controller());
      browser.refresh();
      QCOMPARE(browser.rowCount(), 2);
      QCOMPARE(browser.exportCheckpoint(1, "diffusers", "fp32", false, tmp.path() + "/gone", false), QString());
      QVERIFY(!browser.exportCheckpoint(1, "safetensors", "fp32", false, tmp.path() + "/second.safetensors", false).isEmpty());
    }
    QVERIFY(!QFileInfo::exists(tmp.path() + "/second.safetensors"));
    for (const QString& f : QDir(tmp.path() + "/gone/unet").entryList(QDir::Files))
      QVERIFY2(!f.contains(".tmp"), qPrintable(f));
    // Screenshots: the window on each tab, and each panel.
    for (int i = 0; i < w.tabs()->count(); ++i) {
      w.tabs()->setCurrentIndex(i);
      QCoreApplication::processEvents();
      ZS_SAVE_SCREENSHOT(&w, "dashboard_" + w.tabs()->tabText(i).toLower());
      ZS_SAVE_SCREENSHOT(w.tabs()->currentWidget(), "panel_" + w.tabs()->tabText(i).toLower());
    }
    // Click to enlarge a sample.
    QWidget* big = w.gallery()->enlarge(0);
    QVERIFY(big && big->isVisible());
    big->close();
    // Resume from the step-20 checkpoint (selected row, "Resume from"): ten more steps in the same run.
    w.tabs()->setCurrentWidget(w.checkpoints());
    w.checkpoints()->table()->selectRow(0);
    auto* resume = w.checkpoints()->findChild<QPushButton*>("resume");
    QVERIFY(resume);
    resume->click();
    QVERIFY(w.controller()->ownsRun());
    QTRY_VERIFY_WITH_TIMEOUT(w.controller()->state() == RunState::finished || w.controller()->state() == RunState::failed,
                             240000);
    QVERIFY2(w.controller()->state() == RunState::finished, qPrintable(w.controller()->errorMessage()));
    QFile events(w.controller()->runDir() + "/events.jsonl");
    QVERIFY(events.open(QIODevice::ReadOnly));
    QVERIFY(events.readAll().contains("checkpoints/step_20\",\"run_dir"));
    QVERIFY(w.progressText().contains("step 30/30"));
    // Opening the finished run again (as from Recent Runs) shows the same.
    MainWindow again;
    QVERIFY(again.openRun(w.controller()->runDir()));
    QCOMPARE(again.metricsPanel()->pointCount("loss"), 15);
    QCOMPARE(again.gallery()->stepCount(), 3);
    QCOMPARE(again.checkpoints()->rowCount(), 2);
    QCOMPARE(again.controller()->state(), RunState::finished);
  }

  // Closing during a run asks; "no" keeps the window, "yes" stops the run (it saves) and closes.
  // A LoRA run's checkpoints say so in the browser, whose Export offers the LoRA files and the
  // merged full weights, and both export.
  void loraCheckpointsOfferLoraExports() {
    QTemporaryDir tmp;
    const std::string run = tmp.path().toStdString() + "/lora-run";
    zs::train::TrainerOptions opts;
    opts.run_dir = run;
    zs::train::TrainerCommands commands;
    zs::train::Trainer(zs::test::small_config({"training.method=lora", "training.train_text_encoder=lora", "lora.rank=4",
                                               "training.max_steps=3", "sampling.every_n_steps=0",
                                               "checkpointing.every_n_steps=3"}),
                       opts)
        .run(commands);
    RunController controller;
    QVERIFY(controller.attach(QString::fromStdString(run)));
    CheckpointBrowser browser;
    browser.setController(&controller);
    browser.refresh();
    QCOMPARE(browser.rowCount(), 1);
    QVERIFY(browser.isLora(0));
    QVERIFY(browser.table()->item(0, 5)->text().contains("LoRA rank 4"));
    QStringList formats;
    for (const auto& [label, format] : browser.exportChoices(0)) formats << format;
    QCOMPARE(formats, (QStringList{"lora-kohya", "lora-diffusers", "diffusers+merge", "single-file+merge", "safetensors+merge"}));
    const QString lora = tmp.path() + "/lora.safetensors";
    QString error = browser.exportCheckpoint(0, "lora-kohya", "fp16", false, lora, true);
    QVERIFY2(error.isEmpty(), qPrintable(error));
    QVERIFY(QFileInfo(lora).size() > 1000);
    error = browser.exportCheckpoint(0, "diffusers", "fp32", false, tmp.path() + "/merged", true, true);
    QVERIFY2(error.isEmpty(), qPrintable(error));
    QVERIFY(QFileInfo::exists(tmp.path() + "/merged/unet/diffusion_pytorch_model.safetensors"));
    QVERIFY(QFileInfo::exists(tmp.path() + "/merged/text_encoder/model.safetensors"));
    // Without --merge a full-weight format is refused with the way out.
    error = browser.exportCheckpoint(0, "diffusers", "fp32", false, tmp.path() + "/plain", true);
    QVERIFY2(error.contains("--merge"), qPrintable(error));
    browser.resize(900, 300);
    ZS_SAVE_SCREENSHOT(&browser, "checkpoints_lora");
  }

  void closingDuringARunAsks() {
    QTemporaryDir tmp;
    MainWindow w;
    w.show();
    QVERIFY(w.openConfig(zs::test::quickstart()));
    QStringList sets = smallRun(tmp.path());
    sets.replaceInStrings("training.max_steps=30", "training.max_steps=100000");
    w.controller()->setOverrides(sets);
    QVERIFY(w.startRun());
    QTRY_VERIFY_WITH_TIMEOUT(!w.controller()->metrics().empty(), 120000);
    int asked = 0;
    w.setCloseQuestion([&] { return ++asked > 1; });
    QVERIFY(!w.close());
    QCOMPARE(asked, 1);
    QVERIFY(w.isVisible());
    const QString run = w.controller()->runDir();
    QVERIFY(w.close());
    QCOMPARE(asked, 2);
    QTRY_VERIFY_WITH_TIMEOUT(QDir(run + "/checkpoints").entryList({"step_*"}, QDir::Dirs).size() == 1, 60000);
  }

  // Start refuses a model whose files cannot be read before the run folder exists (the folder
  // would show in Recent Runs), naming the file (issue 59 item 11).
  void startRefusesABrokenModelWithoutARunFolder() {
    ZS_REQUIRE_SHARED();
    QTemporaryDir tmp;
    const QString model = tmp.path() + "/model";
    QCOMPARE(QProcess::execute("cp", {"-r", zs::test::sharedDir() + "/fixtures/sd15-tiny", model}), 0);
    {
      QFile config(model + "/vae/config.json");
      QVERIFY(config.open(QIODevice::WriteOnly | QIODevice::Truncate));
      config.write("{\"in_channels\": ");
    }
    RunController c;
    c.setOverrides(smallRun(tmp.path()) + QStringList{"model.path=" + model, "model.prediction_type=epsilon"});
    QString error;
    QVERIFY(!c.startInProcess(zs::test::quickstart(), tmp.path() + "/run", {}, &error));
    QVERIFY2(error.contains("model.path") && error.contains("vae/config.json"), qPrintable(error));
    QVERIFY(!QFileInfo::exists(tmp.path() + "/run"));
  }

  // In-process runs take Pause and Stop through control.json too (one channel for every run), and
  // a Stop made before the model has loaded is not lost: the run ends without training a step.
  void inProcessCommandsGoThroughTheRunDirectory() {
    QTemporaryDir tmp;
    {
      RunController c;
      QStringList sets = smallRun(tmp.path());
      sets.replaceInStrings("training.max_steps=30", "training.max_steps=100000");
      c.setOverrides(sets);
      QString error;
      QVERIFY2(c.startInProcess(zs::test::quickstart(), tmp.path() + "/early", {}, &error),
               qPrintable(error));
      c.stop();  // at once: the trainer is still setting up
      QTRY_VERIFY_WITH_TIMEOUT(c.state() == RunState::finished || c.state() == RunState::failed, 120000);
      QVERIFY2(c.state() == RunState::finished, qPrintable(c.errorMessage()));
      QFile events(tmp.path() + "/early/events.jsonl");
      QVERIFY(events.open(QIODevice::ReadOnly));
      const QByteArray all = events.readAll();
      QVERIFY2(all.contains("\"type\":\"run_end\"") && all.contains("\"reason\":\"stopped\""), all.right(400).constData());
      QVERIFY(!all.contains("\"type\":\"metrics\""));
    }
    RunController c;
    QStringList sets = smallRun(tmp.path());
    sets.replaceInStrings("training.max_steps=30", "training.max_steps=100000");
    sets.replaceInStrings("checkpointing.every_n_steps=20", "checkpointing.every_n_steps=0");
    c.setOverrides(sets);
    QVERIFY(c.startInProcess(zs::test::quickstart(), tmp.path() + "/run"));
    QTRY_VERIFY_WITH_TIMEOUT(!c.metrics().empty(), 120000);
    c.setPaused(true);
    QTRY_COMPARE_WITH_TIMEOUT(c.state(), RunState::paused, 30000);
    c.setPaused(false);
    QTRY_COMPARE_WITH_TIMEOUT(c.state(), RunState::running, 30000);
    c.stop();
    QTRY_COMPARE_WITH_TIMEOUT(c.state(), RunState::finished, 120000);
  }

  // A run started while the previous run's thread has ended but its finished signal is still
  // queued (the GUI thread was busy: the start came first) keeps its own state: the old thread's
  // end neither frees what its handler still uses nor ends the new run.
  void aRunStartedBeforeTheLastThreadsEndIsDeliveredKeepsItsOwnState() {
    QTemporaryDir tmp;
    RunController c;
    QStringList sets = smallRun(tmp.path());
    sets.replaceInStrings("training.max_steps=30", "training.max_steps=2");
    sets.replaceInStrings("sampling.every_n_steps=10", "sampling.every_n_steps=0");
    sets.replaceInStrings("checkpointing.every_n_steps=20", "checkpointing.every_n_steps=0");
    c.setOverrides(sets);
    QString error;
    QVERIFY2(c.startInProcess(zs::test::quickstart(), tmp.path() + "/first", {}, &error), qPrintable(error));
    // Wait for the run's end without running the event loop, so its finished signal stays queued.
    QElapsedTimer clock;
    clock.start();
    auto ended = [&] {
      QFile f(tmp.path() + "/first/events.jsonl");
      return f.open(QIODevice::ReadOnly) && f.readAll().contains("\"type\":\"run_end\"");
    };
    while (!ended() && clock.elapsed() < 120000) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    QVERIFY(ended());
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));  // the thread's last destructors
    QVERIFY2(!c.ownsRun(), "the first run's thread should have ended by now");
    sets.replaceInStrings("training.max_steps=2", "training.max_steps=100000");
    c.setOverrides(sets);
    QVERIFY2(c.startInProcess(zs::test::quickstart(), tmp.path() + "/second", {}, &error), qPrintable(error));
    // Now the first thread's end is delivered; the second run goes on regardless.
    QTRY_VERIFY_WITH_TIMEOUT(!c.metrics().empty() || !c.isActive(), 120000);
    QVERIFY2(c.isActive(), qPrintable(QString("the second run reads state %1: %2").arg(static_cast<int>(c.state())).arg(c.errorMessage())));
    QVERIFY(c.ownsRun());
    c.stop();
    QTRY_VERIFY_WITH_TIMEOUT(c.state() == RunState::finished || c.state() == RunState::failed, 120000);
    QVERIFY2(c.state() == RunState::finished, qPrintable(c.errorMessage()));
  }

  // Two ranks in child processes: Pause, Save now, Sample now and Stop reach both through the
  // run directory.
  void twoRanksObeyTheCommands() {
    QTemporaryDir tmp;
    zs::test::FailureReport report(tmp.path() + "/run");
    RunController c;
    c.setExecutable(zs::test::cliPath());
    QStringList sets = smallRun(tmp.path());
    sets.replaceInStrings("training.max_steps=30", "training.max_steps=100000");
    sets.replaceInStrings("sampling.every_n_steps=10", "sampling.every_n_steps=0");
    sets.replaceInStrings("checkpointing.every_n_steps=20", "checkpointing.every_n_steps=0");
    c.setOverrides(sets);
    QString error;
    QVERIFY2(c.startProcesses(zs::test::quickstart(), 2, tmp.path() + "/run", &error),
             qPrintable(error));
    QTRY_VERIFY_WITH_TIMEOUT(!c.metrics().empty(), 120000);
    QCOMPARE(c.worldSize(), 2);
    QCOMPARE(c.metrics().back().ranks.size(), std::size_t{2});
    c.setPaused(true);
    QTRY_COMPARE_WITH_TIMEOUT(c.state(), RunState::paused, 30000);
    const qint64 pausedAt = c.step();
    c.saveNow();
    QTRY_VERIFY_WITH_TIMEOUT(QDir(tmp.path() + "/run/checkpoints").entryList(QDir::Dirs | QDir::NoDotAndDotDot).size() >= 1,
                             60000);
    c.sampleNow();
    QTRY_COMPARE_WITH_TIMEOUT(c.samples().size(), std::size_t{1}, 60000);
    QTest::qWait(1500);
    c.poll();
    QCOMPARE(c.step(), pausedAt);  // no step while paused, on either rank
    c.setPaused(false);
    QTRY_COMPARE_WITH_TIMEOUT(c.state(), RunState::running, 30000);
    QTRY_VERIFY_WITH_TIMEOUT(c.step() > pausedAt, 60000);
    c.stop();
    QTRY_COMPARE_WITH_TIMEOUT(c.state(), RunState::finished, 120000);
    QVERIFY(!c.ownsRun());
    QFile events(tmp.path() + "/run/events.jsonl");
    QVERIFY(events.open(QIODevice::ReadOnly));
    const QByteArray all = events.readAll();
    QVERIFY(all.contains("\"reason\":\"requested\""));
    QVERIFY(all.contains("\"reason\":\"stopped\""));
  }
};

ZS_TEST_MAIN(TestDashboardE2e);
#include "tst_dashboard_e2e.moc"
