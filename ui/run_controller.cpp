// Engine headers first (LibTorch's before Qt's macros).
#include "config/config_loader.h"
#include "config/trainability.h"
#include "train/commands.h"
#include "train/control_file.h"
#include "train/event_types.h"
#include "train/file_follower.h"
#include "train/run_directory.h"
#include "train/trainer.h"

#include "run_controller.h"

#include "sample_folder.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <mutex>

#include <QCoreApplication>
#include <QDir>
#include <QFileInfo>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QProcess>
#include <QThread>
#include <QTimer>

namespace zs::ui {

QString runStateName(RunState s) {
  switch (s) {
    case RunState::idle: return QObject::tr("idle");
    case RunState::starting: return QObject::tr("starting");
    case RunState::running: return QObject::tr("running");
    case RunState::paused: return QObject::tr("paused");
    case RunState::finished: return QObject::tr("finished");
    case RunState::failed: return QObject::tr("failed");
  }
  return {};
}

/// The in-process trainer: its thread, the commands it fills from the run's control.json (the
/// one channel for Pause/Stop/Sample/Save, as for runs in other processes), and how it ended.
struct RunController::Worker {
  QThread* thread = nullptr;
  train::TrainerCommands commands;
  std::mutex mutex;
  QString error;
};

struct RunController::Followers {
  std::unique_ptr<train::FileFollower> events;
  std::map<int, std::unique_ptr<train::FileFollower>> logs;  // by rank
};

namespace {

void changeControl(const QString& runDir, const std::function<void(train::ControlState&)>& change) {
  if (runDir.isEmpty()) return;
  train::ControlState s = train::read_control_file(runDir.toStdString());
  change(s);
  try {
    train::write_control_file(runDir.toStdString(), s);
  } catch (const std::exception&) {
    // The run may be gone or read-only (a finished run on a shared disk): nothing to command.
  }
}

namespace event = zs::train::event;

double number(const QJsonObject& o, const char* key) { return o.value(QLatin1String(key)).toDouble(std::nan("")); }

}  // namespace

RunController::RunController(QObject* parent) : QObject(parent), m_follow(std::make_unique<Followers>()) {
  m_executable = QCoreApplication::applicationFilePath();
  m_timer = new QTimer(this);
  m_timer->setInterval(200);
  connect(m_timer, &QTimer::timeout, this, &RunController::poll);
}

RunController::~RunController() {
  const bool inProcess = m_worker && m_worker->thread;
  const bool children = m_process && m_process->state() != QProcess::NotRunning;
  if (inProcess || children)
    changeControl(m_runDir, [](train::ControlState& s) {
      s.stop = true;
      s.pause = false;
    });
  if (inProcess) m_worker->thread->wait();  // it finishes the step and saves per its policy
  if (children && !m_process->waitForFinished(60000)) m_process->kill();
}

bool RunController::ownsRun() const {
  return isActive() && ((m_worker && m_worker->thread && m_worker->thread->isRunning()) ||
                        (m_process && m_process->state() != QProcess::NotRunning));
}

void RunController::reset() {
  m_timer->stop();
  m_follow = std::make_unique<Followers>();
  m_metrics.clear();
  m_validation.clear();
  m_smoother = train::LossSmoother();
  m_samples.clear();
  m_logs.clear();
  m_lastEvents.clear();
  m_error.clear();
  m_saveProblem.clear();
  m_step = m_maxSteps = 0;
  m_worldSize = 1;
  m_startStep = 0;
}

void RunController::open(const QString& runDir) {
  reset();
  m_runDir = QDir(runDir).absolutePath();
  m_follow->events = std::make_unique<train::FileFollower>((m_runDir + QStringLiteral("/events.jsonl")).toStdString());
  emit runOpened(m_runDir);
  emit metricsAdded(0);
  emit samplesAdded();
  emit checkpointsChanged();
  emit logsAdded(0);
  m_timer->start();
}

bool RunController::attach(const QString& runDir, QString* error) {
  if (ownsRun()) {
    if (error) *error = tr("A run is still going; stop it first.");
    return false;
  }
  if (!QFileInfo::exists(runDir + QStringLiteral("/events.jsonl")) && !QFileInfo::exists(runDir + QStringLiteral("/config.yaml"))) {
    if (error) *error = tr("%1 is not a run folder (no events.jsonl)").arg(runDir);
    return false;
  }
  open(runDir);
  setState(RunState::idle);
  poll();
  while (m_follow->events && m_follow->events->more()) poll();
  return true;
}

bool RunController::startInProcess(const QString& configPath, const QString& runDir, const QString& resume,
                                   QString* error) {
  if (ownsRun()) {
    if (error) *error = tr("A run is still going; stop it first.");
    return false;
  }
  config::TrainerConfig cfg;
  std::vector<std::string> sets;
  for (const auto& s : m_overrides) sets.push_back(s.toStdString());
  train::TrainerOptions opts;
  try {
    const config::LoadedConfig loaded = config::load_config_file(configPath.toStdString(), sets);
    cfg = loaded.config;
    opts.name_hint = QFileInfo(configPath).completeBaseName().toStdString();
    opts.resume = resume.toStdString();
    opts.run_dir = train::resolve_run_dir(cfg, {runDir.toStdString(), opts.resume, opts.name_hint}).path;
    // A model or images not in place are refused here, before the run folder exists (the
    // trainer checks again on its thread, as `train` does).
    config::require_trainable(loaded, opts.run_dir);
  } catch (const config::ConfigError& e) {
    if (error) {
      QStringList lines;
      for (const auto& p : e.problems()) lines << QString::fromStdString(p.to_string());
      *error = lines.join(QLatin1Char('\n'));
    }
    return false;
  } catch (const std::exception& e) {
    if (error) *error = QString::fromUtf8(e.what());
    return false;
  }
  QDir().mkpath(QString::fromStdString(opts.run_dir));
  // Commands reach the trainer through control.json alone: start it clean here, before the
  // thread, so a Pause or Stop made while the model loads is kept.
  try {
    train::reset_control_file(opts.run_dir);
  } catch (const std::exception& e) {
    if (error) *error = QString::fromUtf8(e.what());
    return false;
  }
  opts.reset_control = false;
  open(QString::fromStdString(opts.run_dir));
  setState(RunState::starting);
  auto w = std::make_shared<Worker>();
  m_worker = w;
  w->thread = QThread::create([w, cfg = std::move(cfg), opts = std::move(opts)]() mutable {
    try {
      train::Trainer trainer(std::move(cfg), std::move(opts));
      trainer.run(w->commands);
    } catch (const std::exception& e) {
      // The trainer wrote an error event when it got that far; keep the message either way.
      std::lock_guard<std::mutex> lock(w->mutex);
      w->error = QString::fromUtf8(e.what());
    }
  });
  connect(w->thread, &QThread::finished, this, [this, w] {
    w->thread->deleteLater();
    w->thread = nullptr;
    if (m_worker != w) return;  // a newer run owns the controller: this one's end is not its news
    poll();
    QString message;
    {
      std::lock_guard<std::mutex> lock(w->mutex);
      message = w->error;
    }
    if (isActive()) {
      if (!message.isEmpty()) fail(message);
      else setState(RunState::finished);
    }
  });
  w->thread->start();
  return true;
}

bool RunController::startProcesses(const QString& configPath, int processes, const QString& runDir, QString* error) {
  if (ownsRun()) {
    if (error) *error = tr("A run is still going; stop it first.");
    return false;
  }
  QString dir = runDir;
  std::vector<std::string> sets;
  for (const auto& s : m_overrides) sets.push_back(s.toStdString());
  try {
    const auto cfg = config::load_config_file(configPath.toStdString(), sets).config;
    dir = QString::fromStdString(
        train::resolve_run_dir(cfg, {dir.toStdString(), "", QFileInfo(configPath).completeBaseName().toStdString()}).path);
  } catch (const config::ConfigError& e) {
    if (error) {
      QStringList lines;
      for (const auto& p : e.problems()) lines << QString::fromStdString(p.to_string());
      *error = lines.join(QLatin1Char('\n'));
    }
    return false;
  }
  QDir().mkpath(dir);
  open(dir);
  setState(RunState::starting);
  delete m_process;
  m_process = new QProcess(this);
  m_process->setProcessChannelMode(QProcess::MergedChannels);
  m_processOutput.clear();
  connect(m_process, &QProcess::readyRead, this, [this] {
    m_processOutput += QString::fromUtf8(m_process->readAll());
    if (m_processOutput.size() > 20000) m_processOutput = m_processOutput.right(20000);
  });
  connect(m_process, &QProcess::finished, this, [this](int code, QProcess::ExitStatus status) {
    poll();
    if (!isActive()) return;
    if (code == 0 && status == QProcess::NormalExit) setState(RunState::finished);
    else fail(tr("zerostudio launch ended with exit code %1:\n%2").arg(code).arg(m_processOutput.right(2000)));
  });
  QStringList args{QStringLiteral("launch"), QStringLiteral("--num_processes"), QString::number(processes), configPath,
                   QStringLiteral("--run-dir"), m_runDir};
  for (const auto& s : m_overrides) args << QStringLiteral("--set") << s;
  args << QStringLiteral("--allow-cpu");  // a full-size model on the CPU: the window asked before it came here
  m_process->start(m_executable, args);
  if (!m_process->waitForStarted(10000)) {
    fail(tr("cannot start %1: %2").arg(m_executable, m_process->errorString()));
    if (error) *error = m_error;
    return false;
  }
  return true;
}

void RunController::setPaused(bool paused) {
  changeControl(m_runDir, [paused](train::ControlState& s) { s.pause = paused; });
}

void RunController::stop() {
  changeControl(m_runDir, [](train::ControlState& s) {
    s.stop = true;
    s.pause = false;
  });
}

void RunController::sampleNow() { changeControl(m_runDir, [](train::ControlState& s) { ++s.sample; }); }
void RunController::saveNow() { changeControl(m_runDir, [](train::ControlState& s) { ++s.save; }); }
void RunController::validateNow() { changeControl(m_runDir, [](train::ControlState& s) { ++s.validate; }); }

void RunController::setState(RunState state) {
  if (state == m_state) return;
  m_state = state;
  emit stateChanged(state);
}

void RunController::fail(const QString& message) {
  if (m_error.isEmpty()) m_error = message;
  setState(RunState::failed);
}

void RunController::poll() {
  if (!m_follow->events) return;
  const int firstMetric = static_cast<int>(m_metrics.size());
  const std::size_t samplesBefore = m_samples.size();
  bool checkpoints = false;
  if (m_follow->events->take_restarted()) {
    const QString dir = m_runDir;
    open(dir);
    return;
  }
  for (const auto& raw : m_follow->events->read_lines()) {
    const QString line = QString::fromStdString(raw);
    m_lastEvents << line;
    if (m_lastEvents.size() > 20) m_lastEvents.removeFirst();
    if (handleEvent(line) == QLatin1String(event::checkpoint)) checkpoints = true;
  }
  // Rank logs: logs/rank<R>.log, found as they appear.
  const int firstLog = static_cast<int>(m_logs.size());
  const QDir logs(m_runDir + QStringLiteral("/logs"));
  for (const QString& name : logs.entryList({QStringLiteral("rank*.log")}, QDir::Files)) {
    const int rank = name.mid(4, name.size() - 8).toInt();
    auto& f = m_follow->logs[rank];
    if (!f) f = std::make_unique<train::FileFollower>(logs.filePath(name).toStdString());
    for (const auto& raw : f->read_lines()) {
      const QString text = QString::fromStdString(raw);
      m_logs.push_back({rank, text, text.contains(QLatin1String("] error:")) || text.startsWith(QLatin1String("error"))});
    }
  }
  if (m_metricsReset) {
    m_metricsReset = false;
    emit metricsAdded(0);  // redraw from the start
  } else if (static_cast<int>(m_metrics.size()) > firstMetric) {
    emit metricsAdded(firstMetric);
  }
  if (m_samples.size() != samplesBefore || m_samplesReplaced) emit samplesAdded();
  m_samplesReplaced = false;
  if (checkpoints) emit checkpointsChanged();
  if (static_cast<int>(m_logs.size()) > firstLog) emit logsAdded(firstLog);
}

void RunController::addSampleStep(qint64 step) {
  const SampleStep s = readSampleStep(m_runDir + QStringLiteral("/samples/step_") + QString::number(step), step);
  for (auto& existing : m_samples)
    if (existing.step == step) {  // sampled again (a run resumed from before this step)
      existing = s;
      m_samplesReplaced = true;
      return;
    }
  m_samples.push_back(s);
}

QString RunController::handleEvent(const QString& line) {
  const QJsonObject e = QJsonDocument::fromJson(line.toUtf8()).object();
  const QString type = e.value(QLatin1String(event::type)).toString();
  const qint64 step = static_cast<qint64>(e.value(QLatin1String(event::step)).toDouble());
  if (type == QLatin1String(event::run_start)) {
    // A resumed run continues from its checkpoint's step: what was logged after that step
    // belongs to the abandoned part and is dropped from the charts (the file keeps it).
    const auto later = std::find_if(m_metrics.begin(), m_metrics.end(),
                                    [step](const MetricPoint& p) { return p.step > static_cast<double>(step); });
    if (later != m_metrics.end()) {
      m_metrics.erase(later, m_metrics.end());
      m_smoother = train::LossSmoother();
      for (const auto& p : m_metrics) m_smoother.add(p.loss);
      m_metricsReset = true;
    }
    std::erase_if(m_validation, [step](const ValidationPoint& v) { return v.step > static_cast<double>(step); });
    m_maxSteps = static_cast<qint64>(e.value(QLatin1String(event::max_steps)).toDouble());
    m_startStep = step;
    m_worldSize = e.value(QLatin1String(event::world_size)).toInt(1);
    m_step = step;
    m_error.clear();
    if (m_state == RunState::starting || m_state == RunState::idle || m_state == RunState::finished)
      setState(RunState::running);
  } else if (type == QLatin1String(event::metrics)) {
    MetricPoint p;
    p.step = static_cast<double>(step);
    p.time = number(e, event::time);
    p.loss = number(e, event::loss);
    // The trainer's smoothed loss (train::LossSmoother over every step); older runs: the same
    // smoothing over the metrics events.
    const double fallback = m_smoother.add(p.loss);
    p.smoothed = e.contains(QLatin1String(event::loss_smoothed)) ? number(e, event::loss_smoothed) : fallback;
    p.lr = number(e, event::lr);
    p.grad_norm = number(e, event::grad_norm);
    p.samples_per_s = number(e, event::samples_per_s);
    p.s_per_step = number(e, event::s_per_step);
    p.epoch = number(e, event::epoch);
    p.has_loss_scale = e.contains(QLatin1String(event::loss_scale));
    p.loss_scale = p.has_loss_scale ? number(e, event::loss_scale) : 0;
    for (const auto& r : e.value(QLatin1String(event::ranks)).toArray()) {
      const QJsonObject o = r.toObject();
      p.ranks.push_back({o.value(QLatin1String(event::rank)).toInt(), number(o, event::rss_bytes), number(o, event::gpu_allocated_bytes),
                         number(o, event::gpu_reserved_bytes), number(o, event::gpu_peak_bytes)});
    }
    m_metrics.push_back(std::move(p));
    m_step = step;
    emit progressChanged();
  } else if (type == QLatin1String(event::validation)) {
    ValidationPoint v;
    v.step = static_cast<double>(step);
    v.val_loss = number(e, event::val_loss);
    v.has_ema = e.contains(QLatin1String(event::val_loss_ema));
    v.val_loss_ema = v.has_ema ? number(e, event::val_loss_ema) : 0;
    m_validation.push_back(v);
    emit validationAdded();
  } else if (type == QLatin1String(event::samples)) {
    addSampleStep(step);
  } else if (type == QLatin1String(event::paused)) {
    setState(RunState::paused);
  } else if (type == QLatin1String(event::resumed)) {
    setState(RunState::running);
  } else if (type == QLatin1String(event::error)) {
    m_error = e.value(QLatin1String(event::message)).toString();
  } else if (type == QLatin1String(event::save_failed) || (type == QLatin1String(event::checkpoint) && !m_saveProblem.isEmpty())) {
    m_saveProblem = type == QLatin1String(event::checkpoint) ? QString() : e.value(QLatin1String(event::message)).toString();
    emit saveProblemChanged(m_saveProblem);
  } else if (type == QLatin1String(event::run_end)) {
    m_step = step;
    const QString reason = e.value(QLatin1String(event::reason)).toString();
    if (reason == QLatin1String(event::reason_error) || reason == QLatin1String(event::reason_save_failed)) fail(m_error.isEmpty() ? m_saveProblem : m_error);
    else setState(RunState::finished);
    emit progressChanged();
  }
  if (m_state == RunState::starting && type != QLatin1String(event::log) && !m_metrics.empty()) setState(RunState::running);
  return type;
}

QString RunController::progressText() const {
  if (m_maxSteps <= 0) return runStateName(m_state);
  QString text = tr("step %1/%2").arg(m_step).arg(m_maxSteps);
  if (!m_metrics.empty()) {
    const auto& last = m_metrics.back();
    text += tr(" · epoch %1 · %2 s/it").arg(last.epoch, 0, 'f', 2).arg(last.s_per_step, 0, 'f', 3);
    // Wall time per step over the metrics since the run (re)started: sampling, validation and
    // saving between them count too; with one point, its s/it.
    const auto first = std::find_if(m_metrics.begin(), m_metrics.end(),
                                    [this](const MetricPoint& p) { return p.step > static_cast<double>(m_startStep); });
    double per_step = last.s_per_step;
    if (first != m_metrics.end() && last.step > first->step && last.time > first->time)
      per_step = (last.time - first->time) / (last.step - first->step);
    if (isActive() && per_step > 0) {
      const qint64 secs = static_cast<qint64>(static_cast<double>(m_maxSteps - m_step) * per_step);
      text += tr(" · ETA %1:%2").arg(secs / 60).arg(secs % 60, 2, 10, QLatin1Char('0'));
    }
  }
  return text;
}

QStringList RunController::rankStates() const {
  QStringList out;
  const QString state = runStateName(m_state);
  for (int r = 0; r < m_worldSize; ++r) {
    QString s = state;
    if (m_state == RunState::failed && m_error.contains(QStringLiteral("rank %1").arg(r))) s = tr("failed (named in the error)");
    out << tr("rank %1: %2").arg(r).arg(s);
  }
  return out;
}

}  // namespace zs::ui
