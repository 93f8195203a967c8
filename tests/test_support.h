#pragma once
// Helpers shared by the test executables.

#include <QString>

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
/// A loopback TCP port that is free right now (for rendezvous in multi-process tests).
int freePort();

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
