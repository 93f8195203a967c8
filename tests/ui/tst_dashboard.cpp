// The dashboard against a scripted run directory (no training): the controller follows
// events.jsonl and the rank logs as they grow; charts, gallery, checkpoint table, log view and
// status follow; an error event shows the error; commands land in control.json; 100 000 points.
#include "train/control_file.h"

#include <cstdio>

#include <QDir>
#include <QElapsedTimer>
#include <QFile>
#include <QImage>
#include <QTableWidget>
#include <QTemporaryDir>
#include <QtTest>
#include <qcustomplot.h>

#include "checkpoint_browser.h"
#include "log_view.h"
#include "main_window.h"
#include "metrics_panel.h"
#include "run_controller.h"
#include "sample_gallery.h"
#include "scripted_run.h"
#include "test_support.h"

using namespace zs::ui;


class TestDashboard : public QObject {
  Q_OBJECT

 private slots:
  void initTestCase() { QCoreApplication::setOrganizationName("ZeroStudioTests"); }

  // Attach to a run whose events grow while the test runs.
  void attachFollowsAGrowingRun() {
    QTemporaryDir tmp;
    const QString dir = tmp.path() + "/run";
    ScriptedRun run(dir);
    run.message("generating");
    run.start(2, 100);
    for (int s = 2; s <= 50; s += 2) run.metrics(s, 2);
    run.log(0, "[step 0] run_start: {}");
    run.log(1, "[step 0] run_start: {}");
    MainWindow w;
    w.show();
    QVERIFY(QTest::qWaitForWindowExposed(&w));
    QVERIFY(w.openRun(dir));
    RunController* c = w.controller();
    QCOMPARE(c->state(), RunState::running);  // started, not ended: a live run
    QCOMPARE(w.metricsPanel()->pointCount("loss"), 25);
    QCOMPARE(w.metricsPanel()->pointCount("loss", 1), 25);  // smoothed
    QCOMPARE(w.metricsPanel()->plot("memory")->graphCount(), 2);  // one RSS graph per rank
    QCOMPARE(w.gallery()->stepCount(), 0);
    QCOMPARE(w.checkpoints()->rowCount(), 0);
    QVERIFY(w.recentRuns().value(0).endsWith("/run"));

    // The run goes on: more metrics, a sample step, a checkpoint, log lines (one an error).
    for (int s = 52; s <= 100; s += 2) run.metrics(s, 2);
    run.samples(60, 4);
    run.checkpoint(80);
    run.log(1, "[step 80] error: {\"message\":\"disk full\"}");
    QTRY_COMPARE_WITH_TIMEOUT(w.metricsPanel()->pointCount("loss"), 50, 5000);  // the timer polls
    QTRY_COMPARE(w.gallery()->stepCount(), 1);
    QCOMPARE(w.gallery()->currentStep(), qint64{60});
    QCOMPARE(w.gallery()->imageCount(), 4);
    QCOMPARE(w.gallery()->shownPrompts().value(2), QString("prompt 2"));
    QTRY_COMPARE(w.checkpoints()->rowCount(), 1);
    QCOMPARE(w.checkpoints()->table()->item(0, 1)->text(), QString("80"));
    QVERIFY(!w.checkpoints()->table()->item(0, 0)->icon().isNull());  // thumbnail of step 60's samples
    QVERIFY(w.checkpoints()->table()->item(0, 5)->text().contains("stage 2 · 2 rank(s)"));
    QTRY_COMPARE(w.logView()->shownLines(), 3);
    QCOMPARE(w.logView()->shownErrors(), 1);
    w.logView()->setRankFilter(1);
    QCOMPARE(w.logView()->shownLines(), 2);
    QVERIFY(w.logView()->text().contains("disk full"));
    QVERIFY2(w.progressText().contains("step 100/100"), qPrintable(w.progressText()));
    QVERIFY(w.progressText().contains("rank 1: running"));
    run.end(100, "finished");
    QTRY_COMPARE(c->state(), RunState::finished);
    QVERIFY(w.errorText().isEmpty());
    // Verify, then damage a file: verify names it; delete after confirmation.
    QVERIFY(w.checkpoints()->verify(0, true).isEmpty());
    {
      QFile f(w.checkpoints()->checkpointPath(0) + "/rank0.safetensors");
      QVERIFY(f.open(QIODevice::Append));
      f.write("x");
    }
    const QStringList problems = w.checkpoints()->verify(0, true);
    QCOMPARE(problems.size(), 1);
    QVERIFY2(problems[0].contains("rank0.safetensors"), qPrintable(problems[0]));
    QVERIFY(w.checkpoints()->remove(0, true));
    QCOMPARE(w.checkpoints()->rowCount(), 0);
  }

