// The Queue tab: it shows what `zerostudio queue` does to the shared queue file within seconds
// (add, move, stop, a job interrupted by kill -9), the CLI sees the panel's edits, a drag writes
// the new order, a waiting job's config is edited with its problems listed, and Run > Add to
// Queue and the wizard's "Save and Add to Queue" add the config.
#include <QDateTime>
#include <QDir>
#include <QLabel>
#include <QPushButton>
#include <QFile>
#include <QProcess>
#include <QTemporaryDir>
#include <QTreeWidget>
#include <QtTest>

#include "core/file_lock.h"
#include "main_window.h"
#include "queue_panel.h"
#include "setup_wizard.h"
#include "screenshot.h"
#include "test_support.h"
#include "train/job_queue.h"

namespace queue_panel_test {

/// `zerostudio ARGS` with the queue under `home` (XDG_CONFIG_HOME) and `cwd` as its folder.
QString cli(const QString& home, const QString& cwd, const QStringList& args, int* code = nullptr) {
  QProcess p;
  QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
  env.insert("XDG_CONFIG_HOME", home);
  p.setProcessEnvironment(env);
  p.setWorkingDirectory(cwd);
  p.setProcessChannelMode(QProcess::MergedChannels);
  p.start(zs::test::cliPath(), args);
  p.waitForFinished(60000);
  if (code) *code = p.exitCode();
  return QString::fromUtf8(p.readAll());
}

const QStringList kTiny = {"--set", "training.max_steps=4", "--set", "data.generate_count=64", "--set", "scheduler.warmup_steps=0"};

/// Overrides for the panel's addJob (no "--set"), with the runs under `root`.
QStringList tinyOverrides(const QString& root) {
  return {"training.max_steps=4", "data.generate_count=64", "scheduler.warmup_steps=0", "logging.runs_root=" + root + "/runs"};
}

}  // namespace queue_panel_test

using namespace queue_panel_test;

class TestQueuePanel : public QObject {
  Q_OBJECT

 private slots:
  // The CLI adds, moves and stops jobs; the panel (reading every second) shows each change
  // within a few seconds, without being told. The panel's own edits are what `queue list` prints.
  void panelAndCliSeeEachOthersEdits() {
    QTemporaryDir home;
    const QString dir = home.path() + "/zerostudio";
    QueuePanel panel(dir);
    panel.resize(1000, 360);
    panel.show();
    QCOMPARE(panel.jobIds().size(), 0);
    int code = -1;
    for (int i = 0; i < 3; ++i) {
      cli(home.path(), home.path(), QStringList{"queue", "add", zs::test::quickstart()} + kTiny, &code);
      QCOMPARE(code, 0);
    }
    QTRY_COMPARE_WITH_TIMEOUT(panel.jobIds(), (QList<qint64>{1, 2, 3}), 5000);
    QCOMPARE(panel.stateText(2), QString("waiting"));
    QVERIFY(panel.rowText(1).contains("quickstart-"));
    QVERIFY(panel.statusText().startsWith("3 waiting"));
    cli(home.path(), home.path(), {"queue", "move", "3", "1"});
    cli(home.path(), home.path(), {"queue", "stop", "2"});
    QTRY_COMPARE_WITH_TIMEOUT(panel.jobIds(), (QList<qint64>{3, 1, 2}), 5000);
    QTRY_COMPARE_WITH_TIMEOUT(panel.stateText(2), QString("stopped"), 5000);

    // The other way: the panel's edits in the file the CLI reads.
    QVERIFY(panel.retryJob(2));
    QVERIFY(panel.reorder({1, 2, 3}));
    QVERIFY(panel.setPaused(true));
    const QString listed = cli(home.path(), home.path(), {"queue", "list"});
    QVERIFY2(listed.contains("(paused)"), qPrintable(listed));
    QVERIFY(listed.indexOf("\n1 ") < listed.indexOf("\n2 ") && listed.indexOf("\n2 ") < listed.indexOf("\n3 "));
    QCOMPARE(listed.count("waiting"), 3);
    QVERIFY(panel.statusText().contains("paused"));
    QVERIFY(panel.removeJob(3));
    QVERIFY(!cli(home.path(), home.path(), {"queue", "list"}).contains("\n3 "));

    // A job marked running that nobody holds (its runner was killed) shows as interrupted; while
    // its lock is held it shows as running and cannot be removed.
    const zs::train::JobQueue q(dir.toStdString());
    q.update([](zs::train::QueueState& st) { st.find(1)->state = zs::train::JobState::running; });
    {
      const zs::FileLock live(q.job_lock(1));
      panel.refresh();
      QCOMPARE(panel.stateText(1), QString("running"));
      QString error;
      QVERIFY(!panel.removeJob(1, &error));
      QVERIFY2(error.contains("is running; stop it first"), qPrintable(error));
      QVERIFY(panel.findChild<QLabel*>("queueMessage")->isVisible());
    }
    panel.refresh();
    QCOMPARE(panel.stateText(1), QString("interrupted"));

  }

