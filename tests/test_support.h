#pragma once
// Helpers shared by the test executables.

#include <QString>
#include <QStringList>

namespace zs::test {

/// ../shared beside the checkout (baked in by CMake), where the reference fixtures live.
QString sharedDir();

/// True when the shared fixtures exist. When they do not: under CI (CI set) the test
/// fails; elsewhere it is skipped with a message. Use through ZS_REQUIRE_SHARED().
bool sharedAvailable();

/// tests/data in the source tree.
QString testDataDir();
/// The repository root.
QString sourceDir();
/// The build folder (screenshots and scratch output go here).
QString binaryDir();
/// The built `zerostudio` executable.
QString cliPath();
/// The built test worker for multi-process scenarios (tests/dist/dist_worker.cpp).
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

}  // namespace zs::test

/// Skips (or under CI fails) the current test when ../shared is missing.
#define ZS_REQUIRE_SHARED()                                                                         \
  do {                                                                                              \
    if (!zs::test::sharedAvailable()) {                                                             \
      if (qEnvironmentVariableIsSet("CI"))                                                          \
        QFAIL(qPrintable("shared fixtures missing at " + zs::test::sharedDir() + " (required in CI)")); \
      QSKIP(qPrintable("shared fixtures not found at " + zs::test::sharedDir()));                   \
    }                                                                                               \
  } while (0)
