#pragma once
// RunController: runs a training in-process (the Trainer in a worker QThread, one rank) or as
// child processes (`zerostudio launch` through QProcess), or attaches to any run directory, and
// in every case feeds the panels from the run directory alone: events.jsonl and logs/rank<R>.log
// are followed as they grow. Commands (pause, stop, sample now, save now) go through the run's
// control.json, which rank 0 reads between steps and agrees with the other ranks, so they work
// the same for one rank or many and for runs started from a terminal.

#include "train/loss_smoother.h"
#include <memory>
#include <vector>

#include <QObject>
#include <QString>
#include <QStringList>

class QProcess;
class QThread;
class QTimer;

namespace zs::ui {

enum class RunState { idle, starting, running, paused, finished, failed };
QString runStateName(RunState state);

/// One memory figure set of one rank at one metrics event.
struct RankPoint {
  int rank = 0;
  double rss = 0, gpu_allocated = 0, gpu_reserved = 0, gpu_peak = 0;
};

/// One metrics event (values; NaN where the run did not report one).
struct MetricPoint {
  double step = 0, time = 0, loss = 0, smoothed = 0, lr = 0, grad_norm = 0, samples_per_s = 0, s_per_step = 0,
         epoch = 0, loss_scale = 0;
  bool has_loss_scale = false;
  std::vector<RankPoint> ranks;
};

/// One validation event: the held-out loss (and the EMA weights').
struct ValidationPoint {
  double step = 0, val_loss = 0, val_loss_ema = 0;
  bool has_ema = false;
};

/// One image-logger step: samples/step_<N>/ with its images and prompts.
struct SampleStep {
  qint64 step = 0;
  QString dir;
  QStringList images;   ///< 000.png … in order
  QStringList prompts;  ///< one per image (prompts.json)
};

struct LogLine {
  int rank = 0;
  QString text;
  bool error = false;
};

class RunController : public QObject {
  Q_OBJECT

 public:
  explicit RunController(QObject* parent = nullptr);
  /// Stops an in-process run (it saves per its policy) and waits for it.
  ~RunController() override;

  /// The zerostudio executable for multi-process runs (default: this program).
  void setExecutable(const QString& path) { m_executable = path; }
  /// Extra `--set KEY=VALUE` overrides for the next start.
  void setOverrides(const QStringList& overrides) { m_overrides = overrides; }

  /// Trains `configPath` in this process; `runDir` empty: the config's default run folder;
  /// `resume`: "" or a checkpoint folder. False with `error` set when the config is invalid.
  bool startInProcess(const QString& configPath, const QString& runDir = {}, const QString& resume = {},
                      QString* error = nullptr);
  /// Trains with `processes` ranks through `zerostudio launch`.
  bool startProcesses(const QString& configPath, int processes, const QString& runDir = {}, QString* error = nullptr);
  /// Follows an existing run directory (live or finished).
  bool attach(const QString& runDir, QString* error = nullptr);

  void setPaused(bool paused);
  void stop();
  void sampleNow();
  void saveNow();
  void validateNow();

  /// Reads what was appended to the run's files (a timer calls it every 200 ms).
  void poll();

  RunState state() const { return m_state; }
  bool isActive() const { return m_state == RunState::starting || m_state == RunState::running || m_state == RunState::paused; }
  bool ownsRun() const;  ///< started here (in-process or child processes) and still going
  QString runDir() const { return m_runDir; }
  qint64 step() const { return m_step; }
  qint64 maxSteps() const { return m_maxSteps; }
  int worldSize() const { return m_worldSize; }
  QString errorMessage() const { return m_error; }
  /// The newest save_failed event's message while no checkpoint has been saved since ("" then).
  QString saveProblem() const { return m_saveProblem; }
  /// The last events as JSON lines (for the error report).
  QStringList lastEvents() const { return m_lastEvents; }
  /// "step 120/2200 · epoch 1.9 · 0.23 s/it · ETA 8:01"
  QString progressText() const;
  /// Per-rank states ("rank 0: running", …).
  QStringList rankStates() const;

  const std::vector<MetricPoint>& metrics() const { return m_metrics; }
  const std::vector<ValidationPoint>& validation() const { return m_validation; }
  const std::vector<SampleStep>& samples() const { return m_samples; }
  const std::vector<LogLine>& logs() const { return m_logs; }

 signals:
  void runOpened(const QString& runDir);
  void stateChanged(zs::ui::RunState state);
  void metricsAdded(int first);   ///< metrics()[first..] are new
  void validationAdded();         ///< validation() changed
  void samplesAdded();
  void checkpointsChanged();
  void logsAdded(int first);
  void progressChanged();
  void saveProblemChanged(const QString& message);  ///< a save failed ("" once one succeeds again)

 private:
  struct Worker;
  void open(const QString& runDir);
  void reset();
  QString handleEvent(const QString& line);  // returns the event's type
  void setState(RunState state);
  void fail(const QString& message);
  void addSampleStep(qint64 step);

  QString m_executable;
  QStringList m_overrides;
  QString m_runDir;
  RunState m_state = RunState::idle;
  qint64 m_step = 0, m_maxSteps = 0;
  int m_worldSize = 1;
  qint64 m_startStep = 0;  // the step the newest run_start began at
  bool m_metricsReset = false;
  QString m_error;
  QString m_saveProblem;
  QStringList m_lastEvents;
  std::vector<MetricPoint> m_metrics;
  std::vector<ValidationPoint> m_validation;
  train::LossSmoother m_smoother;  // runs written before the events carried loss_smoothed
  std::vector<SampleStep> m_samples;
  bool m_samplesReplaced = false;  // a step was sampled again under its number since the last poll
  std::vector<LogLine> m_logs;
  QTimer* m_timer = nullptr;
  QProcess* m_process = nullptr;
  QString m_processOutput;
  // Shared with the worker thread's function and its finished-handler, so a run started while
  // the previous thread's queued finished signal is still pending (its run_end already read from
  // the events) never frees what that thread or handler still uses.
  std::shared_ptr<Worker> m_worker;
  struct Followers;
  std::unique_ptr<Followers> m_follow;
};

}  // namespace zs::ui
