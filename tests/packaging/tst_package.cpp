// The Debian package: CPack builds it from this build folder, dpkg-deb and lintian check it, and
// the program runs from the package's files unpacked into a temporary root (dpkg -x): --version,
// `config validate` of every installed config, and a few quickstart steps, which land in
// ~/ZeroStudio/runs (the installed program's runs root; HOME is a temporary folder here). The
// desktop entry and AppStream metadata are validated as installed. Every tool is in the
// Makefile's package list, so nothing here skips for want of one.
#include <QDir>
#include <QDirIterator>
#include <QFile>
#include <QProcess>
#include <QProcessEnvironment>
#include <QRegularExpression>
#include <QTemporaryDir>
#include <QtTest>

#include "test_support.h"

namespace {

struct Ran {
  int code = -1;
  QString out;  // stdout and stderr together
};

Ran run(const QString& program, const QStringList& args, const QProcessEnvironment& env = QProcessEnvironment::systemEnvironment(),
        int timeout_ms = 300000) {
  QProcess p;
  p.setProcessEnvironment(env);
  p.setProcessChannelMode(QProcess::MergedChannels);
  p.start(program, args);
  if (!p.waitForStarted(20000)) return {-1, program + ": did not start"};
  if (!p.waitForFinished(timeout_ms)) {
    p.kill();
    p.waitForFinished();
    return {-1, program + ": timed out\n" + QString::fromUtf8(p.readAll())};
  }
  return {p.exitStatus() == QProcess::NormalExit ? p.exitCode() : -2, QString::fromUtf8(p.readAll())};
}

/// Whether this build has the GUI (then the package has its desktop entry, icons and metadata).
bool gui_build() {
  QFile cache(zs::test::binaryDir() + "/CMakeCache.txt");
  return cache.open(QIODevice::ReadOnly) && cache.readAll().contains("ZS_BUILD_GUI:BOOL=ON");
}

/// Whether this build links the GPU runtime folder (then cpack writes the GPU package, zerostudio-cuda).
QString runtime_install_dir() {
  QFile cache(zs::test::binaryDir() + "/CMakeCache.txt");
  if (!cache.open(QIODevice::ReadOnly)) return {};
  for (const QByteArray& line : cache.readAll().split('\n'))
    if (line.startsWith("ZS_INSTALL_RUNTIME:PATH=")) return QString::fromUtf8(line.mid(24));
  return {};
}

/// The runtime folder this build linked (Torch_DIR is <root>/torch/share/cmake/Torch).
QString runtime_root() {
  QFile cache(zs::test::binaryDir() + "/CMakeCache.txt");
  if (!cache.open(QIODevice::ReadOnly)) return {};
  for (const QByteArray& line : cache.readAll().split('\n'))
    if (line.startsWith("Torch_DIR:PATH=")) return QDir(QString::fromUtf8(line.mid(15)) + "/../../../..").absolutePath();
  return {};
}

QString version() {
  const Ran v = run(zs::test::cliPath(), {"--version"});
  return v.out.section(' ', 1, 1).section('\n', 0, 0).trimmed();  // "zerostudio 0.1.0 ..."
}

}  // namespace

class TestPackage : public QObject {
  Q_OBJECT

