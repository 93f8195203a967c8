#pragma once
// One prompt's image at every sampled step of a run, side by side in step order, each captioned
// with its step: how that prompt changed over the training. A live run's new steps are appended
// (and scrolled to when the strip showed the newest); the files are read once per step.

#include <vector>

#include <QList>
#include <QPair>
#include <QString>
#include <QStringList>
#include <QWidget>

#include "sample_folder.h"

class QComboBox;
class QHBoxLayout;
class QLabel;
class QScrollArea;

namespace zs::ui {

class SampleTile;

class SampleStrip : public QWidget {
  Q_OBJECT

 public:
  explicit SampleStrip(QWidget* parent = nullptr);

  /// The run's sample steps in step order (sortedByStep). Steps after those shown are appended.
  void setSteps(const std::vector<SampleStep>& steps);

  /// The prompts to choose from (one per image slot of the run's steps; the prompt combo).
  QList<PromptSlot> promptSlots() const { return m_slots; }
  /// Shows slot `index` of promptSlots().
  void setPromptIndex(int index);
  /// The slot shown (-1: none, no samples yet).
  int promptIndex() const;
  /// The longest side of each image, in pixels (default 192).
  void setImageEdge(int edge);
  int imageEdge() const { return m_edge; }

  /// The steps shown, left to right: one per sampled step, in step order.
  QList<qint64> steps() const;
  /// The file shown for each of steps() ("" where that step has no image of the prompt).
  QStringList imagePaths() const;
  int count() const { return static_cast<int>(m_tiles.size()); }
  /// The image shown for step `i` of steps() (null when out of range).
  SampleTile* tile(int i) const { return i >= 0 && i < m_tiles.size() ? m_tiles[i] : nullptr; }

 signals:
  void activated(const QString& path, const QString& caption);  ///< enlarge it
  void openRequested(const QString& path);

 private:
  void sync();
  void clearTiles();
  QComboBox* m_prompt = nullptr;
  QComboBox* m_size = nullptr;
  QLabel* m_summary = nullptr;
  QScrollArea* m_scroll = nullptr;
  QWidget* m_host = nullptr;
  QHBoxLayout* m_row = nullptr;
  std::vector<SampleStep> m_steps;
  QList<PromptSlot> m_slots;
  QList<SampleTile*> m_tiles;
  QList<QPair<qint64, QString>> m_shown;  // (step, file) of each tile
  int m_edge = 192;
};

}  // namespace zs::ui
