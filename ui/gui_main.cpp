#include "gui_main.h"

#include <QApplication>
#include <QFileInfo>
#include <QIcon>

#include "app_settings.h"
#include "main_window.h"

namespace zs::ui {

int run_gui(int argc, char** argv, const std::string& config_path) {
  QApplication app(argc, argv);
  setUpSettings();  // QSettings (recent runs) under $XDG_CONFIG_HOME/zerostudio
  QApplication::setApplicationDisplayName(QStringLiteral("ZeroStudio"));
  QApplication::setApplicationVersion(QStringLiteral(ZS_VERSION));
  QApplication::setDesktopFileName(QStringLiteral("org.zerostudio.ZeroStudio"));
  QApplication::setWindowIcon(QIcon(QStringLiteral(":/icons/zerostudio.svg")));
  MainWindow window;
  const QString path = QString::fromStdString(config_path);
  if (!path.isEmpty() && QFileInfo(path).isDir()) window.openRun(path);
  else if (!path.isEmpty()) window.openConfig(path);
  window.show();
  return app.exec();
}

}  // namespace zs::ui
