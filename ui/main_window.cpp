// Engine headers first (LibTorch's before Qt's macros).
#include "config/config_loader.h"
#include "config/config_writer.h"
#include "doctor/system_check.h"

#include "main_window.h"

#include <QApplication>
#include <QCloseEvent>
#include <QDialog>
#include <QDialogButtonBox>
#include <QFileDialog>
#include <QFileInfo>
#include <QLabel>
#include <QMenuBar>
#include <QMessageBox>
#include <QPlainTextEdit>
#include <QSettings>
#include <QStatusBar>
#include <QTabWidget>
#include <QToolBar>
#include <QVBoxLayout>

#include "checkpoint_browser.h"
#include "log_view.h"
#include "metrics_panel.h"
#include "queue_panel.h"
#include "run_controller.h"
#include "sample_gallery.h"
#include "setup_wizard.h"

namespace zs::ui {

MainWindow::MainWindow(QWidget* parent) : QMainWindow(parent) {
  setWindowTitle(QStringLiteral("ZeroStudio"));
  resize(1280, 820);
  m_controller = new RunController(this);

  auto* central = new QWidget(this);
  auto* v = new QVBoxLayout(central);
  v->setContentsMargins(4, 4, 4, 4);
  m_error = new QLabel(central);
  m_error->setObjectName(QStringLiteral("errorBanner"));
  m_error->setWordWrap(true);
  m_error->setTextInteractionFlags(Qt::TextSelectableByMouse);
  m_error->setStyleSheet(QStringLiteral("background:#fdecea; color:#8e1b10; border:1px solid #c0392b; padding:6px;"));
  m_error->hide();
  v->addWidget(m_error);
  m_device = new QLabel(central);
  m_device->setObjectName(QStringLiteral("deviceLine"));
  m_device->setWordWrap(true);
  m_device->hide();
  v->addWidget(m_device);
  m_tabs = new QTabWidget(central);
  m_metrics = new MetricsPanel(m_tabs);
  m_gallery = new SampleGallery(m_tabs);
  m_checkpoints = new CheckpointBrowser(m_tabs);
  m_log = new LogView(m_tabs);
  m_configView = new QPlainTextEdit(m_tabs);
  m_configView->setReadOnly(true);
  m_configView->setPlaceholderText(tr("Open a trainer config (File > Open Config...) or make one (File > New Config...)"));
  QFont mono(QStringLiteral("Monospace"));
  mono.setStyleHint(QFont::TypeWriter);
  m_configView->setFont(mono);
  m_tabs->addTab(m_metrics, tr("Dashboard"));
  m_tabs->addTab(m_gallery, tr("Samples"));
  m_tabs->addTab(m_checkpoints, tr("Checkpoints"));
  m_tabs->addTab(m_log, tr("Log"));
  m_tabs->addTab(m_configView, tr("Config"));
  m_queue = new QueuePanel(QString(), m_tabs);
  m_tabs->addTab(m_queue, tr("Queue"));
  v->addWidget(m_tabs, 1);
  setCentralWidget(central);
  m_metrics->setController(m_controller);
  m_gallery->setController(m_controller);
  m_checkpoints->setController(m_controller);
  m_log->setController(m_controller);

  auto* file = menuBar()->addMenu(tr("&File"));
  QAction* wizard = file->addAction(tr("&New Config..."), QKeySequence::New, this, &MainWindow::newConfig);
  wizard->setObjectName(QStringLiteral("newConfig"));
  file->addAction(tr("&Open Config..."), QKeySequence::Open, this, &MainWindow::chooseConfig);
  file->addAction(tr("Open &Run..."), this, &MainWindow::chooseRun)->setObjectName(QStringLiteral("openRun"));
  m_recent = file->addMenu(tr("Recent Runs"));
  file->addSeparator();
  file->addAction(tr("&Quit"), QKeySequence::Quit, this, &QWidget::close);
  auto* run = menuBar()->addMenu(tr("&Run"));
  m_start = run->addAction(tr("Start"), this, &MainWindow::startRun);
  m_pause = run->addAction(tr("Pause"));
  m_pause->setCheckable(true);
  connect(m_pause, &QAction::toggled, this, [this](bool on) { m_controller->setPaused(on); });
  m_stop = run->addAction(tr("Stop"), m_controller, &RunController::stop);
  m_sample = run->addAction(tr("Sample now"), m_controller, &RunController::sampleNow);
  m_save = run->addAction(tr("Save now"), m_controller, &RunController::saveNow);
  m_validate = run->addAction(tr("Validate now"), m_controller, &RunController::validateNow);
  run->addSeparator();
  m_addToQueue = run->addAction(tr("Add to &Queue"), this, [this] { addToQueue(m_configPath); });
  m_addToQueue->setObjectName(QStringLiteral("addToQueue"));
  m_addToQueue->setToolTip(tr("Add the open config as a job of the queue (the Queue tab)"));
  m_start->setObjectName(QStringLiteral("start"));
  m_pause->setObjectName(QStringLiteral("pause"));
  m_stop->setObjectName(QStringLiteral("stop"));
  m_sample->setObjectName(QStringLiteral("sampleNow"));
  m_save->setObjectName(QStringLiteral("saveNow"));
  m_validate->setObjectName(QStringLiteral("validateNow"));
  m_validate->setToolTip(tr("Evaluate the validation loss now (validation.path or validation.fraction)"));
  auto* tools = addToolBar(tr("Run"));
  tools->setObjectName(QStringLiteral("runToolBar"));
  tools->addAction(wizard);
  tools->addSeparator();
  for (QAction* a : {m_start, m_pause, m_stop, m_sample, m_save}) tools->addAction(a);
  auto* help = menuBar()->addMenu(tr("&Help"));
  help->addAction(tr("&System Check"), this, &MainWindow::showSystemCheck)->setObjectName(QStringLiteral("systemCheck"));
  help->addAction(tr("&About ZeroStudio"), this, &MainWindow::showAbout);

  m_status = new QLabel(tr("No config open"), this);
  statusBar()->addWidget(m_status, 1);
  m_progress = new QLabel(this);
  m_progress->setObjectName(QStringLiteral("progress"));
  statusBar()->addPermanentWidget(m_progress);

  connect(m_controller, &RunController::stateChanged, this, &MainWindow::runStateChanged);
  connect(m_controller, &RunController::progressChanged, this, &MainWindow::updateStatus);
  // A checkpoint that could not be saved: the banner says why and what to do while the run waits
  // (checkpointing.on_save_failure), and goes once a save succeeds.
  connect(m_controller, &RunController::saveProblemChanged, this, [this](const QString& message) {
    if (m_controller->state() == RunState::failed) return;
    if (message.isEmpty()) {
      m_error->hide();
      return;
    }
    m_error->setText(tr("<b>Checkpoint not saved:</b> %1<br><small>Free space on that disk (or delete old checkpoints), "
                        "then use Run &gt; Save now; the run retries by itself too.</small>")
                         .arg(message.toHtmlEscaped()));
    m_error->show();
  });
  connect(m_controller, &RunController::runOpened, this, [this](const QString& dir) {
    addRecentRun(dir);
    setWindowTitle(tr("%1 - ZeroStudio").arg(QFileInfo(dir).fileName()));
    m_error->hide();
    updateStatus();
  });
  connect(m_checkpoints, &CheckpointBrowser::resumeRequested, this, &MainWindow::resumeFrom);
  connect(m_queue, &QueuePanel::openRunRequested, this, [this](const QString& dir) {
    if (openRun(dir)) m_tabs->setCurrentWidget(m_metrics);
  });
  rebuildRecentMenu();
  updateActions();
}

MainWindow::~MainWindow() = default;

bool MainWindow::openConfig(const QString& path) {
  bool valid = false;
  try {
    const auto loaded = config::load_config_file(path.toStdString());
    m_configView->setPlainText(QString::fromStdString(config::to_yaml(loaded.config)));
    m_status->setText(tr("%1: valid").arg(QFileInfo(path).fileName()));
    m_configProcesses = static_cast<int>(loaded.config.launch.num_processes);
    const doctor::DevicePlan plan = doctor::plan_device(loaded.config, m_configProcesses);
    m_device->setText(tr("Device: %1").arg(QString::fromStdString(plan.text())));
    m_device->show();
    m_cpuConsent = plan.needs_consent()
                       ? QString::fromStdString(plan.consent_message(QFileInfo(path).fileName().toStdString(),
                                                                     "answer Yes"))
                       : QString();
    valid = true;
  } catch (const config::ConfigError& e) {
    QString text;
    for (const auto& p : e.problems()) text += QString::fromStdString(p.to_string()) + QLatin1Char('\n');
    m_configView->setPlainText(text);
    m_status->setText(tr("%1: %n problem(s)", nullptr, static_cast<int>(e.problems().size()))
                          .arg(QFileInfo(path).fileName()));
  } catch (const std::exception& e) {
    m_configView->setPlainText(QString::fromStdString(e.what()));
    m_status->setText(tr("%1: cannot be read").arg(QFileInfo(path).fileName()));
  }
  setWindowTitle(tr("%1 - ZeroStudio").arg(QFileInfo(path).fileName()));
  m_configPath = valid ? path : QString();
  if (!m_controller->isActive()) m_tabs->setCurrentWidget(m_configView);
  updateActions();
  emit configOpened(path, valid);
  return valid;
}

bool MainWindow::openRun(const QString& runDir) {
  QString error;
  if (!m_controller->attach(runDir, &error)) {
    m_status->setText(error);
    return false;
  }
  m_tabs->setCurrentWidget(m_metrics);
  m_status->setText(tr("Run %1").arg(QFileInfo(runDir).fileName()));
  updateActions();
  return true;
}

bool MainWindow::startRun() {
  if (m_configPath.isEmpty()) {
    m_status->setText(tr("Open or make a valid config first"));
    return false;
  }
  if (!m_cpuConsent.isEmpty()) {
    const bool anyway = m_askCpu ? m_askCpu(m_cpuConsent)
                                 : QMessageBox::question(this, tr("Train on the CPU?"), m_cpuConsent,
                                                         QMessageBox::Yes | QMessageBox::No, QMessageBox::No) ==
                                       QMessageBox::Yes;
    if (!anyway) {
      m_status->setText(tr("Not started: a full-size model on the CPU"));
      return false;
    }
  }
  QString error;
  const bool ok = m_configProcesses > 1 ? m_controller->startProcesses(m_configPath, m_configProcesses, {}, &error)
                                        : m_controller->startInProcess(m_configPath, {}, {}, &error);
  if (!ok) {
    m_error->setText(tr("Cannot start: %1").arg(error));
    m_error->show();
    return false;
  }
  m_tabs->setCurrentWidget(m_metrics);
  updateActions();
  return true;
}

void MainWindow::resumeFrom(const QString& checkpoint) {
  const QString runDir = QFileInfo(QFileInfo(checkpoint).absolutePath()).absolutePath();
  QString error;
  if (!m_controller->startInProcess(runDir + QStringLiteral("/config.yaml"), runDir, checkpoint, &error)) {
    m_error->setText(tr("Cannot resume: %1").arg(error));
    m_error->show();
  }
  updateActions();
}

SetupWizard* MainWindow::newConfig() {
  auto* wizard = new SetupWizard(this);
  wizard->setAttribute(Qt::WA_DeleteOnClose);
  if (!m_configPath.isEmpty()) wizard->loadConfig(m_configPath);
  connect(wizard, &SetupWizard::configSaved, this, [this](const QString& path) { openConfig(path); });
  connect(wizard, &SetupWizard::queueRequested, this, [this](const QString& path) { addToQueue(path); });
  wizard->show();
  return wizard;
}

qint64 MainWindow::addToQueue(const QString& configPath) {
  QString error;
  const qint64 id = m_queue->addJob(configPath, {}, 0, &error);
  m_tabs->setCurrentWidget(m_queue);
  m_status->setText(id ? tr("Added %1 to the queue as job %2").arg(QFileInfo(configPath).fileName()).arg(id)
                       : tr("Not added to the queue: %1").arg(error.section(QLatin1Char('\n'), 0, 0)));
  return id;
}

QString MainWindow::configText() const { return m_configView->toPlainText(); }
QString MainWindow::statusText() const { return m_status->text(); }
QString MainWindow::progressText() const { return m_progress->text(); }
QString MainWindow::deviceText() const { return m_device->isHidden() ? QString() : m_device->text(); }
QString MainWindow::errorText() const { return m_error->isHidden() ? QString() : m_error->text(); }

void MainWindow::updateActions() {
  const bool owns = m_controller->ownsRun();
  const bool live = m_controller->isActive() && !m_controller->runDir().isEmpty();
  m_start->setEnabled(!owns && !m_configPath.isEmpty());
  m_addToQueue->setEnabled(!m_configPath.isEmpty());
  // Commands go through the run directory, so they also reach runs started from a terminal.
  for (QAction* a : {m_pause, m_stop, m_sample, m_save, m_validate}) a->setEnabled(live);
  const QSignalBlocker block(m_pause);
  m_pause->setChecked(m_controller->state() == RunState::paused);
}

void MainWindow::updateStatus() {
  m_progress->setText(m_controller->progressText() + QStringLiteral("  |  ") + m_controller->rankStates().join(QStringLiteral(", ")));
}

void MainWindow::runStateChanged(RunState state) {
  updateActions();
  updateStatus();
  if (state == RunState::failed) {
    QString text = tr("<b>The run failed:</b> %1").arg(m_controller->errorMessage().toHtmlEscaped());
    const QStringList last = m_controller->lastEvents();
    if (!last.isEmpty())
      text += tr("<br><small>Last events:<br>%1</small>")
                  .arg(last.mid(std::max<int>(0, static_cast<int>(last.size()) - 5)).join(QStringLiteral("\n")).toHtmlEscaped()
                           .replace(QLatin1Char('\n'), QStringLiteral("<br>")));
    m_error->setText(text);
    m_error->show();
  } else if (state == RunState::running || state == RunState::starting) {
    m_error->hide();
  }
}

QStringList MainWindow::recentRuns() const { return QSettings().value(QStringLiteral("recentRuns")).toStringList(); }

void MainWindow::addRecentRun(const QString& dir) {
  QStringList runs = recentRuns();
  runs.removeAll(dir);
  runs.prepend(dir);
  while (runs.size() > 10) runs.removeLast();
  QSettings().setValue(QStringLiteral("recentRuns"), runs);
  rebuildRecentMenu();
}

void MainWindow::rebuildRecentMenu() {
  m_recent->clear();
  for (const QString& dir : recentRuns())
    m_recent->addAction(dir, this, [this, dir] { openRun(dir); });
  m_recent->setEnabled(!m_recent->isEmpty());
  m_gallery->setRecentRuns(recentRuns());  // Samples > Compare runs offers them
}

void MainWindow::chooseConfig() {
  const QString path = QFileDialog::getOpenFileName(this, tr("Open Trainer Config"), QString(),
                                                    tr("Trainer configs (*.yaml *.yml)"));
  if (!path.isEmpty()) openConfig(path);
}

void MainWindow::chooseRun() {
  const QString dir = QFileDialog::getExistingDirectory(this, tr("Open Run Folder"), QStringLiteral("runs"));
  if (!dir.isEmpty()) openRun(dir);
}

void MainWindow::closeEvent(QCloseEvent* event) {
  if (m_controller->ownsRun()) {
    const bool stop = m_askClose ? m_askClose()
                                 : QMessageBox::question(this, tr("Training is running"),
                                                         tr("Stop the run (it saves a checkpoint first) and close?"),
                                                         QMessageBox::Yes | QMessageBox::Cancel) == QMessageBox::Yes;
    if (!stop) {
      event->ignore();
      return;
    }
    m_controller->stop();  // the controller's destructor waits for the save
  }
  event->accept();
}

void MainWindow::showSystemCheck() {
  doctor::CheckOptions o;
  o.config = m_configPath.toStdString();
  QApplication::setOverrideCursor(Qt::WaitCursor);  // about a second: the offload folder's I/O, the ready configs
  const doctor::SystemReport report = doctor::check_system(o);
  QApplication::restoreOverrideCursor();
  QDialog dialog(this);
  dialog.setObjectName(QStringLiteral("systemCheck"));
  dialog.setWindowTitle(tr("System Check"));
  auto* text = new QPlainTextEdit(&dialog);
  text->setReadOnly(true);
  text->setLineWrapMode(QPlainTextEdit::NoWrap);
  text->setFont(m_configView->font());
  text->setPlainText(QString::fromStdString(doctor::to_text(report)));
  auto* buttons = new QDialogButtonBox(QDialogButtonBox::Close, &dialog);
  connect(buttons, &QDialogButtonBox::rejected, &dialog, &QDialog::reject);
  auto* layout = new QVBoxLayout(&dialog);
  layout->addWidget(text);
  layout->addWidget(buttons);
  dialog.resize(900, 600);
  dialog.exec();
}

void MainWindow::showAbout() {
  QMessageBox::about(this, tr("About ZeroStudio"),
                     tr("ZeroStudio %1\nTraining studio for diffusion models with ZeRO sharding "
                        "and CPU/NVMe offload.")
                         .arg(QStringLiteral(ZS_VERSION)));
}

}  // namespace zs::ui
