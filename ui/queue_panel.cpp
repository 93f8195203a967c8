#include "queue_panel.h"

#include <QCheckBox>
#include <QCoreApplication>
#include <QDateTime>
#include <QDialog>
#include <QDialogButtonBox>
#include <QFileDialog>
#include <QFile>
#include <QFileInfo>
#include <QFileSystemWatcher>
#include <QFontDatabase>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QPlainTextEdit>
#include <QProcess>
#include <QPushButton>
#include <QSettings>
#include <QTextCursor>
#include <QTimer>
#include <QTreeWidget>
#include <QVBoxLayout>

#include "config/problem.h"
#include "core/error.h"
#include "io/atomic_file.h"
#include "train/job_queue.h"

namespace zs::ui {

namespace {

enum Column { colId, colName, colState, colRanks, colStarted, colNote, colCount };

QString qs(const std::string& s) { return QString::fromStdString(s); }

QString stateOf(const train::JobQueue& q, const train::QueueJob& j) {
  QString s = qs(q.shown_state(j));
  if (j.state == train::JobState::failed) s += QStringLiteral(" (%1)").arg(j.exit_code);
  if (j.state == train::JobState::running && j.stop_requested) s += QObject::tr(", stopping");
  return s;
}

QString noteOf(const train::QueueJob& j) {
  QStringList n;
  if (j.state == train::JobState::failed && !j.last_error.empty()) n << qs(j.last_error);
  if (!j.fit_note.empty()) n << QObject::tr("may not fit: %1").arg(qs(j.fit_note));
  if (j.starts > 1) n << QObject::tr("started %1 times").arg(j.starts);
  return n.join(QStringLiteral("; "));
}

QColor colourOf(const QString& state) {
  if (state.startsWith(QLatin1String("running"))) return QColor(0x1f, 0x77, 0xb4);
  if (state.startsWith(QLatin1String("finished"))) return QColor(0x2c, 0xa0, 0x2c);
  if (state.startsWith(QLatin1String("failed")) || state.startsWith(QLatin1String("interrupted"))) return QColor(0xc0, 0x39, 0x2b);
  return QColor();
}

}  // namespace

QueuePanel::QueuePanel(const QString& queueDir, QWidget* parent)
    : QWidget(parent),
      m_queue(std::make_unique<train::JobQueue>(queueDir.isEmpty() ? train::JobQueue::default_queue_dir() : queueDir.toStdString())) {
  auto* v = new QVBoxLayout(this);
  auto* bar = new QHBoxLayout;
  auto button = [&](const QString& text, const char* name, const QString& tip) {
    auto* b = new QPushButton(text, this);
    b->setObjectName(QLatin1String(name));
    b->setToolTip(tip);
    bar->addWidget(b);
    return b;
  };
  m_add = button(tr("Add..."), "queueAdd", tr("Add a trainer config as a job (Run > Add to Queue adds the open one)"));
  m_edit = button(tr("Edit config..."), "queueEdit", tr("Change a waiting job's config"));
  m_stop = button(tr("Stop"), "queueStop", tr("A running job saves a checkpoint and stops; a waiting one is skipped"));
  m_retry = button(tr("Retry"), "queueRetry", tr("Put a stopped, failed or finished job back; it resumes from its newest checkpoint"));
  m_remove = button(tr("Remove"), "queueRemove", tr("Remove a job that is not running (its run folder stays)"));
  m_open = button(tr("Open run"), "queueOpen", tr("Watch the job's run in the dashboard"));
  bar->addStretch(1);
  m_pause = button(tr("Pause queue"), "queuePause", tr("Start no new job; the running one goes on"));
  m_pause->setCheckable(true);
  m_stopOnFailure = new QCheckBox(tr("Stop on failure"), this);
  m_stopOnFailure->setObjectName(QStringLiteral("queueStopOnFailure"));
  m_stopOnFailure->setChecked(QSettings().value(QStringLiteral("queue/stopOnFailure"), false).toBool());
  bar->addWidget(m_stopOnFailure);
  m_run = button(tr("Run queue"), "queueRun",
                 tr("Start `zerostudio queue run`: it works through the waiting jobs, also after this window closes"));
  m_log = button(tr("Runner log"), "queueRunnerLog", tr("What the runners started here printed (each job's own output: its run's logs/job.log)"));
  v->addLayout(bar);

  m_list = new QTreeWidget(this);
  m_list->setObjectName(QStringLiteral("queueList"));
  m_list->setColumnCount(colCount);
  m_list->setHeaderLabels({tr("#"), tr("Job"), tr("State"), tr("Ranks"), tr("Started"), tr("Note")});
  m_list->setRootIsDecorated(false);
  m_list->setUniformRowHeights(true);
  m_list->setSelectionMode(QAbstractItemView::SingleSelection);
  m_list->setDragDropMode(QAbstractItemView::InternalMove);
  m_list->setDragEnabled(true);
  m_list->setAcceptDrops(true);
  m_list->setDropIndicatorShown(true);
  m_list->header()->setStretchLastSection(true);
  m_list->invisibleRootItem()->setFlags(m_list->invisibleRootItem()->flags() | Qt::ItemIsDropEnabled);
  v->addWidget(m_list, 1);
  m_message = new QLabel(this);
  m_message->setObjectName(QStringLiteral("queueMessage"));
  m_message->setWordWrap(true);
  m_message->setStyleSheet(QStringLiteral("color: #c0392b;"));
  m_message->hide();
  v->addWidget(m_message);
  m_status = new QLabel(this);
  m_status->setObjectName(QStringLiteral("queueStatus"));
  v->addWidget(m_status);

  connect(m_add, &QPushButton::clicked, this, &QueuePanel::chooseAndAdd);
  connect(m_edit, &QPushButton::clicked, this, &QueuePanel::editSelected);
  connect(m_stop, &QPushButton::clicked, this, [this] { stopJob(selectedId()); });
  connect(m_retry, &QPushButton::clicked, this, [this] { retryJob(selectedId()); });
  connect(m_remove, &QPushButton::clicked, this, [this] { removeJob(selectedId()); });
  connect(m_open, &QPushButton::clicked, this, [this] {
    if (auto* item = m_list->currentItem()) emit openRunRequested(item->data(colName, Qt::UserRole).toString());
  });
  connect(m_list, &QTreeWidget::itemDoubleClicked, this,
          [this](QTreeWidgetItem* item) { emit openRunRequested(item->data(colName, Qt::UserRole).toString()); });
  connect(m_list, &QTreeWidget::itemSelectionChanged, this, &QueuePanel::updateButtons);
  connect(m_pause, &QPushButton::clicked, this, [this](bool on) { setPaused(on); });
  connect(m_run, &QPushButton::clicked, this, [this] { startRunner(); });
  connect(m_log, &QPushButton::clicked, this, [this] {
    QDialog dialog(this);
    dialog.setWindowTitle(tr("Queue runner log"));
    dialog.resize(820, 480);
    auto* v = new QVBoxLayout(&dialog);
    auto* text = new QPlainTextEdit(&dialog);
    text->setReadOnly(true);
    text->setFont(QFontDatabase::systemFont(QFontDatabase::FixedFont));
    const QString log = runnerLog();
    text->setPlainText(log.isEmpty() ? tr("(no runner was started from this window yet)") : log);
    text->moveCursor(QTextCursor::End);
    v->addWidget(text);
    auto* close = new QDialogButtonBox(QDialogButtonBox::Close, &dialog);
    connect(close, &QDialogButtonBox::rejected, &dialog, &QDialog::reject);
    v->addWidget(close);
    dialog.exec();
  });
  connect(m_stopOnFailure, &QCheckBox::toggled, this,
          [](bool on) { QSettings().setValue(QStringLiteral("queue/stopOnFailure"), on); });
  // A drag moves rows (removed, then inserted); the new order is written once the drop is done.
  connect(m_list->model(), &QAbstractItemModel::rowsInserted, this, [this] {
    if (!m_rebuilding) QTimer::singleShot(0, this, &QueuePanel::commitDraggedOrder);
  });

  m_timer = new QTimer(this);
  m_timer->setInterval(1000);
  connect(m_timer, &QTimer::timeout, this, &QueuePanel::refresh);
  m_timer->start();
  m_watcher = new QFileSystemWatcher(this);
  const QString dir = qs(m_queue->dir());
  if (QFileInfo(dir).isDir()) m_watcher->addPath(dir);  // renames into place change the folder
  connect(m_watcher, &QFileSystemWatcher::directoryChanged, this, &QueuePanel::refresh);
  refresh();
}

QueuePanel::~QueuePanel() = default;

bool QueuePanel::guarded(const std::function<void()>& action, QString* error) {
  QString message;
  try {
    action();
  } catch (const config::ConfigError& e) {
    QStringList lines;
    for (const auto& p : e.problems()) lines << qs(p.to_string());
    message = lines.join(QLatin1Char('\n'));
  } catch (const std::exception& e) {
    message = QString::fromUtf8(e.what());
  }
  if (error) *error = message;
  report(message);
  refresh();
  return message.isEmpty();
}

void QueuePanel::report(const QString& error) {
  m_message->setText(error);
  m_message->setVisible(!error.isEmpty());
}

qint64 QueuePanel::addJob(const QString& configFile, const QStringList& overrides, int processes, QString* error,
                          qint64 gpuMemory) {
  qint64 id = 0;
  guarded(
      [&] {
        train::JobRequest r;
        r.config_file = configFile.toStdString();
        for (const QString& o : overrides) r.overrides.push_back(o.toStdString());
        r.num_processes = processes;
        r.gpu_memory = gpuMemory;
        id = m_queue->add(r).id;
      },
      error);
  if (!m_watcher->directories().contains(qs(m_queue->dir()))) m_watcher->addPath(qs(m_queue->dir()));
  return id;
}

bool QueuePanel::removeJob(qint64 id, QString* error) { return guarded([&] { m_queue->remove(id); }, error); }
bool QueuePanel::stopJob(qint64 id, QString* error) { return guarded([&] { m_queue->request_stop(id); }, error); }
bool QueuePanel::retryJob(qint64 id, QString* error) { return guarded([&] { m_queue->requeue(id); }, error); }
bool QueuePanel::setPaused(bool paused, QString* error) { return guarded([&] { m_queue->set_paused(paused); }, error); }

bool QueuePanel::reorder(const QList<qint64>& ids, QString* error) {
  return guarded([&] { m_queue->reorder(std::vector<std::int64_t>(ids.begin(), ids.end())); }, error);
}

bool QueuePanel::replaceConfig(qint64 id, const QString& yaml, QString* error) {
  return guarded([&] { m_queue->replace_config(id, yaml.toStdString()); }, error);
}

QString QueuePanel::runnerLog() const {
  QFile f(qs(m_queue->dir()) + QStringLiteral("/queue-runner.log"));
  if (!f.open(QIODevice::ReadOnly)) return QString();
  if (f.size() > 65536) f.seek(f.size() - 65536);
  return QString::fromUtf8(f.readAll());
}

QString QueuePanel::configText(qint64 id) const {
  try {
    const train::QueueState st = m_queue->read();
    if (const auto* j = st.find(id)) return qs(io::read_file(j->config));
  } catch (const std::exception&) {
  }
  return QString();
}

bool QueuePanel::startRunner(QString* error) {
  if (m_queue->runner_active()) {
    const QString m = tr("A queue runner is already at work on this queue.");
    if (error) *error = m;
    report(m);
    return false;
  }
  const QString program = m_runnerProgram.isEmpty() ? QCoreApplication::applicationFilePath() : m_runnerProgram;
  QStringList args{QStringLiteral("queue"), QStringLiteral("run")};
  if (m_stopOnFailure->isChecked()) args << QStringLiteral("--stop-on-failure");
  QProcess p;
  p.setProgram(program);
  p.setArguments(args);
  p.setStandardOutputFile(QString::fromStdString(m_queue->dir()) + QStringLiteral("/queue-runner.log"), QIODevice::Append);
  p.setStandardErrorFile(QString::fromStdString(m_queue->dir()) + QStringLiteral("/queue-runner.log"), QIODevice::Append);
  if (!p.startDetached()) {
    const QString m = tr("Could not start %1 queue run.").arg(program);
    if (error) *error = m;
    report(m);
    return false;
  }
  report(QString());
  return true;
}

void QueuePanel::refresh() {
  train::QueueState st;
  try {
    st = m_queue->read();
  } catch (const std::exception& e) {
    report(QString::fromUtf8(e.what()));
    return;
  }
  m_runnerActive = m_queue->runner_active();
  std::vector<QStringList> rows;
  QString digest;
  for (const auto& j : st.jobs) {
    const QString started = j.started_at > 0 ? QDateTime::fromSecsSinceEpoch(j.started_at).toString(QStringLiteral("MM-dd HH:mm")) : QString();
    rows.push_back({QString::number(j.id), qs(j.name), stateOf(*m_queue, j), QString::number(j.num_processes), started, noteOf(j)});
    digest += rows.back().join(QLatin1Char('|')) + QLatin1Char('|') + qs(j.run_dir) + QLatin1Char('\n');
  }
  int waiting = 0;
  for (const auto& j : st.jobs) waiting += j.state == train::JobState::waiting;
  m_status->setText(tr("%n waiting", nullptr, waiting) + QStringLiteral(" · ") +
                    (m_runnerActive ? tr("a runner is working through the queue") : tr("no runner (Run queue starts one)")) +
                    (st.paused ? tr(" · paused") : QString()) + QStringLiteral(" · ") + qs(m_queue->file()));
  {
    const QSignalBlocker block(m_pause);
    m_pause->setChecked(st.paused);
  }
  if (digest != m_shown) {
    const qint64 selected = selectedId();
    m_rebuilding = true;
    m_list->clear();
    for (std::size_t i = 0; i < rows.size(); ++i) {
      auto* item = new QTreeWidgetItem(m_list, rows[i]);
      item->setData(colId, Qt::UserRole, QVariant::fromValue<qint64>(st.jobs[i].id));
      item->setData(colName, Qt::UserRole, qs(st.jobs[i].run_dir));
      item->setToolTip(colName, tr("Config: %1\nRun folder: %2").arg(qs(st.jobs[i].source), qs(st.jobs[i].run_dir)));
      item->setToolTip(colNote, rows[i][colNote]);
      item->setFlags((item->flags() | Qt::ItemIsDragEnabled) & ~Qt::ItemIsDropEnabled);
      if (const QColor c = colourOf(rows[i][colState]); c.isValid()) item->setForeground(colState, c);
      if (st.jobs[i].id == selected) m_list->setCurrentItem(item);
    }
    for (int c = 0; c < colNote; ++c) m_list->resizeColumnToContents(c);
    m_rebuilding = false;
    m_shown = digest;
    m_order = jobIds();
    emit queueChanged();
  }
  updateButtons();
}

void QueuePanel::commitDraggedOrder() {
  QList<qint64> ids;
  for (int i = 0; i < m_list->topLevelItemCount(); ++i) ids << m_list->topLevelItem(i)->data(colId, Qt::UserRole).toLongLong();
  if (ids == m_order || ids.size() != m_order.size()) return;  // nothing moved
  m_shown.clear();
  reorder(ids);
}

QList<qint64> QueuePanel::jobIds() const {
  QList<qint64> ids;
  for (int i = 0; i < m_list->topLevelItemCount(); ++i) ids << m_list->topLevelItem(i)->data(colId, Qt::UserRole).toLongLong();
  return ids;
}

QString QueuePanel::stateText(qint64 id) const {
  for (int i = 0; i < m_list->topLevelItemCount(); ++i)
    if (m_list->topLevelItem(i)->data(colId, Qt::UserRole).toLongLong() == id) return m_list->topLevelItem(i)->text(colState);
  return QString();
}

QString QueuePanel::rowText(qint64 id) const {
  for (int i = 0; i < m_list->topLevelItemCount(); ++i) {
    const auto* item = m_list->topLevelItem(i);
    if (item->data(colId, Qt::UserRole).toLongLong() != id) continue;
    QStringList cols;
    for (int c = 0; c < colCount; ++c) cols << item->text(c);
    return cols.join(QStringLiteral(" | "));
  }
  return QString();
}

QString QueuePanel::statusText() const { return m_status->text(); }

qint64 QueuePanel::selectedId() const {
  const auto* item = m_list->currentItem();
  return item ? item->data(colId, Qt::UserRole).toLongLong() : 0;
}

void QueuePanel::updateButtons() {
  const QString state = selectedId() ? stateText(selectedId()) : QString();
  const bool running = state.startsWith(QLatin1String("running"));
  m_edit->setEnabled(state == QLatin1String("waiting"));
  m_stop->setEnabled(running || state == QLatin1String("waiting") || state.startsWith(QLatin1String("interrupted")));
  m_retry->setEnabled(!state.isEmpty() && !running && state != QLatin1String("waiting"));
  m_remove->setEnabled(!state.isEmpty() && !running);
  m_open->setEnabled(!state.isEmpty());
  m_run->setEnabled(!m_runnerActive);
}

void QueuePanel::chooseAndAdd() {
  const QString file = QFileDialog::getOpenFileName(this, tr("Add a trainer config to the queue"), QString(),
                                                    tr("Trainer configs (*.yaml *.yml)"));
  if (!file.isEmpty()) addJob(file);
}

void QueuePanel::editSelected() {
  const qint64 id = selectedId();
  if (!id) return;
  QDialog dialog(this);
  dialog.setWindowTitle(tr("Job %1 config").arg(id));
  dialog.resize(720, 640);
  auto* v = new QVBoxLayout(&dialog);
  auto* edit = new QPlainTextEdit(&dialog);
  edit->setFont(QFontDatabase::systemFont(QFontDatabase::FixedFont));
  edit->setPlainText(configText(id));
  v->addWidget(edit, 1);
  auto* problems = new QLabel(&dialog);
  problems->setWordWrap(true);
  problems->setStyleSheet(QStringLiteral("color: #c0392b;"));
  v->addWidget(problems);
  auto* buttons = new QDialogButtonBox(QDialogButtonBox::Save | QDialogButtonBox::Cancel, &dialog);
  v->addWidget(buttons);
  connect(buttons, &QDialogButtonBox::rejected, &dialog, &QDialog::reject);
  connect(buttons, &QDialogButtonBox::accepted, &dialog, [&] {
    QString error;
    if (replaceConfig(id, edit->toPlainText(), &error)) dialog.accept();
    else problems->setText(error);  // the dialog stays open with the problems
  });
  dialog.exec();
}

}  // namespace zs::ui
