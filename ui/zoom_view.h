#pragma once
// One sample image to look at closely: fit, 1:1, 2×, 4×, 8× (buttons, Ctrl+wheel around the
// cursor, Ctrl++ / Ctrl+- / Ctrl+0), enlarged with nearest-neighbour scaling so each image pixel
// is a sharp square of screen pixels, and "Open file" for the system's image viewer. The image is
// drawn scaled while painting, so 8× of a large image costs no 8×-sized pixmap.

#include <QImage>
#include <QList>
#include <QPointF>
#include <QString>
#include <QWidget>

class QButtonGroup;
class QLabel;
class QScrollArea;

namespace zs::ui {

class ZoomCanvas;

class ZoomView : public QWidget {
  Q_OBJECT

 public:
  explicit ZoomView(QWidget* parent = nullptr);

  /// Shows the PNG at `path` (at the zoom set); false when it cannot be read.
  bool setImage(const QString& path);
  QString path() const { return m_path; }
  /// The image as read from the file.
  QImage image() const;

  /// 0: fit the view (the largest whole factor when the image is smaller than the view);
  /// otherwise screen pixels per image pixel (1, 2, 4, 8; other factors are allowed too).
  void setZoom(double factor);
  double zoom() const { return m_zoom; }
  /// The factor drawn now (fit resolved against the view's size).
  double effectiveZoom() const;
  /// The next fixed level above / below the factor drawn now (below the smallest: fit).
  void zoomIn();
  void zoomOut();
  /// The fixed levels: 1, 2, 4, 8.
  static QList<double> levels();

  /// The image as drawn at the factor drawn now, all of it (also what scrolls out of view).
  QImage shownImage() const;

 signals:
  void openRequested(const QString& path);
  void zoomChanged(double factor);

 protected:
  bool eventFilter(QObject* watched, QEvent* event) override;

 private:
  void apply(double factor, QPointF anchor = {-1, -1});
  double nextLevel(bool up) const;
  QString m_path;
  double m_zoom = 0;
  ZoomCanvas* m_canvas = nullptr;
  QScrollArea* m_scroll = nullptr;
  QButtonGroup* m_levels = nullptr;
  QLabel* m_info = nullptr;
};

}  // namespace zs::ui
