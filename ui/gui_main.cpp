#include "gui_main.h"

#include <QApplication>
#include <QFileInfo>
#include <QIcon>

#include "main_window.h"

namespace zs::ui {

int run_gui(int argc, char** argv, const std::string& config_path) {
  QApplication app(argc, argv);
  QApplication::setApplicationName(QStringLiteral("ZeroStudio"));
  QApplication::setApplicationVersion(QStringLiteral(ZS_VERSION));
  QApplication::setOrganizationName(QStringLiteral("ZeroStudio"));  // QSettings: recent runs
  QApplication::setWindowIcon(QIcon(QStringLiteral(":/icons/zerostudio.svg")));
  MainWindow window;
  const QString path = QString::fromStdString(config_path);
  if (!path.isEmpty() && QFileInfo(path).isDir()) window.openRun(path);
  else if (!path.isEmpty()) window.openConfig(path);
  window.show();
  return app.exec();
}

}  // namespace zs::ui
