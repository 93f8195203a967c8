// The main window: opens a trainer config, shows its problems, and renders (grabbed to PNG).
#include <QApplication>
#include <QDialog>
#include <QDir>
#include <QFile>
#include <QImage>
#include <QLabel>
#include <QPlainTextEdit>
#include <QSettings>
#include <QSignalSpy>
#include <QTemporaryDir>
#include <QTimer>
#include <QtTest>

#include "app_settings.h"
#include "main_window.h"
#include "setup_wizard.h"
#include "test_support.h"

using zs::ui::migrateLegacySettings;

class TestMainWindow : public QObject {
  Q_OBJECT

 private slots:
  // Settings move from ~/.config/ZeroStudio/ZeroStudio.conf to the XDG place,
  // $XDG_CONFIG_HOME/zerostudio/zerostudio.conf, once; a newer file there is never overwritten.
  void oldSettingsMoveToTheXdgFolder() {
    QTemporaryDir home;
    QDir().mkpath(home.path() + "/ZeroStudio");
    {
      QSettings old(home.path() + "/ZeroStudio/ZeroStudio.conf", QSettings::IniFormat);
      old.setValue("recentRuns", QStringList{"/runs/a", "/runs/b"});
    }
    QVERIFY(migrateLegacySettings(home.path()));
    QVERIFY(!QFile::exists(home.path() + "/ZeroStudio/ZeroStudio.conf"));
    QVERIFY(!QDir(home.path() + "/ZeroStudio").exists());
    const QSettings moved(home.path() + "/zerostudio/zerostudio.conf", QSettings::IniFormat);
    QCOMPARE(moved.value("recentRuns").toStringList(), (QStringList{"/runs/a", "/runs/b"}));
    QDir().mkpath(home.path() + "/ZeroStudio");
    QFile stale(home.path() + "/ZeroStudio/ZeroStudio.conf");
    QVERIFY(stale.open(QIODevice::WriteOnly));
    stale.close();
    QVERIFY(!migrateLegacySettings(home.path()));  // the new one stays as it is
    QCOMPARE(QSettings(home.path() + "/zerostudio/zerostudio.conf", QSettings::IniFormat).value("recentRuns").toStringList().size(), 2);
  }

  void opensQuickstartAndRenders() {
    zs::ui::MainWindow window;
    QSignalSpy opened(&window, &zs::ui::MainWindow::configOpened);
    window.show();
    QVERIFY(QTest::qWaitForWindowExposed(&window));
    QVERIFY(window.openConfig(zs::test::quickstart()));
    QCOMPARE(opened.count(), 1);
    QCOMPARE(opened.at(0).at(1).toBool(), true);
    QCOMPARE(window.statusText(), QString("quickstart.yaml: valid"));
    QVERIFY(window.configText().contains("preset: tiny"));
    QVERIFY(window.windowTitle().startsWith("quickstart.yaml"));

    const QImage shot = window.grab().toImage();
    QVERIFY(!shot.isNull());
    QVERIFY(shot.width() >= 800 && shot.height() >= 500);
    // Something was drawn: the picture is not one flat colour.
    const QRgb first = shot.pixel(0, 0);
    bool varied = false;
    for (int y = 0; y < shot.height() && !varied; y += 7)
      for (int x = 0; x < shot.width() && !varied; x += 7) varied = shot.pixel(x, y) != first;
    QVERIFY(varied);
    QVERIFY(shot.save(zs::test::binaryDir() + "/screenshot_main_window.png"));
  }

  // File > New Config opens the wizard with the open config's answers; what it saves opens.
  void newConfigGoesThroughTheWizard() {
    QTemporaryDir dir;
    zs::ui::MainWindow window;
    QVERIFY(window.openConfig(zs::test::quickstart()));
    auto* action = window.findChild<QAction*>("newConfig");
    QVERIFY(action);
    action->trigger();
    auto* wizard = window.findChild<zs::ui::SetupWizard*>();
    QVERIFY(wizard && wizard->isVisible());
    QCOMPARE(wizard->answer("resolution"), QString("16"));
    wizard->setAnswer("max_steps", "77");
    QVERIFY(wizard->saveTo(dir.path() + "/new.yaml", false));
    QCOMPARE(window.statusText(), QString("new.yaml: valid"));
    QVERIFY(window.configText().contains("max_steps: 77"));
  }