  // An error event: the state, the error banner with the last events.
  void errorEventShowsTheError() {
    QTemporaryDir tmp;
    ScriptedRun run(tmp.path());
    run.start(2, 10);
    run.metrics(2, 2);
    run.error(3, "collective all_reduce #12 failed: rank 1 is gone");
    run.end(3, "error");
    MainWindow w;
    w.show();
    QVERIFY(w.openRun(tmp.path()));
    QCOMPARE(w.controller()->state(), RunState::failed);
    QVERIFY2(w.errorText().contains("rank 1 is gone"), qPrintable(w.errorText()));
    QVERIFY(w.errorText().contains("Last events"));
    QVERIFY(w.controller()->rankStates().value(1).contains("failed"));
    QVERIFY(!w.openRun(tmp.path() + "/nothing"));
    QVERIFY(w.statusText().contains("not a run folder"));
  }

  // A failed save: the banner says why and what to do while the run waits (paused), and goes
  // once a checkpoint is saved.
  void aFailedSaveShowsInTheBannerUntilASaveSucceeds() {
    QTemporaryDir tmp;
    ScriptedRun run(tmp.path());
    run.start(1, 10);
    run.metrics(2, 1);
    MainWindow w;
    w.show();
    QVERIFY(w.openRun(tmp.path()));
    run.line("{\"type\":\"save_failed\",\"step\":4,\"time\":2,\"tag\":\"step_4\",\"needed_bytes\":33554432,"
             "\"free_bytes\":26214400,\"folder\":\"x/checkpoints\",\"rank\":0,\"message\":\"checkpoint step_4 not saved "
             "(older checkpoints are kept): 25 MiB free, the shard needs 32 MiB\"}");
    run.line("{\"type\":\"paused\",\"step\":4,\"time\":2,\"reason\":\"save_failed\",\"tag\":\"step_4\"}");
    QTRY_VERIFY(w.errorText().contains("Checkpoint not saved"));
    QVERIFY2(w.errorText().contains("25 MiB free, the shard needs 32 MiB"), qPrintable(w.errorText()));
    QVERIFY(w.errorText().contains("Save now"));
    QTRY_COMPARE(w.controller()->state(), RunState::paused);
    run.line("{\"type\":\"resumed\",\"step\":4,\"time\":3,\"reason\":\"saved\",\"tag\":\"step_4\"}");
    run.checkpoint(4);
    QTRY_VERIFY(w.errorText().isEmpty());
    QCOMPARE(w.controller()->state(), RunState::running);
  }

  // Validation losses are points on the loss chart; the loss-scale chart says when a run has no
  // loss scaling; the smoothed loss is the trainer's; the ETA counts the wall time between
  // metrics (sampling, validation and saving included); Validate now goes to control.json.
  void validationPointsLossScaleNoteAndEta() {
    QTemporaryDir tmp;
    ScriptedRun run(tmp.path());
    run.start(1, 100);
    MainWindow w;
    w.show();
    QVERIFY(w.openRun(tmp.path()));
    run.metrics(10, 1);  // 1 s of wall time per step, 0.25 s/it of training
    run.metrics(20, 1);
    QCustomPlot* loss = w.metricsPanel()->plot("loss");
    QTRY_COMPARE(w.metricsPanel()->pointCount("loss"), 2);
    // Issue 40's dashboard details: no validation entries in the legend before there are points;
    // no axes around the loss-scale note; the throughput legend outside the lines it names.
    QCOMPARE(loss->legend->itemCount(), 2);
    QVERIFY(!loss->legend->hasItemWithPlottable(loss->graph(2)) && !loss->legend->hasItemWithPlottable(loss->graph(3)));
    QCustomPlot* scale = w.metricsPanel()->plot("loss_scale");
    QVERIFY(!scale->xAxis->visible() && !scale->yAxis->visible());
    QCustomPlot* tp = w.metricsPanel()->plot("throughput");
    tp->replot();
    QVERIFY(tp->legend->visible());
    QCOMPARE(tp->legend->itemCount(), 2);
    QVERIFY2(!tp->legend->outerRect().intersects(tp->axisRect()->rect()),
             "the throughput legend lies outside the chart's lines");
    run.line("{\"type\":\"validation\",\"step\":10,\"time\":10,\"val_loss\":0.8,\"val_loss_ema\":0.9}");
    run.line("{\"type\":\"validation\",\"step\":20,\"time\":20,\"val_loss\":0.7}");
    QTRY_COMPARE(w.metricsPanel()->pointCount("loss", 2), 2);
    QCOMPARE(w.metricsPanel()->pointCount("loss", 3), 1);
    QVERIFY2(w.metricsPanel()->plotNote("loss_scale").contains("No loss scaling"), qPrintable(w.metricsPanel()->plotNote("loss_scale")));
    QVERIFY2(w.progressText().contains("ETA 1:20"), qPrintable(w.progressText()));  // 80 steps × 1 s, not × 0.25 s
    run.line("{\"type\":\"metrics\",\"step\":30,\"time\":30,\"loss\":0.5,\"loss_smoothed\":0.625,\"lr\":0.001,"
             "\"grad_norm\":1,\"samples_per_s\":100,\"s_per_step\":0.25,\"epoch\":3,\"loss_scale\":65536,\"ranks\":[]}");
    QTRY_COMPARE(w.metricsPanel()->pointCount("loss_scale"), 1);
    QCOMPARE(w.metricsPanel()->plotNote("loss_scale"), QString());
    QVERIFY(scale->xAxis->visible() && scale->yAxis->visible());
    QCOMPARE(loss->legend->itemCount(), 4);  // val_loss and val_loss (EMA) now that both have points
    QCOMPARE(w.controller()->metrics().back().smoothed, 0.625);
    QVERIFY(w.findChild<QAction*>("validateNow") != nullptr);
    w.controller()->validateNow();
    QCOMPARE(zs::train::read_control_file(tmp.path().toStdString()).validate, std::int64_t{1});
  }

