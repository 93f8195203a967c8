#pragma once
// The main window: a trainer config (open, or made with the setup wizard), run control (Start,
// Pause, Stop, Sample now, Save now) for one rank in-process or several as child processes, and
// the live panels of the current run: charts, samples, checkpoints, log. Any run directory can be
// opened (live, from a terminal, or finished) and looks the same. The status bar shows step,
// epoch, s/it, ETA and every rank's state; an engine failure shows its error and last events.

#include <functional>

#include <QMainWindow>
#include <QString>

class QAction;
class QLabel;
class QMenu;
class QPlainTextEdit;
class QTabWidget;

namespace zs::ui {

class CheckpointBrowser;
class LogView;
class MetricsPanel;
class QueuePanel;
class RunController;
class SampleGallery;
class SetupWizard;
enum class RunState;

class MainWindow : public QMainWindow {
  Q_OBJECT

 public:
  explicit MainWindow(QWidget* parent = nullptr);
  ~MainWindow() override;

  /// Loads and validates a trainer config; shows its resolved YAML or its problems.
  /// Returns true when the config is valid.
  bool openConfig(const QString& path);
  /// Opens a run directory (follows it while it grows). False with a message in the status bar.
  bool openRun(const QString& runDir);
  /// Starts the open config: in this process for one rank, through `zerostudio launch` for more.
  bool startRun();
  /// Opens the setup wizard (filled from the open config, if any); a saved config is opened.
  SetupWizard* newConfig();
  /// Adds a config as a job of the queue and shows the Queue tab. Returns its id, 0 when refused
  /// (the status bar and the panel say why).
  qint64 addToQueue(const QString& configPath);

  /// The text shown for the config (resolved YAML, or the list of problems).
  QString configText() const;
  /// The status-bar message about the config.
  QString statusText() const;
  /// The status-bar progress ("step 12/30 · epoch … · ETA …") and rank states.
  QString progressText() const;
  /// The error banner's text (empty when hidden).
  QString errorText() const;

  RunController* controller() const { return m_controller; }
  MetricsPanel* metricsPanel() const { return m_metrics; }
  SampleGallery* gallery() const { return m_gallery; }
  CheckpointBrowser* checkpoints() const { return m_checkpoints; }
  LogView* logView() const { return m_log; }
  QueuePanel* queuePanel() const { return m_queue; }
  QTabWidget* tabs() const { return m_tabs; }
  /// Recent run folders, newest first.
  QStringList recentRuns() const;
  /// What closing while a run goes on asks (tests replace the dialog): true = stop, save, close.
  void setCloseQuestion(std::function<bool()> ask) { m_askClose = std::move(ask); }
  /// The device line above the tabs: where the open config trains ("GPU 0: …", or "CPU (why)").
  QString deviceText() const;
  /// What starting a full-size model on the CPU asks, with the reason and the fix (tests replace
  /// the dialog): true = train on the CPU anyway.
  void setCpuQuestion(std::function<bool(const QString&)> ask) { m_askCpu = std::move(ask); }

 signals:
  void configOpened(const QString& path, bool valid);

 protected:
  void closeEvent(QCloseEvent* event) override;

 private:
  void chooseConfig();
  void chooseRun();
  void showAbout();
  /// Help > System check: the report of `zerostudio doctor` for this machine and the open config.
  void showSystemCheck();
  void updateActions();
  void updateStatus();
  void runStateChanged(RunState state);
  void addRecentRun(const QString& dir);
  void rebuildRecentMenu();
  void resumeFrom(const QString& checkpoint);

  RunController* m_controller = nullptr;
  QTabWidget* m_tabs = nullptr;
  MetricsPanel* m_metrics = nullptr;
  SampleGallery* m_gallery = nullptr;
  CheckpointBrowser* m_checkpoints = nullptr;
  LogView* m_log = nullptr;
  QueuePanel* m_queue = nullptr;
  QPlainTextEdit* m_configView = nullptr;
  QLabel* m_status = nullptr;
  QLabel* m_progress = nullptr;
  QLabel* m_error = nullptr;
  QLabel* m_device = nullptr;
  QMenu* m_recent = nullptr;
  QAction* m_start = nullptr;
  QAction* m_pause = nullptr;
  QAction* m_stop = nullptr;
  QAction* m_sample = nullptr;
  QAction* m_save = nullptr;
  QAction* m_validate = nullptr;
  QAction* m_addToQueue = nullptr;
  QString m_configPath;
  int m_configProcesses = 1;
  std::function<bool()> m_askClose;
  std::function<bool(const QString&)> m_askCpu;
  QString m_cpuConsent;  ///< the question for a full-size model on the CPU (empty: none to ask)
};

}  // namespace zs::ui
