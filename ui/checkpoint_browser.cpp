// Engine headers first (LibTorch's before Qt's macros).
#include "checkpoint/checkpoint.h"
#include "train/checkpoint_export.h"

#include "checkpoint_browser.h"

#include <atomic>
#include <cmath>

#include <QCheckBox>
#include <QComboBox>
#include <QDateTime>
#include <QDesktopServices>
#include <QDialog>
#include <QDialogButtonBox>
#include <QDir>
#include <QEventLoop>
#include <QFileDialog>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLineEdit>
#include <QMessageBox>
#include <QPixmap>
#include <QProgressDialog>
#include <QPushButton>
#include <QTableWidget>
#include <QThread>
#include <QUrl>
#include <QVBoxLayout>

#include "run_controller.h"

namespace zs::ui {

CheckpointBrowser::CheckpointBrowser(QWidget* parent) : QWidget(parent) {
  auto* outer = new QVBoxLayout(this);
  m_table = new QTableWidget(0, 6, this);
  m_table->setObjectName(QStringLiteral("checkpointTable"));
  m_table->setHorizontalHeaderLabels({tr("Samples"), tr("Step"), tr("Time"), tr("Loss"), tr("Size"), tr("Stage / ranks")});
  m_table->setSelectionBehavior(QAbstractItemView::SelectRows);
  m_table->setSelectionMode(QAbstractItemView::SingleSelection);
  m_table->setEditTriggers(QAbstractItemView::NoEditTriggers);
  m_table->verticalHeader()->setDefaultSectionSize(68);
  m_table->horizontalHeader()->setStretchLastSection(true);
  m_table->setIconSize(QSize(64, 64));
  outer->addWidget(m_table, 1);
  auto* buttons = new QHBoxLayout;
  auto add = [&](const QString& text, const char* name) {
    auto* b = new QPushButton(text, this);
    b->setObjectName(QLatin1String(name));
    buttons->addWidget(b);
    return b;
  };
  connect(add(tr("Resume from"), "resume"), &QPushButton::clicked, this, [this] {
    if (const int r = selectedRow(); r >= 0) emit resumeRequested(m_paths[r]);
  });
  connect(add(tr("Export..."), "export"), &QPushButton::clicked, this, &CheckpointBrowser::exportSelected);
  connect(add(tr("Verify"), "verify"), &QPushButton::clicked, this, [this] {
    if (const int r = selectedRow(); r >= 0) verify(r);
  });
  connect(add(tr("Delete"), "delete"), &QPushButton::clicked, this, [this] {
    if (const int r = selectedRow(); r >= 0) remove(r);
  });
  connect(add(tr("Open folder"), "openFolder"), &QPushButton::clicked, this, [this] {
    if (const int r = selectedRow(); r >= 0) QDesktopServices::openUrl(QUrl::fromLocalFile(m_paths[r]));
  });
  buttons->addStretch(1);
  outer->addLayout(buttons);
}

void CheckpointBrowser::setController(RunController* controller) {
  m_controller = controller;
  connect(controller, &RunController::checkpointsChanged, this, &CheckpointBrowser::refresh);
  connect(controller, &RunController::samplesAdded, this, &CheckpointBrowser::refresh);
}

int CheckpointBrowser::selectedRow() const {
  const auto rows = m_table->selectionModel()->selectedRows();
  return rows.isEmpty() ? (m_table->rowCount() > 0 ? m_table->currentRow() : -1) : rows.first().row();
}

int CheckpointBrowser::rowCount() const { return m_table->rowCount(); }
QString CheckpointBrowser::checkpointPath(int row) const { return row >= 0 && row < m_paths.size() ? m_paths[row] : QString(); }

void CheckpointBrowser::refresh() {
  m_table->setRowCount(0);
  m_paths.clear();
  m_lora.clear();
  if (!m_controller || m_controller->runDir().isEmpty()) return;
  std::vector<checkpoint::CheckpointInfo> list;
  try {
    list = checkpoint::list_checkpoints((m_controller->runDir() + QStringLiteral("/checkpoints")).toStdString());
  } catch (const std::exception&) {
    return;
  }
  for (const auto& c : list) {
    const int row = m_table->rowCount();
    m_table->insertRow(row);
    m_paths << QString::fromStdString(c.path);
    m_lora << c.meta.contains("lora");
    // The nearest sample grid at or before the checkpoint's step.
    const SampleStep* nearest = nullptr;
    for (const auto& s : m_controller->samples())
      if (s.step <= c.step && (!nearest || s.step > nearest->step)) nearest = &s;
    auto* thumb = new QTableWidgetItem;
    if (nearest) {
      const QString grid = nearest->dir + QStringLiteral("/grid.png");
      const QPixmap pix(QFileInfo::exists(grid) ? grid : (nearest->images.isEmpty() ? QString() : nearest->images.first()));
      if (!pix.isNull()) thumb->setIcon(QIcon(pix.scaled(64, 64, Qt::KeepAspectRatio)));
      thumb->setToolTip(tr("samples at step %1").arg(nearest->step));
    }
    m_table->setItem(row, 0, thumb);
    m_table->setItem(row, 1, new QTableWidgetItem(QString::number(c.step)));
    const double t = c.meta.value("time", 0.0);
    m_table->setItem(row, 2, new QTableWidgetItem(t > 0 ? QDateTime::fromSecsSinceEpoch(static_cast<qint64>(t)).toString(
                                                              QStringLiteral("yyyy-MM-dd hh:mm:ss"))
                                                        : QString()));
    const double loss = c.meta.value("smoothed_loss", c.meta.value("loss", std::nan("")));
    m_table->setItem(row, 3, new QTableWidgetItem(std::isnan(loss) ? QString() : QString::number(loss, 'g', 4)));
    m_table->setItem(row, 4, new QTableWidgetItem(QLocale().formattedDataSize(c.bytes)));
    QString what = tr("stage %1 · %2 rank(s) · %3")
                       .arg(c.meta.value("stage", 0))
                       .arg(c.meta.value("world_size", 1))
                       .arg(QString::fromStdString(c.meta.value("reason", std::string())));
    if (m_lora.back()) what += tr(" · LoRA rank %1").arg(c.meta["lora"].value("rank", 0));
    m_table->setItem(row, 5, new QTableWidgetItem(what));
  }
}

QStringList CheckpointBrowser::verify(int row, bool quiet) {
  QStringList problems;
  try {
    for (const auto& p : checkpoint::verify_checkpoint(checkpoint::open_checkpoint(m_paths.value(row).toStdString())))
      problems << QString::fromStdString(p);
  } catch (const std::exception& e) {
    problems << QString::fromUtf8(e.what());
  }
  if (!quiet) {
    if (problems.isEmpty()) QMessageBox::information(this, tr("Verify"), tr("%1: every file is intact.").arg(m_paths.value(row)));
    else QMessageBox::warning(this, tr("Verify"), problems.join(QLatin1Char('\n')));
  }
  return problems;
}

bool CheckpointBrowser::remove(int row, bool confirmed) {
  const QString path = m_paths.value(row);
  if (path.isEmpty()) return false;
  if (!confirmed &&
      QMessageBox::question(this, tr("Delete checkpoint"), tr("Delete %1 and all its files?").arg(path)) != QMessageBox::Yes)
    return false;
  const bool ok = QDir(path).removeRecursively();
  refresh();
  return ok;
}

CheckpointBrowser::~CheckpointBrowser() {
  // Before the children go: the worker reports progress into a child dialog.
  if (m_exportThread) {
    m_cancelExport->store(true);
    m_exportThread->wait();
  }
}

bool CheckpointBrowser::isLora(int row) const { return m_lora.value(row, false); }

QList<QPair<QString, QString>> CheckpointBrowser::exportChoices(int row) const {
  if (!isLora(row))
    return {{tr("diffusers folder"), QStringLiteral("diffusers")},
            {tr("single-file SD checkpoint"), QStringLiteral("single-file")},
            {tr("consolidated safetensors"), QStringLiteral("safetensors")}};
  return {{tr("LoRA file, kohya layout (A1111, ComfyUI)"), QStringLiteral("lora-kohya")},
          {tr("LoRA file, diffusers layout (load_lora_weights)"), QStringLiteral("lora-diffusers")},
          {tr("diffusers folder, adapters merged"), QStringLiteral("diffusers+merge")},
          {tr("single-file SD checkpoint, adapters merged"), QStringLiteral("single-file+merge")},
          {tr("consolidated safetensors, adapters merged"), QStringLiteral("safetensors+merge")}};
}

QString CheckpointBrowser::exportCheckpoint(int row, const QString& format, const QString& dtype, bool ema,
                                            const QString& out, bool wait, bool merge) {
  if (m_exportThread) return tr("An export is still running; wait for it or cancel it.");
  checkpoint::ExportOptions o;
  o.format = format.toStdString();
  o.merge = merge;
  if (dtype == QLatin1String("fp16")) o.dtype = at::kHalf;
  else if (dtype == QLatin1String("bf16")) o.dtype = at::kBFloat16;
  else o.dtype = at::kFloat;
  o.ema = ema;
  auto* progress = new QProgressDialog(tr("Exporting %1...").arg(QFileInfo(m_paths.value(row)).fileName()), tr("Cancel"),
                                       0, 1000, this);
  progress->setObjectName(QStringLiteral("exportProgress"));
  progress->setMinimumDuration(0);
  progress->setValue(0);
  progress->setAutoReset(false);
  auto cancel = std::make_shared<std::atomic<bool>>(false);
  m_cancelExport = cancel;
  connect(progress, &QProgressDialog::canceled, this, [cancel] { cancel->store(true); });
  auto shared = std::make_shared<QString>();
  o.progress = [progress](std::size_t done, std::size_t total) {
    const int value = total > 0 ? static_cast<int>(1000 * done / total) : 0;
    QMetaObject::invokeMethod(progress, [progress, value] { progress->setValue(value); }, Qt::QueuedConnection);
  };
  o.cancelled = [cancel] { return cancel->load(); };
  const std::string ckpt = m_paths.value(row).toStdString(), target = out.toStdString();
  QThread* thread = QThread::create([o, ckpt, target, shared] {
    try {
      train::export_checkpoint(ckpt, target, o);
    } catch (const std::exception& e) {
      *shared = QString::fromUtf8(e.what());
    }
  });
  thread->setParent(this);
  m_exportThread = thread;
  QEventLoop loop;
  connect(thread, &QThread::finished, this, [this, thread, progress, shared, cancel, &loop, wait] {
    m_exportThread = nullptr;
    progress->setValue(1000);
    progress->deleteLater();
    thread->deleteLater();
    if (wait) loop.quit();
    else if (!shared->isEmpty() && !cancel->load()) QMessageBox::warning(this, tr("Export failed"), *shared);
  });
  thread->start();
  if (!wait) return {};
  loop.exec();
  return *shared;
}

void CheckpointBrowser::exportSelected() {
  const int row = selectedRow();
  if (row < 0) return;
  QDialog dialog(this);
  dialog.setWindowTitle(tr("Export checkpoint"));
  auto* form = new QFormLayout(&dialog);
  auto* format = new QComboBox(&dialog);
  for (const auto& [label, value] : exportChoices(row)) format->addItem(label, value);
  auto* dtype = new QComboBox(&dialog);
  for (const char* d : {"fp16", "bf16", "fp32"}) dtype->addItem(QLatin1String(d), QLatin1String(d));
  auto* ema = new QCheckBox(tr("EMA weights"), &dialog);
  auto* out = new QLineEdit(QDir(m_controller ? m_controller->runDir() : QDir::currentPath())
                                .filePath(QStringLiteral("exports/") + QFileInfo(m_paths[row]).fileName()),
                            &dialog);
  form->addRow(tr("Format"), format);
  form->addRow(tr("Precision"), dtype);
  form->addRow(QString(), ema);
  form->addRow(tr("Output"), out);
  auto* box = new QDialogButtonBox(QDialogButtonBox::Ok | QDialogButtonBox::Cancel, &dialog);
  form->addRow(box);
  connect(box, &QDialogButtonBox::accepted, &dialog, &QDialog::accept);
  connect(box, &QDialogButtonBox::rejected, &dialog, &QDialog::reject);
  if (dialog.exec() != QDialog::Accepted) return;
  QString target = out->text();
  QString chosen = format->currentData().toString();
  const bool merge = chosen.endsWith(QLatin1String("+merge"));
  chosen.remove(QStringLiteral("+merge"));
  if (chosen != QLatin1String("diffusers") && !target.endsWith(QLatin1String(".safetensors")))
    target += QStringLiteral(".safetensors");
  QDir().mkpath(QFileInfo(target).absolutePath());
  exportCheckpoint(row, chosen, dtype->currentData().toString(), ema->isChecked(), target, false, merge);
}

}  // namespace zs::ui
