#pragma once
// The wizard's side panel: the memory estimate for the current answers, a stacked device bar
// (parameters, gradients, optimizer states, activations, frozen parts, buffers) against the
// chosen card (or the detected GPU) and the host-memory need beside it (with a warning when this
// machine has less), "fits" or "does not fit", the lowest setting that fits with a button to
// apply it, and the fastest setting that fits the card (estimate::fastest_fitting: stage,
// offload, optimizer, masters, fused step, checkpointing) with the host memory it needs and a
// one-click "Use the fastest setting that fits".

#include <QColor>
#include <QString>
#include <QWidget>

#include "estimate/fastest_fitting.h"
#include "estimate/memory_estimator.h"

#include <QVector>

class QComboBox;
class QLabel;
class QProgressBar;
class QPushButton;

namespace zs::ui {

class MemoryPanel : public QWidget {
  Q_OBJECT

 public:
  explicit MemoryPanel(QWidget* parent = nullptr);

  /// Shows `estimate` (computed against cardBytes(); `cpu_run`: the device is the CPU itself).
  void showEstimate(const estimate::MemoryEstimate& estimate, bool cpu_run);
  /// Greys the figures out and says why (the answers have problems).
  void showUnavailable(const QString& why);
  /// Shows the fastest setting that fits the chosen card and the host memory it needs against
  /// `ram` (0: unknown); `current`: the answers already are that setting (the button is off).
  void showFastest(const estimate::FastestFit& fit, qint64 ram, bool current);
  /// No fastest setting to offer, and why (a CPU-only run, answers with problems).
  void showFastestUnavailable(const QString& why);

  /// The device the run will use, as the trainer will choose it ("GPU 0: NVIDIA …", or "CPU (why)").
  void showDevice(const QString& text);
  QString runsOnText() const;

  /// Bytes of the card the estimate is compared with.
  qint64 cardBytes() const;
  /// Selects a card size in bytes (one of the listed sizes, or adds it).
  void setCardBytes(qint64 bytes);
  qint64 deviceBytes() const { return m_deviceBytes; }  ///< device total of the last estimate
  qint64 cpuBytes() const { return m_cpuBytes; }        ///< CPU total of the last estimate
  QString deviceText() const;
  QString fitText() const;
  QString suggestionText() const;
  /// Presses "Apply" (tests).
  void applySuggestionNow();
  /// The device bar's parts, in order: parameters, gradients, optimizer states, activations,
  /// frozen parts, buffers (bytes), and their colours.
  struct Segment {
    QString name;
    qint64 bytes = 0;
    QColor color;
  };
  QVector<Segment> deviceSegments() const;
  /// The warning under the CPU bar (empty when the machine's memory holds the run).
  QString hostWarning() const;
  /// The fastest setting that fits the card, as shown, and the host memory it needs.
  QString fastestText() const;
  QString fastestHostText() const;

 signals:
  /// The user chose another card size.
  void cardChanged(qint64 bytes);
  /// "Apply" on the suggestion: the stage and offload devices ("none", "cpu", "nvme").
  void suggestionApplied(int stage, const QString& offloadOptimizer, const QString& offloadParam);
  /// "Use the fastest setting that fits" was pressed (the wizard applies the setting it computed).
  void fastestRequested();

 private:
  QComboBox* m_card = nullptr;
  QLabel* m_runsOn = nullptr;
  class StackedBar;
  StackedBar* m_deviceBar = nullptr;
  QLabel* m_legend = nullptr;
  QLabel* m_hostWarning = nullptr;
  QProgressBar* m_cpuBar = nullptr;
  QLabel* m_deviceLabel = nullptr;
  QLabel* m_cpuLabel = nullptr;
  QLabel* m_breakdown = nullptr;
  QLabel* m_fit = nullptr;
  QLabel* m_suggestion = nullptr;
  QPushButton* m_apply = nullptr;
  QLabel* m_fastest = nullptr;
  QLabel* m_fastestHost = nullptr;
  QPushButton* m_applyFastest = nullptr;
  qint64 m_deviceBytes = 0;
  qint64 m_cpuBytes = 0;
  estimate::Suggestion m_lastSuggestion;
};

}  // namespace zs::ui
