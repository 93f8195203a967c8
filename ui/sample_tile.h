#pragma once
// One sample image with its caption, as the Samples tab shows it in the grid, the strip and the
// comparisons: small images are enlarged by a whole factor with nearest-neighbour scaling (their
// pixels stay square and sharp), large ones shrunk smoothly. A click asks to enlarge it; the
// context menu enlarges it, opens the file or opens its folder.

#include <QDateTime>
#include <QFrame>
#include <QImage>
#include <QPixmap>
#include <QString>

class QLabel;
class QMenu;

namespace zs::ui {

class SampleTile : public QFrame {
  Q_OBJECT

 public:
  /// `path`: the PNG ("" makes a placeholder that says `caption` has no image); `edge`: the
  /// longest side shown, in pixels.
  SampleTile(const QString& path, const QString& caption, int edge, QWidget* parent = nullptr);

  QString path() const { return m_path; }
  /// False once the file was replaced since it was read (a step sampled again under the same
  /// number after a resume): the view that shows it makes a new tile.
  bool isCurrent() const;
  QString caption() const { return m_caption; }
  /// The pixmap as shown (empty for a placeholder or a file that cannot be read).
  QPixmap shownPixmap() const { return m_shown; }
  /// shownPixmap() as an image.
  QImage shownImage() const { return m_shown.toImage(); }
  /// Shown width over the file's width (0 without an image): a whole number when enlarged.
  double displayScale() const { return m_scale; }
  /// The context menu: Enlarge, Open file, Open folder (the caller owns it; exec() shows it).
  QMenu* createContextMenu(QWidget* parent);

  /// `image` fitted into an `edge` × `edge` square: enlarged by the largest whole factor that
  /// fits (nearest neighbour), or shrunk smoothly when larger.
  static QPixmap thumbnail(const QImage& image, int edge);

 signals:
  void activated(const QString& path, const QString& caption);  ///< clicked or Enlarge
  void openRequested(const QString& path);                      ///< a file or a folder

 protected:
  void mouseReleaseEvent(QMouseEvent* event) override;
  void contextMenuEvent(QContextMenuEvent* event) override;

 private:
  QString m_path;
  QDateTime m_stamp;  // the file's modification time when read
  QString m_caption;
  QPixmap m_shown;
  double m_scale = 0;
  QLabel* m_captionLabel = nullptr;
};

}  // namespace zs::ui