 private slots:
  void debianPackageInstallsAndRuns() {
    if (!runtime_install_dir().isEmpty()) QSKIP("a GPU build: gpuPackageWithoutItsRuntime checks its package");
    QTemporaryDir out, root, home;
    // 1. The package, from this build (no rebuild: the build is complete when tests run).
    const Ran cpack = run("cpack", {"-G", "DEB", "--config", zs::test::binaryDir() + "/CPackConfig.cmake", "-B", out.path()});
    QVERIFY2(cpack.code == 0, qPrintable(cpack.out));
    const QString deb = out.path() + "/zerostudio_" + version() + "_amd64.deb";
    QVERIFY2(QFile::exists(deb), qPrintable("no " + deb + "\n" + cpack.out));

    // It replaces the GPU package and is replaced by it.
    const Ran conflicts = run("dpkg-deb", {"-f", deb, "Conflicts", "Replaces"});
    QVERIFY2(conflicts.out.count("zerostudio-cuda") == 2, qPrintable(conflicts.out));

    // 2. Its dependencies were computed from the binary's libraries (dpkg-shlibdeps).
    const Ran depends = run("dpkg-deb", {"-f", deb, "Depends"});
    QCOMPARE(depends.code, 0);
    for (const char* lib : {"libtorch", "libyaml-cpp", "libpng16", "libjpeg", "liburing", "libicu", "libstdc++6",
                            "libopenblas0-pthread"})
      QVERIFY2(depends.out.contains(lib), qPrintable(QString(lib) + " missing from Depends: " + depends.out));
    if (gui_build())
    for (const char* lib : {"libqt6widgets6", "libqcustomplot"})
      QVERIFY2(depends.out.contains(lib), qPrintable(QString(lib) + " missing from Depends: " + depends.out));

    // 3. lintian: no errors.
    const Ran lintian = run("lintian", {"--tag-display-limit", "0", deb});
    QStringList errors;
    for (const QString& line : lintian.out.split('\n'))
      if (line.startsWith("E: ")) errors << line;
    qInfo("lintian: %d line(s), %lld error(s)", static_cast<int>(lintian.out.count('\n')), static_cast<long long>(errors.size()));
    QVERIFY2(errors.isEmpty(), qPrintable(lintian.out));

    // 4. Unpacked into a temporary root: every part is where the system expects it.
    const Ran x = run("dpkg", {"-x", deb, root.path()});
    QVERIFY2(x.code == 0, qPrintable(x.out));
    const QString usr = root.path() + "/usr";
    const QStringList expected = {"bin/zerostudio",
                                  "share/zerostudio/configs/quickstart.yaml",
                                  "share/zerostudio/configs/sd15-lora.yaml",
                                  "share/man/man1/zerostudio.1.gz",
                                  "share/bash-completion/completions/zerostudio",
                                  "share/doc/zerostudio/copyright",
                                  "share/doc/zerostudio/changelog.gz",
                                  "share/doc/zerostudio/README.md",
                                  "share/doc/zerostudio/guide/README.md"};
    for (const QString& f : expected) QVERIFY2(QFile::exists(usr + "/" + f), qPrintable(f + " is not in the package"));
    if (gui_build()) {
    for (const QString& f : {QString("share/applications/org.zerostudio.ZeroStudio.desktop"),
                             QString("share/metainfo/org.zerostudio.ZeroStudio.metainfo.xml"),
                             QString("share/icons/hicolor/scalable/apps/zerostudio.svg"),
                             QString("share/icons/hicolor/48x48/apps/zerostudio.png"),
                             QString("share/icons/hicolor/256x256/apps/zerostudio.png")})
      QVERIFY2(QFile::exists(usr + "/" + f), qPrintable(f + " is not in the package"));
    const Ran desktop = run("desktop-file-validate", {usr + "/share/applications/org.zerostudio.ZeroStudio.desktop"});
    QVERIFY2(desktop.code == 0 && !desktop.out.contains("error:"), qPrintable(desktop.out));
    const Ran appstream = run("appstreamcli", {"validate", "--no-net", usr + "/share/metainfo/org.zerostudio.ZeroStudio.metainfo.xml"});
    QVERIFY2(appstream.code == 0, qPrintable(appstream.out));
    }

    // 5. The unpacked program runs: it finds its libraries on the system and knows it is installed.
    QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
    env.insert("HOME", home.path());
    env.remove("XDG_CONFIG_HOME");
    env.remove("XDG_CACHE_HOME");
    env.remove("ZEROSTUDIO_INSTALLED");
    const QString exe = usr + "/bin/zerostudio";
    const Ran v = run(exe, {"--version"}, env);
    QVERIFY2(v.code == 0 && v.out.startsWith("zerostudio " + version()), qPrintable(v.out));
    QDirIterator configs(usr + "/share/zerostudio/configs", {"*.yaml"});
    int validated = 0;
    while (configs.hasNext()) {
      const QString config = configs.next();
      const Ran check = run(exe, {"config", "validate", config}, env);
      QVERIFY2(check.code == 0, qPrintable(config + ":\n" + check.out));
      ++validated;
    }
    QVERIFY(validated >= 5);
    const Ran train = run(exe, {"train", usr + "/share/zerostudio/configs/quickstart.yaml", "--set", "training.max_steps=3", "--set",
                               "data.generate_count=32", "--set", "training.batch_size=4", "--set", "sampling.every_n_steps=0",
                               "--set", "checkpointing.every_n_steps=0", "--set", "logging.run_name=from-the-package"},
                          env);
    QVERIFY2(train.code == 0, qPrintable(train.out));
    const QString run_dir = home.path() + "/ZeroStudio/runs/from-the-package";
    QVERIFY2(QFile::exists(run_dir + "/checkpoints/step_3/meta.json"), qPrintable("no checkpoint in " + run_dir + "\n" + train.out));
    // The man page renders.
    const Ran man = run("sh", {"-c", "zcat '" + usr + "/share/man/man1/zerostudio.1.gz' | groff -man -Tutf8 -ww -z"});
    QVERIFY2(man.code == 0 && man.out.isEmpty(), qPrintable(man.out));
    // A pipeline's latents go to the XDG cache folder ($XDG_CACHE_HOME unset: ~/.cache/zerostudio).
    ZS_REQUIRE_SHARED();
    const Ran pipeline = run(exe, {"train", usr + "/share/zerostudio/configs/quickstart.yaml", "--set",
                                   "model.path=" + QString::fromStdString(zs::test::fixture("sd15-tiny")), "--set",
                                   "model.prediction_type=epsilon", "--set", "data.resolution=32", "--set",
                                   "data.generate_count=16", "--set", "training.batch_size=4", "--set", "training.max_steps=1",
                                   "--set", "sampling.every_n_steps=0", "--set", "checkpointing.every_n_steps=0", "--set",
                                   "logging.run_name=pipeline", "--set", "ema.enabled=false"},
                             env);
    QVERIFY2(pipeline.code == 0, qPrintable(pipeline.out));
    QVERIFY2(QDir(home.path() + "/.cache/zerostudio/latents").exists(), qPrintable(pipeline.out));
  }

