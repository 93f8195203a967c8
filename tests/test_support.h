#pragma once
// Helpers shared by the test executables.

#include <memory>
#include <string>

#include <QString>
#include <QStringList>

class QObject;

namespace zs::test {

/// ../shared beside the checkout (baked in by CMake), where the reference fixtures live.
QString sharedDir();

/// True when the shared fixtures exist. When they do not: under CI (CI set) the test
/// fails; elsewhere it is skipped with a message. Use through ZS_REQUIRE_SHARED().
bool sharedAvailable();

/// `rel` under ../shared/fixtures, as a std::string for the engine's readers.
std::string fixture(const QString& rel);

/// tests/data in the source tree.
QString testDataDir();
/// `rel` under tests/fixtures: golden files that tests/fixtures/gen/*.py make with the pinned peers.
QString peerFixture(const QString& rel);
/// The repository root.
QString sourceDir();
/// The build folder (screenshots and scratch output go here).
QString binaryDir();
/// configs/quickstart.yaml in the source tree.
QString quickstart();
/// The built `zerostudio` executable.
QString cliPath();
/// The built test worker for multi-process scenarios (tests/comm/dist_worker.cpp).
QString distWorkerPath();
/// A loopback TCP port that is free right now (for rendezvous in multi-process tests).
int freePort();

/// Tells the whole story of a failed test that ran processes: when the current test has failed
/// by the time this goes out of scope, it prints every output given to it and each run folder's
/// logs/rank*.log and the tail of its events.jsonl, in full (a QVERIFY2 message is cut at about
/// 1 KB, and the reason a process gives is usually at the end of its output).
class FailureReport {
 public:
  FailureReport() = default;
  explicit FailureReport(const QString& runDir) { addRun(runDir); }
  ~FailureReport();
  FailureReport(const FailureReport&) = delete;
  FailureReport& operator=(const FailureReport&) = delete;
  /// A run folder whose logs to print.
  void addRun(const QString& runDir) { m_runs << runDir; }
  /// A process's output, under `label`; a later call with the same label replaces it.
  void setOutput(const QString& label, const QString& text);

 private:
  QStringList m_runs, m_labels, m_outputs;
};

/// The test executables are suites of several Qt Test classes (so that their sources can be
/// compiled several to a translation unit); each class registers itself under its file's name
/// (tests/engine/tst_lora.cpp: tst_lora) through ZS_TEST_MAIN, and `SUITE tst_lora [ARGS]` runs it
/// with Qt Test's arguments (test_main.cpp).
using TestFactory = std::unique_ptr<QObject> (*)();
bool registerTest(const char* file, TestFactory make);
/// The registered test `name`, or null.
std::unique_ptr<QObject> makeTest(const std::string& name);
/// Every registered name, sorted.
QStringList registeredTests();

/// A tmpfs of `bytes` mounted on `dir` (created) for full-disk tests, unmounted on destruction.
/// Mounting needs root: check mounted() (and ZS_SKIP_UNLESS_CI when it is not).
class SmallDisk {
 public:
  SmallDisk(const QString& dir, qint64 bytes);
  ~SmallDisk();
  SmallDisk(const SmallDisk&) = delete;
  SmallDisk& operator=(const SmallDisk&) = delete;
  bool mounted() const { return m_mounted; }
  QString why() const { return m_why; }  ///< why it could not be mounted
  /// Writes DIR/filler until the disk is full.
  void fill() const;
  /// Gives the mounted disk another size (a remount; its files stay). False with errno on failure.
  bool resize(qint64 bytes) const;

 private:
  QByteArray m_dir;
  bool m_mounted = false;
  QString m_why;
};

/// Whether the current data row of a data-driven test function is this process's: a function
/// whose rows are dealt over several CTest tests (zs_split_test's PART:N, which sets
/// ZS_TEST_PART=K/N, K in 1..N) runs row i (counted per function, in order) only where
/// i % N == K - 1. Without ZS_TEST_PART every row is. Use ZS_SPLIT_ROWS() first in the function.
bool rowInThisPart();

}  // namespace zs::test

/// Skips a data row that another part of a split test runs (zs::test::rowInThisPart).
#define ZS_SPLIT_ROWS()                                                                             \
  do {                                                                                              \
    if (!zs::test::rowInThisPart()) QSKIP("run by another part of this test (ZS_TEST_PART)");      \
  } while (0)

/// Registers TestClass as its file's test (replaces QTEST_MAIN and QTEST_GUILESS_MAIN: the suite's
/// main makes a QApplication when the suite links Qt Widgets, a QCoreApplication otherwise).
#define ZS_TEST_MAIN(TestClass)                                                                     \
  static const bool zs_registered_##TestClass = zs::test::registerTest(                             \
      __FILE__, []() -> std::unique_ptr<QObject> { return std::make_unique<TestClass>(); })

/// Skips the current test with `why` where something it needs is not on this machine; under CI
/// (CI set), where everything must be, fails instead: CI never passes by skipping.
#define ZS_SKIP_UNLESS_CI(why)                                                                      \
  do {                                                                                              \
    const QString zs_why = (why);                                                                   \
    if (qEnvironmentVariableIsSet("CI")) QFAIL(qPrintable(zs_why + " (required in CI)"));           \
    QSKIP(qPrintable(zs_why));                                                                      \
  } while (0)

/// Skips (or under CI fails) the current test when ../shared is missing.
#define ZS_REQUIRE_SHARED()                                                                         \
  do {                                                                                              \
    if (!zs::test::sharedAvailable()) ZS_SKIP_UNLESS_CI("shared fixtures not found at " + zs::test::sharedDir()); \
  } while (0)
