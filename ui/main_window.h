#pragma once
// The main window: opens and checks a trainer config, starts the setup wizard, and shows the
// (empty) loss chart; run control and the live panels come with the dashboard issue.

#include <QMainWindow>
#include <QString>

class QCustomPlot;
class QLabel;
class QPlainTextEdit;

namespace zs::ui {

class SetupWizard;

class MainWindow : public QMainWindow {
  Q_OBJECT

 public:
  explicit MainWindow(QWidget* parent = nullptr);

  /// Loads and validates a trainer config; shows its resolved YAML or its problems.
  /// Returns true when the config is valid.
  bool openConfig(const QString& path);

  /// Opens the setup wizard (filled from the open config, if any); a saved config is opened.
  SetupWizard* newConfig();

  /// The text shown for the config (resolved YAML, or the list of problems).
  QString configText() const;
  /// The status-bar message.
  QString statusText() const;

 signals:
  void configOpened(const QString& path, bool valid);

 private:
  void chooseConfig();
  void showAbout();

  QPlainTextEdit* m_configView = nullptr;
  QCustomPlot* m_lossPlot = nullptr;
  QLabel* m_status = nullptr;
  QString m_configPath;
};

}  // namespace zs::ui
