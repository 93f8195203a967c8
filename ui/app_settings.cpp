#include "app_settings.h"

#include <QCoreApplication>
#include <QDir>
#include <QFile>
#include <QSettings>
#include <QStandardPaths>

namespace zs::ui {

bool migrateLegacySettings(const QString& configHome) {
  const QString oldFile = configHome + QStringLiteral("/ZeroStudio/ZeroStudio.conf");
  const QString newFile = configHome + QStringLiteral("/zerostudio/zerostudio.conf");
  if (!QFile::exists(oldFile) || QFile::exists(newFile)) return false;
  QDir().mkpath(configHome + QStringLiteral("/zerostudio"));
  if (!QFile::rename(oldFile, newFile) && !(QFile::copy(oldFile, newFile) && QFile::remove(oldFile))) return false;
  QDir(configHome).rmdir(QStringLiteral("ZeroStudio"));  // only when empty
  return true;
}

QString setUpSettings() {
  QCoreApplication::setOrganizationName(QStringLiteral("zerostudio"));
  QCoreApplication::setApplicationName(QStringLiteral("zerostudio"));
  const QString configHome = QStandardPaths::writableLocation(QStandardPaths::GenericConfigLocation);
  migrateLegacySettings(configHome);
  return QSettings().fileName();
}

}  // namespace zs::ui