  // Pause, stop, sample now and save now are written to the run's control.json.
  void commandsGoThroughTheControlFile() {
    QTemporaryDir tmp;
    ScriptedRun run(tmp.path());
    run.start(2, 10);
    RunController c;
    QVERIFY(c.attach(tmp.path()));
    c.setPaused(true);
    QCOMPARE(zs::train::read_control_file(tmp.path().toStdString()).pause, true);
    c.sampleNow();
    c.sampleNow();
    c.saveNow();
    c.stop();
    const auto s = zs::train::read_control_file(tmp.path().toStdString());
    QCOMPARE(s.sample, std::int64_t{2});
    QCOMPARE(s.save, std::int64_t{1});
    QCOMPARE(s.stop, true);
    QCOMPARE(s.pause, false);
    // The engine side: each request is applied once.
    zs::train::TrainerCommands commands;
    QTemporaryDir fresh;
    zs::train::ControlFilePoller poller(fresh.path().toStdString());
    zs::train::write_control_file(fresh.path().toStdString(), {true, false, 1, 0});
    poller.poll(commands);
    QVERIFY(commands.paused());
    QVERIFY(commands.take_sample_request());
    poller.poll(commands);
    QVERIFY(!commands.take_sample_request());
    zs::train::write_control_file(fresh.path().toStdString(), {false, true, 1, 1, 1});
    poller.poll(commands);
    QVERIFY(!commands.paused());
    QVERIFY(commands.stop_requested());
    QVERIFY(commands.take_save_request());
    QVERIFY(commands.take_validate_request());
    QVERIFY(!commands.take_validate_request());
  }

  // 100 000 metrics: all kept, drawn thinned, exported whole.
  void hundredThousandPoints() {
    QTemporaryDir tmp;
    ScriptedRun run(tmp.path());
    run.start(1, 100000);
    run.manyMetrics(100000);
    MainWindow w;
    w.resize(1280, 820);
    w.show();
    QVERIFY(QTest::qWaitForWindowExposed(&w));
    QElapsedTimer clock;
    clock.start();
    QVERIFY(w.openRun(tmp.path()));
    const qint64 loadMs = clock.elapsed();
    QCOMPARE(w.metricsPanel()->pointCount("loss"), 100000);
    QCustomPlot* loss = w.metricsPanel()->plot("loss");
    clock.restart();
    loss->replot(QCustomPlot::rpImmediateRefresh);
    qInfo("100000 points: read and plotted in %lld ms, one replot of the loss chart %lld ms (QCustomPlot: %.1f ms)",
          static_cast<long long>(loadMs), static_cast<long long>(clock.elapsed()), loss->replotTime());
    QVERIFY(w.metricsPanel()->valueText("loss", 5000.2).startsWith("step 5000"));
    const QString csv = tmp.path() + "/loss.csv";
    QVERIFY(w.metricsPanel()->exportCsv("loss", csv));
    QFile f(csv);
    QVERIFY(f.open(QIODevice::ReadOnly));
    QCOMPARE(f.readAll().count('\n'), 100001);
    QVERIFY(w.metricsPanel()->exportPng("loss", tmp.path() + "/loss.png"));
    QVERIFY(QImage(tmp.path() + "/loss.png").width() >= 640);
    w.metricsPanel()->setLogScale(true);
    QCOMPARE(loss->yAxis->scaleType(), QCPAxis::stLogarithmic);
  }
};

ZS_TEST_MAIN(TestDashboard);
#include "tst_dashboard.moc"
