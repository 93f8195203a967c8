#pragma once
// The guide's pictures: UI tests grab widgets into BUILD/screenshots (scripts/guide_screenshots.sh
// copies them to docs/guide/images).

#include <QString>

class QWidget;

/// Grabs `w` (after pending events) into BUILD/screenshots/NAME.png. Returns "" or why not: an
/// empty or one-colour grab, or a file that cannot be written.
QString saveScreenshot(QWidget* w, const QString& name);

/// saveScreenshot in a test function: fails it with the reason.
#define ZS_SAVE_SCREENSHOT(widget, name)                      \
  do {                                                        \
    const QString zsWhyNot = saveScreenshot((widget), (name)); \
    QVERIFY2(zsWhyNot.isEmpty(), qPrintable(zsWhyNot));       \
  } while (0)
