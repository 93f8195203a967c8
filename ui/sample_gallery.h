#pragma once
// Sample gallery: the image logger's samples of the run, in four views (buttons above them):
//  - Grid: one step's images with each prompt under its image, a slider over the steps (it
//    follows the newest step unless moved);
//  - Strip: one prompt's image at every sampled step, in step order (SampleStrip);
//  - Compare steps: two steps side by side (SampleCompare::Kind::steps);
//  - Compare runs: the same prompt in this run and another one (SampleCompare::Kind::runs).
// New steps appear as the run writes them. A click enlarges an image in a zoomable view
// (ZoomView: fit to 8×, nearest neighbour); each image's context menu and the enlarged view open
// the file with the system's viewer.

#include <functional>

#include <QString>
#include <QStringList>
#include <QUrl>
#include <QWidget>

class QButtonGroup;
class QDialog;
class QGridLayout;
class QLabel;
class QSlider;
class QStackedWidget;

namespace zs::ui {

class RunController;
class SampleCompare;
class SampleStrip;
class SampleTile;

class SampleGallery : public QWidget {
  Q_OBJECT

 public:
  enum class Mode { grid, strip, compareSteps, compareRuns };

  explicit SampleGallery(QWidget* parent = nullptr);
  void setController(RunController* controller);

  /// Switches the view (as its button does).
  void setMode(Mode mode);
  Mode mode() const { return m_mode; }

  /// Grid: the number of sampled steps.
  int stepCount() const;
  /// Grid: the step shown (-1: none).
  qint64 currentStep() const;
  /// Grid: shows the run's `index`-th sampled step (the controller's order).
  void showStepIndex(int index);
  /// Grid: the images of the step shown.
  int imageCount() const { return static_cast<int>(m_tiles.size()); }
  /// Grid: the prompt under each image of the step shown.
  QStringList shownPrompts() const;
  /// Grid: image `index` of the step shown (null when out of range).
  SampleTile* gridTile(int index) const;
  /// Grid: opens image `index` of the shown step enlarged (a dialog; returned for tests).
  QWidget* enlarge(int index);
  /// Opens the PNG at `path` enlarged in a dialog with a ZoomView (findChild<ZoomView*>()), titled `caption`.
  QDialog* enlargeFile(const QString& path, const QString& caption);

  SampleStrip* strip() const { return m_strip; }
  SampleCompare* stepComparison() const { return m_compareSteps; }
  SampleCompare* runComparison() const { return m_compareRuns; }

  /// The runs the run comparison offers (MainWindow passes its Recent Runs, newest first).
  void setRecentRuns(const QStringList& runs);
  /// What opens a file or folder (default: QDesktopServices::openUrl; tests replace it).
  void setUrlOpener(std::function<bool(const QUrl&)> open) { m_open = std::move(open); }
  /// Opens `path` (a PNG or a folder) with the system's application; false when that failed.
  bool openFile(const QString& path);

 private:
  void refresh();
  void updatePage();
  QWidget* makeGridPage();
  RunController* m_controller = nullptr;
  Mode m_mode = Mode::grid;
  QButtonGroup* m_modes = nullptr;
  QStackedWidget* m_pages = nullptr;
  QSlider* m_slider = nullptr;
  QLabel* m_stepLabel = nullptr;
  QGridLayout* m_grid = nullptr;
  QWidget* m_gridHost = nullptr;
  QList<SampleTile*> m_tiles;
  int m_shown = -1;
  SampleStrip* m_strip = nullptr;
  SampleCompare* m_compareSteps = nullptr;
  SampleCompare* m_compareRuns = nullptr;
  std::function<bool(const QUrl&)> m_open;
  QStringList m_recentRuns;
};

}  // namespace zs::ui