  void gpuPackageWithoutItsRuntime() {
    // The GPU package (issue 52): the GPU build in /usr/lib/zerostudio behind a launcher, without
    // the CUDA libraries, which `zerostudio runtime install` fetches into ZS_INSTALL_RUNTIME.
    const QString installed_runtime = runtime_install_dir();
    if (installed_runtime.isEmpty()) QSKIP("the CPU build: debianPackageInstallsAndRuns checks its package");
    QTemporaryDir out, root;
    const Ran cpack = run("cpack", {"-G", "DEB", "--config", zs::test::binaryDir() + "/CPackConfig.cmake", "-B", out.path()});
    QVERIFY2(cpack.code == 0, qPrintable(cpack.out));
    const QString deb = out.path() + "/zerostudio-cuda_" + version() + "_amd64.deb";
    QVERIFY2(QFile::exists(deb), qPrintable("no " + deb + "\n" + cpack.out));
    QVERIFY2(QFileInfo(deb).size() < 32 << 20, "no CUDA library inside");
    const Ran fields = run("dpkg-deb", {"-f", deb, "Conflicts", "Replaces", "Provides", "Depends"});
    QVERIFY2(fields.out.count(QRegularExpression("\\bzerostudio\\n")) == 3 && fields.out.contains("python3-venv") &&
                 fields.out.contains("libqt6widgets6") && !fields.out.contains("libtorch"),
             qPrintable(fields.out));
    const Ran lintian = run("lintian", {"--tag-display-limit", "0", deb});
    QVERIFY2(!lintian.out.contains("\nE: ") && !lintian.out.startsWith("E: "), qPrintable(lintian.out));
    QVERIFY2(run("dpkg", {"-x", deb, root.path()}).code == 0, "dpkg -x");
    const QString usr = root.path() + "/usr";
    for (const QString& f : {QString("bin/zerostudio"), QString("lib/zerostudio/zerostudio"), QString("lib/zerostudio/zs-runtime"),
                             QString("lib/zerostudio/libzs_sentencepiece.so"), QString("share/zerostudio/configs/quickstart.yaml"),
                             QString("share/doc/zerostudio-cuda/copyright"), QString("share/lintian/overrides/zerostudio-cuda")})
      QVERIFY2(QFile::exists(usr + "/" + f), qPrintable(f + " is not in the package"));
    // The program's RUNPATH is the system runtime folder's.
    const Ran dynamic = run("readelf", {"-d", usr + "/lib/zerostudio/zerostudio"});
    QVERIFY2(dynamic.out.contains("RUNPATH") && dynamic.out.contains(installed_runtime + "/torch/lib"), qPrintable(dynamic.out));
    // Without the runtime the launcher says what to run, and `runtime` works without LibTorch.
    QFile launcher(usr + "/bin/zerostudio");
    QVERIFY(launcher.open(QIODevice::ReadOnly));
    const QString script = QString::fromUtf8(launcher.readAll());
    QVERIFY2(script.contains("runtime=" + installed_runtime + "\n") && script.contains("sudo zerostudio runtime install") &&
                 script.contains("exec /usr/lib/zerostudio/zerostudio"),
             qPrintable(script));
    QTemporaryDir fake_root;
    QString played = script;
    played.replace("runtime=" + installed_runtime, "runtime=" + fake_root.path() + "/absent");
    played.replace("/usr/lib/zerostudio/", usr + "/lib/zerostudio/");
    const QString launcher_copy = fake_root.path() + "/zerostudio";
    {
      QFile f(launcher_copy);
      QVERIFY(f.open(QIODevice::WriteOnly));
      f.write(played.toUtf8());
    }
    QProcessEnvironment no_display = QProcessEnvironment::systemEnvironment();  // else it opens a window
    no_display.remove("DISPLAY");
    no_display.remove("WAYLAND_DISPLAY");
    const Ran missing = run("sh", {launcher_copy, "doctor"}, no_display);
    QVERIFY2(missing.code == 1 && missing.out.contains("is not\ninstalled in " + fake_root.path() + "/absent") &&
                 missing.out.contains("zerostudio-cuda/guide/install.md"),
             qPrintable(missing.out));
    const Ran status = run("sh", {launcher_copy, "runtime", "status", "--dir", fake_root.path() + "/absent"}, no_display);
    QVERIFY2(status.code == 1 && status.out.contains("is not installed in " + fake_root.path() + "/absent"), qPrintable(status.out));
    // With the runtime this build was made against in front (the lent GPU machine does the same
    // with its own PyTorch), the packaged program runs: doctor --json names it, and knows it is installed.
    QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
    const QString rt_root = runtime_root();
    QVERIFY2(QFile::exists(rt_root + "/zerostudio-runtime.txt"), qPrintable(rt_root));
    env.insert("LD_LIBRARY_PATH", rt_root + "/torch/lib:" + rt_root + "/nvidia/cu13/lib");
    const Ran doctor = run(usr + "/lib/zerostudio/zerostudio", {"doctor", "--json"}, env);
    QVERIFY2(doctor.code == 0 && doctor.out.contains("\"runtime_build\": true"), qPrintable(doctor.out));
    QVERIFY2(doctor.out.contains("quickstart.yaml"), "the installed configs are found from /usr/lib/zerostudio");
  }
};

ZS_TEST_MAIN(TestPackage);
#include "tst_package.moc"
