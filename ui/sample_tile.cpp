#include "sample_tile.h"

#include <QContextMenuEvent>
#include <QFileInfo>
#include <QLabel>
#include <QMenu>
#include <QMouseEvent>
#include <QVBoxLayout>

namespace zs::ui {

QPixmap SampleTile::thumbnail(const QImage& image, int edge) {
  if (image.isNull() || edge <= 0) return {};
  const int longest = std::max(image.width(), image.height());
  if (longest > edge) return QPixmap::fromImage(image.scaled(edge, edge, Qt::KeepAspectRatio, Qt::SmoothTransformation));
  const int k = edge / longest;
  return QPixmap::fromImage(k == 1 ? image : image.scaled(image.size() * k, Qt::IgnoreAspectRatio, Qt::FastTransformation));
}

bool SampleTile::isCurrent() const { return m_path.isEmpty() || QFileInfo(m_path).lastModified() == m_stamp; }

SampleTile::SampleTile(const QString& path, const QString& caption, int edge, QWidget* parent)
    : QFrame(parent), m_path(path), m_caption(caption) {
  auto* v = new QVBoxLayout(this);
  v->setContentsMargins(2, 2, 2, 2);
  v->setSpacing(2);
  auto* image = new QLabel(this);
  image->setObjectName(QStringLiteral("image"));
  image->setAlignment(Qt::AlignCenter);
  image->setMinimumSize(std::min(edge, 48), std::min(edge, 48));
  if (!path.isEmpty()) {
    m_stamp = QFileInfo(path).lastModified();
    const QImage file(path);
    m_shown = thumbnail(file, edge);
    if (!m_shown.isNull()) m_scale = static_cast<double>(m_shown.width()) / file.width();
  }
  if (m_shown.isNull()) {
    image->setText(path.isEmpty() ? tr("(no image)") : tr("(cannot read %1)").arg(QFileInfo(path).fileName()));
    image->setFixedSize(edge, std::max(48, edge / 2));
    image->setStyleSheet(QStringLiteral("color: gray; border: 1px dashed gray;"));
  } else {
    image->setPixmap(m_shown);
    image->setCursor(Qt::PointingHandCursor);
    image->setToolTip(QStringLiteral("%1\n%2").arg(caption, path));
  }
  v->addWidget(image, 0, Qt::AlignHCenter);
  m_captionLabel = new QLabel(caption, this);
  m_captionLabel->setObjectName(QStringLiteral("caption"));
  m_captionLabel->setWordWrap(true);
  m_captionLabel->setAlignment(Qt::AlignHCenter | Qt::AlignTop);
  v->addWidget(m_captionLabel);  // the tile's width: a word-wrapped label given its own hint clips lines
  v->addStretch(1);
}

QMenu* SampleTile::createContextMenu(QWidget* parent) {
  auto* menu = new QMenu(parent);
  const bool has = !m_shown.isNull();
  QAction* enlarge = menu->addAction(tr("Enlarge"), this, [this] { emit activated(m_path, m_caption); });
  enlarge->setObjectName(QStringLiteral("enlarge"));
  enlarge->setEnabled(has);
  QAction* open = menu->addAction(tr("Open file"), this, [this] { emit openRequested(m_path); });
  open->setObjectName(QStringLiteral("openFile"));
  open->setEnabled(has);
  QAction* folder = menu->addAction(tr("Open folder"), this, [this] { emit openRequested(QFileInfo(m_path).absolutePath()); });
  folder->setObjectName(QStringLiteral("openFolder"));
  folder->setEnabled(!m_path.isEmpty());
  return menu;
}

void SampleTile::mouseReleaseEvent(QMouseEvent* event) {
  if (event->button() == Qt::LeftButton && !m_shown.isNull()) {
    emit activated(m_path, m_caption);
    return;
  }
  QFrame::mouseReleaseEvent(event);
}

void SampleTile::contextMenuEvent(QContextMenuEvent* event) {
  // popup(), not exec(): no nested event loop in which a new step could rebuild (delete) the tile.
  QMenu* menu = createContextMenu(this);
  menu->setAttribute(Qt::WA_DeleteOnClose);
  menu->popup(event->globalPos());
}

}  // namespace zs::ui
