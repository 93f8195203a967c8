#pragma once
// Checkpoint browser: the run's checkpoints (step, time, loss, size, stage and ranks, a
// thumbnail of the nearest samples) read from the run directory; resume from one, export it
// (format, dtype, EMA, with a progress bar), verify its files, delete it (after confirmation) or
// open its folder.

#include <atomic>
#include <memory>

#include <QList>
#include <QPair>
#include <QString>
#include <QStringList>
#include <QWidget>

class QTableWidget;
class QThread;
class QPushButton;

namespace zs::ui {

class RunController;

class CheckpointBrowser : public QWidget {
  Q_OBJECT

 public:
  explicit CheckpointBrowser(QWidget* parent = nullptr);
  /// Cancels an export still running and joins its thread.
  ~CheckpointBrowser() override;
  void setController(RunController* controller);

  /// Re-reads <run>/checkpoints.
  void refresh();
  int rowCount() const;
  QString checkpointPath(int row) const;
  QTableWidget* table() const { return m_table; }
  /// Problems of the checkpoint's files (empty: intact); also shown in a message box unless `quiet`.
  QStringList verify(int row, bool quiet = false);
  /// Deletes the checkpoint folder; asks first unless `confirmed`.
  bool remove(int row, bool confirmed = false);
  /// Exports row's checkpoint ("diffusers", "single-file", "safetensors", and for a LoRA checkpoint
  /// "lora-kohya", "lora-diffusers"; dtype "fp32"/"fp16"/"bf16"; `merge`: a LoRA checkpoint's
  /// adapters merged into full weights) on a worker thread with a progress dialog (its Cancel
  /// stops the export, removing the file being written); with `wait`, returns when done. Error
  /// text on failure. One export at a time.
  QString exportCheckpoint(int row, const QString& format, const QString& dtype, bool ema, const QString& out, bool wait,
                           bool merge = false);
  /// Whether row's checkpoint holds LoRA adapters (training.method lora or text-encoder LoRA).
  bool isLora(int row) const;
  /// The choices the Export dialog offers for row: (label, format), the format with "+merge" for
  /// a LoRA checkpoint's merged full weights.
  QList<QPair<QString, QString>> exportChoices(int row) const;

 signals:
  /// "Resume from" on a checkpoint folder.
  void resumeRequested(const QString& checkpointPath);

 private:
  void exportSelected();
  int selectedRow() const;
  RunController* m_controller = nullptr;
  QThread* m_exportThread = nullptr;                   // the export under way (a child: joined, then deleted)
  std::shared_ptr<std::atomic<bool>> m_cancelExport;  // set to stop it
  QTableWidget* m_table = nullptr;
  QStringList m_paths;
  QList<bool> m_lora;  // per row: a LoRA checkpoint
};

}  // namespace zs::ui
