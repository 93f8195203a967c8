#pragma once
// The Queue tab: the job queue shared with `zerostudio queue` (engine train/job_queue.h) — jobs
// in run order with their state, drag to reorder, add, remove, edit a waiting job's config,
// stop, retry, pause the queue, and start a runner (`zerostudio queue run`, a process of its own,
// so the queue goes on when the GUI closes). It reads the queue file every second (and when the
// folder changes), so edits made from the command line show within seconds.

#include <functional>
#include <memory>

#include <QString>
#include <QStringList>
#include <QWidget>

class QCheckBox;
class QFileSystemWatcher;
class QLabel;
class QPushButton;
class QTimer;
class QTreeWidget;

namespace zs::train {
class JobQueue;
}

namespace zs::ui {

class QueuePanel : public QWidget {
  Q_OBJECT

 public:
  /// The queue in `queueDir` (empty: the user's, $XDG_CONFIG_HOME/zerostudio).
  explicit QueuePanel(const QString& queueDir = QString(), QWidget* parent = nullptr);
  ~QueuePanel() override;

  /// Adds a job (the config is checked; `error` lists its problems), flagged when its estimate does
  /// not fit `gpuMemory` bytes (-1: the detected GPU). Returns the job's id, or 0.
  qint64 addJob(const QString& configFile, const QStringList& overrides = {}, int processes = 0, QString* error = nullptr,
                qint64 gpuMemory = -1);
  bool removeJob(qint64 id, QString* error = nullptr);
  bool stopJob(qint64 id, QString* error = nullptr);
  bool retryJob(qint64 id, QString* error = nullptr);
  /// Puts the jobs in this order (what a drag does).
  bool reorder(const QList<qint64>& ids, QString* error = nullptr);
  /// Replaces a waiting job's config with `yaml` (validated; `error` lists the problems).
  bool replaceConfig(qint64 id, const QString& yaml, QString* error = nullptr);
  /// The job's config copy, to edit.
  QString configText(qint64 id) const;
  bool setPaused(bool paused, QString* error = nullptr);
  /// Starts `PROGRAM queue run [--stop-on-failure]` detached (the program: setRunnerProgram, else
  /// this executable). False when a runner is already at work or it could not start.
  bool startRunner(QString* error = nullptr);
  void setRunnerProgram(const QString& program) { m_runnerProgram = program; }
  /// The end (last 64 KiB) of what the runners started from here printed (queue-runner.log in the
  /// queue's folder), what the Runner log button shows.
  QString runnerLog() const;

  /// Re-reads the queue file now (the timer does it every second).
  void refresh();
  /// What the list shows, in order: ids, and each row's state text ("waiting", "failed (1)", ...).
  QList<qint64> jobIds() const;
  QString stateText(qint64 id) const;
  /// The whole row as shown (columns joined by " | "), for tests and screenshots.
  QString rowText(qint64 id) const;
  QString statusText() const;
  QTreeWidget* list() const { return m_list; }

 signals:
  /// The user asked to watch a job's run folder (double click, Open run).
  void openRunRequested(const QString& runDir);
  /// The queue changed on disk and was read again.
  void queueChanged();

 private:
  qint64 selectedId() const;
  void updateButtons();
  void editSelected();
  void chooseAndAdd();
  void report(const QString& error);
  void commitDraggedOrder();
  bool guarded(const std::function<void()>& action, QString* error);

  std::unique_ptr<train::JobQueue> m_queue;
  QTreeWidget* m_list = nullptr;
  QLabel* m_status = nullptr;
  QLabel* m_message = nullptr;
  QPushButton* m_add = nullptr;
  QPushButton* m_edit = nullptr;
  QPushButton* m_stop = nullptr;
  QPushButton* m_retry = nullptr;
  QPushButton* m_remove = nullptr;
  QPushButton* m_open = nullptr;
  QPushButton* m_pause = nullptr;
  QPushButton* m_run = nullptr;
  QPushButton* m_log = nullptr;
  QCheckBox* m_stopOnFailure = nullptr;
  QTimer* m_timer = nullptr;
  QFileSystemWatcher* m_watcher = nullptr;
  QString m_runnerProgram;
  QList<qint64> m_order;  ///< the ids in the file's order, as last read
  QString m_shown;  ///< what the list shows, to skip rebuilding it when nothing changed
  bool m_runnerActive = false;
  bool m_rebuilding = false;
};

}  // namespace zs::ui