  // Help > System Check shows `zerostudio doctor`'s report for this machine and the open config.
  void helpSystemCheckShowsTheReport() {
    zs::ui::MainWindow window;
    QVERIFY(window.openConfig(zs::test::quickstart()));
    auto* action = window.findChild<QAction*>("systemCheck");
    QVERIFY(action);
    QString shown;
    QTimer::singleShot(0, [&] {
      auto* dialog = qobject_cast<QDialog*>(QApplication::activeModalWidget());
      if (!dialog) return;
      if (auto* text = dialog->findChild<QPlainTextEdit*>()) shown = text->toPlainText();
      dialog->reject();
    });
    action->trigger();  // returns when the dialog closes
    QVERIFY2(shown.contains("system check") && shown.contains("Host memory") && shown.contains("Offload"), qPrintable(shown));
    QVERIFY2(shown.contains("quickstart.yaml can run here"), qPrintable(shown));
  }

  void aFullSizeModelOnTheCpuAsksFirst() {
    // The device line names where the open config trains; a full-size model that would land on the
    // CPU asks before it starts (the question names the reason and the fix), a tiny one does not.
    qputenv("ZEROSTUDIO_NVIDIA_PROC", "/nonexistent/nvidia-version");
    qputenv("ZEROSTUDIO_NVIDIA_SMI", "/nonexistent/nvidia-smi");
    zs::ui::MainWindow window;
    QVERIFY(window.openConfig(zs::test::quickstart()));
    QVERIFY2(window.deviceText() == "Device: CPU (the config sets launch.use_cpu: true)", qPrintable(window.deviceText()));
    QVERIFY(window.openConfig(zs::test::sourceDir() + "/configs/sd15-lora.yaml"));
    const QString device = window.deviceText();
    if (device.startsWith("Device: GPU")) QSKIP("this machine trains sd15-lora.yaml on a GPU: nothing to ask");
    QVERIFY2(device.contains("CPU build") || device.contains("no NVIDIA driver"), qPrintable(device));
    QString asked;
    window.setCpuQuestion([&](const QString& question) {
      asked = question;
      return false;
    });
    QVERIFY(!window.startRun());
    QVERIFY2(asked.contains("sd15-lora.yaml") && asked.contains("full-size model") && asked.contains("To use a GPU:"),
             qPrintable(asked));
    QCOMPARE(window.statusText(), QString("Not started: a full-size model on the CPU"));
    QVERIFY(!window.controller()->isActive());
    // The wizard's memory panel says the same.
    zs::ui::SetupWizard* wizard = window.newConfig();
    auto* runsOn = wizard->findChild<QLabel*>("runsOn");
    QVERIFY(runsOn);
    QTRY_VERIFY2(runsOn->text().startsWith("Runs on: CPU ("), qPrintable(runsOn->text()));
    wizard->close();
    qunsetenv("ZEROSTUDIO_NVIDIA_PROC");
    qunsetenv("ZEROSTUDIO_NVIDIA_SMI");
  }

  void showsEveryProblemOfABadConfig() {
    QTemporaryDir dir;
    QFile bad(dir.path() + "/bad.yaml");
    QVERIFY(bad.open(QIODevice::WriteOnly));
    bad.write("zero:\n  stage: 7\ntraining:\n  max_stepz: 1\n");
    bad.close();
    zs::ui::MainWindow window;
    QVERIFY(!window.openConfig(bad.fileName()));
    QCOMPARE(window.statusText(), QString("bad.yaml: 2 problem(s)"));
    QVERIFY(window.configText().contains(":2:10: zero.stage: must be between 0 and 3 (got 7)"));
    QVERIFY(window.configText().contains(":4:3: training.max_stepz: unknown key"));
    QVERIFY(!window.openConfig(dir.path() + "/missing.yaml"));
    QCOMPARE(window.statusText(), QString("missing.yaml: cannot be read"));
  }
};

ZS_TEST_MAIN(TestMainWindow);
#include "tst_main_window.moc"
