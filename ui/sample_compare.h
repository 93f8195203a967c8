#pragma once
// Two sets of samples side by side, each with its own step picker, showing every image of the
// step (its grid) or one chosen prompt:
//  - Kind::steps: two steps of this run;
//  - Kind::runs: this run (left) and another run (right; from Recent Runs or Browse…, read straight
//    from its samples/ folder, live or finished, any model family) at the step nearest to the
//    left side's, the prompt matched by its text.
// The left side follows a live run's newest step while it shows the newest (Kind::steps: the
// right side does).

#include <array>
#include <vector>

#include <QList>
#include <QString>
#include <QStringList>
#include <QWidget>

#include "sample_folder.h"

class QComboBox;
class QGridLayout;
class QLabel;
class QPushButton;
class QTimer;

namespace zs::ui {

class SampleTile;

class SampleCompare : public QWidget {
  Q_OBJECT

 public:
  enum class Kind { steps, runs };
  explicit SampleCompare(Kind kind, QWidget* parent = nullptr);
  Kind kind() const { return m_kind; }

  /// This run's folder and sample steps in step order (sortedByStep). Kind::steps: both sides
  /// pick from them; Kind::runs: the left side does, and the other run is read again.
  void setRun(const QString& runDir, const std::vector<SampleStep>& steps);
  /// Kind::runs: the runs offered for the right side (Recent Runs, newest first; this run and
  /// folders that no longer exist are left out).
  void setRecentRuns(const QStringList& runs);
  /// Kind::runs: compares with the run in `runDir` (added to the choices when missing), at the
  /// step nearest to the left side's. False, with message() saying why, when it has no samples.
  bool setOtherRun(const QString& runDir);
  /// The other run's folder ("" before one is picked).
  QString otherRun() const { return m_otherDir; }
  /// The folders the other-run picker offers, in order.
  QStringList otherRunChoices() const;

  /// The step side `side` shows (0: left, 1: right; -1: none).
  qint64 step(int side) const;
  /// Side `side` shows its step nearest to `step` (Kind::runs, left: the right side follows).
  void setStep(int side, qint64 step);
  /// The steps side `side` can show, in step order.
  QList<qint64> steps(int side) const;
  /// Both sides show promptSlots()[index]; -1: every image of the step.
  void setPromptIndex(int index);
  int promptIndex() const;
  /// The prompts to choose from (this run's image slots).
  QList<PromptSlot> promptSlots() const { return m_slots; }

  /// The files side `side` shows, in order ("" where its step has no image of the prompt).
  QStringList paths(int side) const;
  int tileCount(int side) const;
  /// Image `i` of side `side` (null when out of range).
  SampleTile* tile(int side, int i) const;
  /// Why a side shows nothing ("" when both show a step).
  QString message() const;

 signals:
  void activated(const QString& path, const QString& caption);  ///< enlarge it
  void openRequested(const QString& path);

 protected:
  void showEvent(QShowEvent* event) override;
  void hideEvent(QHideEvent* event) override;

 private:
  struct Side {
    QLabel* title = nullptr;
    QComboBox* picker = nullptr;
    QWidget* host = nullptr;
    QGridLayout* grid = nullptr;
    QList<SampleTile*> tiles;
    QStringList shown;  // files and captions of the tiles, to rebuild only on a change
    std::vector<SampleStep> steps;
  };
  QWidget* makeSide(Side& side, const QString& name);
  void fillPicker(Side& side, int index);  // fills from side.steps, picks `index` (clamped)
  void pickerChanged(int side);
  void readOtherRun();
  void render(int side);
  void renderAll();
  QString sideName(int side) const;

  Kind m_kind;
  QString m_runDir;
  QString m_otherDir;
  QStringList m_browsed;  // runs picked with Browse… that Recent Runs does not list
  QStringList m_recent;
  std::array<Side, 2> m_sides;
  QList<PromptSlot> m_slots;
  bool m_rightPicked = false;  // Kind::runs: the right step was picked by hand (else: nearest)
  QComboBox* m_prompt = nullptr;
  QComboBox* m_other = nullptr;
  QPushButton* m_browse = nullptr;
  QLabel* m_message = nullptr;
  QTimer* m_reread = nullptr;
};

}  // namespace zs::ui
