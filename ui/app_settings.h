#pragma once
// Where the GUI's settings live: QSettings under the XDG config folder,
// $XDG_CONFIG_HOME/zerostudio/zerostudio.conf (Qt reads XDG_CONFIG_HOME). Before, they were
// written to ~/.config/ZeroStudio/ZeroStudio.conf (organisation and application "ZeroStudio");
// that file is moved once.

#include <QString>

namespace zs::ui {

/// Sets the organisation and application names QSettings uses ("zerostudio") and moves the old
/// settings file into place when only the old one exists. Returns the new file's path.
QString setUpSettings();

/// The move alone, in `configHome` (what XDG_CONFIG_HOME names): ZeroStudio/ZeroStudio.conf to
/// zerostudio/zerostudio.conf unless that exists; the emptied old folder goes too. True when it moved.
bool migrateLegacySettings(const QString& configHome);

}  // namespace zs::ui
