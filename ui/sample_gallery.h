#pragma once
// Sample gallery: the image logger's images for one step in a grid with each prompt under its
// image, a slider over the steps to see the samples change during training, a click enlarges an
// image. New steps appear as the run writes them (the slider follows the newest unless moved).

#include <QString>
#include <QStringList>
#include <QWidget>

class QGridLayout;
class QLabel;
class QSlider;
class QScrollArea;

namespace zs::ui {

class RunController;

class SampleGallery : public QWidget {
  Q_OBJECT

 public:
  explicit SampleGallery(QWidget* parent = nullptr);
  void setController(RunController* controller);

  int stepCount() const;
  /// The step shown (-1: none).
  qint64 currentStep() const;
  void showStepIndex(int index);
  int imageCount() const { return m_images.size(); }
  QStringList shownPrompts() const;
  /// Opens image `index` of the shown step enlarged (a dialog; returned for tests).
  QWidget* enlarge(int index);

 protected:
  bool eventFilter(QObject* watched, QEvent* event) override;

 private:
  void refresh();
  RunController* m_controller = nullptr;
  QSlider* m_slider = nullptr;
  QLabel* m_stepLabel = nullptr;
  QGridLayout* m_grid = nullptr;
  QWidget* m_gridHost = nullptr;
  QList<QLabel*> m_images;
  QList<QLabel*> m_captions;
  QStringList m_paths;
  int m_shown = -1;
};

}  // namespace zs::ui