  // The guide's picture: a night of runs in every state (written into the file as a runner
  // would), each state and note shown as the file says.
  void guideScreenshot() {
    QTemporaryDir home;
    const QString dir = home.path() + "/zerostudio";
    QueuePanel panel(dir);
    for (int i = 0; i < 5; ++i) QVERIFY(panel.addJob(zs::test::quickstart(), tinyOverrides(home.path())) > 0);
    const zs::train::JobQueue q(dir.toStdString());
    const std::int64_t t = QDateTime::currentSecsSinceEpoch() - 3600;
    q.update([&](zs::train::QueueState& st) {
      using zs::train::JobState;
      st.jobs[0].state = JobState::finished, st.jobs[0].started_at = t, st.jobs[0].ended_at = t + 1500;
      st.jobs[1].state = JobState::failed, st.jobs[1].started_at = t + 1500, st.jobs[1].exit_code = 1;
      st.jobs[1].last_error = "data.path: folder '/data/cats' does not exist; choose the dataset folder";
      st.jobs[2].state = JobState::running, st.jobs[2].started_at = t + 1510, st.jobs[2].num_processes = 2;
      st.jobs[3].fit_note = "estimate 26.1 GiB per GPU does not fit 24.0 GiB";
    });
    const zs::FileLock live(q.job_lock(3));
    panel.resize(1100, 300);
    panel.show();
    panel.refresh();
    QCOMPARE(panel.stateText(1), QString("finished"));
    QCOMPARE(panel.stateText(2), QString("failed (1)"));
    QVERIFY(panel.rowText(2).contains("/data/cats"));
    QCOMPARE(panel.stateText(3), QString("running"));
    QVERIFY(panel.rowText(3).contains("| 2 |"));
    QVERIFY(panel.rowText(4).contains("may not fit: estimate 26.1 GiB"));
    QCOMPARE(panel.stateText(5), QString("waiting"));
    panel.list()->setCurrentItem(panel.list()->topLevelItem(3));
    QVERIFY(panel.findChild<QPushButton*>("queueEdit")->isEnabled());
    panel.list()->setCurrentItem(panel.list()->topLevelItem(2));
    QVERIFY(!panel.findChild<QPushButton*>("queueRemove")->isEnabled());  // running
    QVERIFY(panel.findChild<QPushButton*>("queueStop")->isEnabled());
    ZS_SAVE_SCREENSHOT(&panel, "queue");
  }

  // Run queue starts `zerostudio queue run` as a process of its own: it runs the waiting job while
  // the panel shows it running, then finishes and lets go of the runner lock; a second Run queue
  // while it works is refused.
  void runQueueStartsADetachedRunner() {
    QTemporaryDir home;
    const QString dir = home.path() + "/zerostudio";
    QueuePanel panel(dir);
    panel.setRunnerProgram(zs::test::cliPath());
    const qint64 id = panel.addJob(zs::test::quickstart(), tinyOverrides(home.path()) << "training.max_steps=40");
    QVERIFY(id > 0);
    const qint64 second = panel.addJob(zs::test::quickstart(), tinyOverrides(home.path()));
    QString error;
    const QByteArray suiteHome = qgetenv("XDG_CONFIG_HOME");
    qputenv("XDG_CONFIG_HOME", home.path().toUtf8());  // the runner (it inherits this) works on this queue
    const bool started = panel.startRunner(&error);
    qputenv("XDG_CONFIG_HOME", suiteHome);
    QVERIFY2(started, qPrintable(error));
    QTRY_VERIFY_WITH_TIMEOUT(panel.stateText(id).startsWith("running"), 20000);
    QVERIFY(panel.statusText().contains("a runner is working"));
    QVERIFY(!panel.startRunner(&error));
    QVERIFY2(error.contains("already at work"), qPrintable(error));
    QTRY_COMPARE_WITH_TIMEOUT(panel.stateText(second), QString("finished"), 120000);
    QCOMPARE(panel.stateText(id), QString("finished"));
    const zs::train::JobQueue q(dir.toStdString());
    QTRY_VERIFY_WITH_TIMEOUT(!q.runner_active(), 10000);
    QFile log(dir + "/queue-runner.log");
    QVERIFY(log.open(QIODevice::ReadOnly));
    const QString text = QString::fromUtf8(log.readAll());
    QVERIFY2(text.contains("job 1") && text.contains("no waiting jobs left (2 finished"), qPrintable(text));
    QVERIFY(panel.runnerLog().endsWith(text.right(200)));  // what the Runner log button shows
  }

  // A drag moves a row: the list's new order is written to the file (what the runner follows).
  void dragWritesTheOrder() {
    QTemporaryDir home;
    QueuePanel panel(home.path() + "/zerostudio");
    for (int i = 0; i < 3; ++i) QVERIFY(panel.addJob(zs::test::quickstart(), tinyOverrides(home.path())) > 0);
    QCOMPARE(panel.jobIds(), (QList<qint64>{1, 2, 3}));
    // What InternalMove does on a drop: the row leaves and comes back at its new place.
    QTreeWidgetItem* moved = panel.list()->takeTopLevelItem(2);
    panel.list()->insertTopLevelItem(0, moved);
    QTRY_COMPARE(cli(home.path(), home.path(), {"queue", "list"}).indexOf("\n3 ") <
                     cli(home.path(), home.path(), {"queue", "list"}).indexOf("\n1 "),
                 true);
    const zs::train::JobQueue q((home.path() + "/zerostudio").toStdString());
    QCOMPARE(q.read().jobs.front().id, 3);
    panel.refresh();
    QCOMPARE(panel.jobIds(), (QList<qint64>{3, 1, 2}));
  }

  // Edit config: an invalid edit is refused with the key named and the copy unchanged; a valid
  // one is written; a job that is no longer waiting cannot be edited.
  void editingAWaitingJobsConfig() {
    QTemporaryDir home;
    QueuePanel panel(home.path() + "/zerostudio");
    const qint64 id = panel.addJob(zs::test::quickstart(), tinyOverrides(home.path()));
    QVERIFY(id > 0);
    const QString before = panel.configText(id);
    QVERIFY2(before.contains("max_steps: 4"), qPrintable(before));
    QString error;
    QVERIFY(!panel.replaceConfig(id, QString(before).replace("max_steps: 4", "max_steps: many"), &error));
    QVERIFY2(error.contains("training.max_steps"), qPrintable(error));
    QCOMPARE(panel.configText(id), before);
    QVERIFY(panel.replaceConfig(id, QString(before).replace("max_steps: 4", "max_steps: 9"), &error));
    QVERIFY(panel.configText(id).contains("max_steps: 9"));
    QVERIFY(panel.stopJob(id));
    QVERIFY(!panel.replaceConfig(id, before, &error));
    QVERIFY2(error.contains("only a waiting job's config can change"), qPrintable(error));
    // A config with a problem is not added at all.
    QTemporaryDir dir;
    QFile bad(dir.path() + "/bad.yaml");
    QVERIFY(bad.open(QIODevice::WriteOnly));
    bad.write("version: 2\ntraining:\n  batch_size: -1\n");
    bad.close();
    QCOMPARE(panel.addJob(bad.fileName(), {}, 0, &error), 0);
    QVERIFY2(error.contains("bad.yaml:3") && error.contains("training.batch_size"), qPrintable(error));
    // A job whose estimate does not fit the card is added, flagged.
    const qint64 big = panel.addJob(zs::test::quickstart(), tinyOverrides(home.path()), 0, &error, 1 << 20);
    QVERIFY(big > 0);
    QVERIFY2(panel.rowText(big).contains("may not fit: estimate"), qPrintable(panel.rowText(big)));
  }

  // Run > Add to Queue adds the open config and shows the Queue tab; the wizard's last page
  // saves and adds through the main window.
  void addToQueueFromTheMenuAndTheWizard() {
    MainWindow window;
    const QString dir = qEnvironmentVariable("XDG_CONFIG_HOME") + "/zerostudio";  // the suite's own (test_main.cpp)
    const zs::train::JobQueue q(dir.toStdString());
    const std::size_t before = q.read().jobs.size();
    auto* action = window.findChild<QAction*>("addToQueue");
    QVERIFY(action);
    QVERIFY(!action->isEnabled());
    QTemporaryDir runs;
    QFile::copy(zs::test::quickstart(), runs.path() + "/mine.yaml");
    QVERIFY(window.openConfig(runs.path() + "/mine.yaml"));
    QVERIFY(action->isEnabled());
    action->trigger();
    QCOMPARE(q.read().jobs.size(), before + 1);
    QCOMPARE(window.tabs()->currentWidget(), static_cast<QWidget*>(window.queuePanel()));
    QVERIFY2(window.statusText().contains("to the queue as job"), qPrintable(window.statusText()));
    QCOMPARE(q.read().jobs.back().source, (runs.path() + "/mine.yaml").toStdString());

    SetupWizard* wizard = window.newConfig();
    QString error;
    QVERIFY2(wizard->saveToQueue(runs.path() + "/wizard.yaml", false, &error), qPrintable(error));
    QCOMPARE(q.read().jobs.size(), before + 2);
    QCOMPARE(q.read().jobs.back().source, (runs.path() + "/wizard.yaml").toStdString());
    QVERIFY(wizard->findChild<QPushButton*>("saveToQueue"));
    wizard->close();
    for (const auto& j : q.read().jobs) q.remove(j.id);
  }
};

ZS_TEST_MAIN(TestQueuePanel);
#include "tst_queue_panel.moc"
