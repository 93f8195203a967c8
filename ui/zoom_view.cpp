#include "zoom_view.h"

#include <cmath>

#include <QAction>
#include <QButtonGroup>
#include <QHBoxLayout>
#include <QLabel>
#include <QPainter>
#include <QPaintEvent>
#include <QPushButton>
#include <QScrollArea>
#include <QScrollBar>
#include <QToolButton>
#include <QVBoxLayout>
#include <QWheelEvent>

namespace zs::ui {

/// The image drawn at a factor: nearest neighbour from 1× up, smooth below (a fit of a large image).
class ZoomCanvas : public QWidget {
 public:
  using QWidget::QWidget;
  QImage image;
  double factor = 1;

  QSize drawnSize() const {
    return {std::max(1, static_cast<int>(std::lround(image.width() * factor))),
            std::max(1, static_cast<int>(std::lround(image.height() * factor)))};
  }
  void setFactor(double f) {
    factor = f;
    setFixedSize(drawnSize());
    update();
  }

 protected:
  void paintEvent(QPaintEvent*) override {
    if (image.isNull()) return;
    QPainter p(this);
    p.setRenderHint(QPainter::SmoothPixmapTransform, factor < 1);
    p.drawImage(QRect(QPoint(0, 0), drawnSize()), image);
  }
};

ZoomView::ZoomView(QWidget* parent) : QWidget(parent) {
  auto* v = new QVBoxLayout(this);
  v->setContentsMargins(0, 0, 0, 0);
  auto* bar = new QHBoxLayout;
  m_levels = new QButtonGroup(this);
  const auto addLevel = [&](const QString& text, int id, const QString& name) {
    auto* b = new QToolButton(this);
    b->setText(text);
    b->setCheckable(true);
    b->setObjectName(name);
    b->setAutoRaise(true);
    m_levels->addButton(b, id);
    bar->addWidget(b);
  };
  addLevel(tr("Fit"), 0, QStringLiteral("zoomFit"));
  addLevel(tr("1:1"), 1, QStringLiteral("zoom1"));
  for (int k : {2, 4, 8}) addLevel(tr("%1×").arg(k), k, QStringLiteral("zoom%1").arg(k));
  connect(m_levels, &QButtonGroup::idClicked, this, [this](int id) { setZoom(id); });
  m_info = new QLabel(this);
  m_info->setObjectName(QStringLiteral("zoomInfo"));
  bar->addWidget(m_info, 1);
  auto* open = new QPushButton(tr("Open file"), this);
  open->setObjectName(QStringLiteral("openFile"));
  open->setToolTip(tr("Open the PNG in the system's image viewer"));
  connect(open, &QPushButton::clicked, this, [this] { emit openRequested(m_path); });
  bar->addWidget(open);
  v->addLayout(bar);

  m_scroll = new QScrollArea(this);
  m_scroll->setAlignment(Qt::AlignCenter);
  m_scroll->setWidgetResizable(false);
  m_scroll->setBackgroundRole(QPalette::Dark);
  m_canvas = new ZoomCanvas(m_scroll);
  m_scroll->setWidget(m_canvas);
  m_scroll->viewport()->installEventFilter(this);
  v->addWidget(m_scroll, 1);

  const auto shortcut = [this](const QKeySequence& keys, auto fn) {
    auto* a = new QAction(this);
    a->setShortcut(keys);
    a->setShortcutContext(Qt::WidgetWithChildrenShortcut);
    connect(a, &QAction::triggered, this, fn);
    addAction(a);
  };
  shortcut(QKeySequence::ZoomIn, [this] { zoomIn(); });
  shortcut(QKeySequence::ZoomOut, [this] { zoomOut(); });
  shortcut(QKeySequence(Qt::CTRL | Qt::Key_0), [this] { setZoom(0); });
}

bool ZoomView::setImage(const QString& path) {
  m_path = path;
  m_canvas->image = QImage(path);
  apply(m_zoom);
  return !m_canvas->image.isNull();
}

QImage ZoomView::image() const { return m_canvas->image; }

QList<double> ZoomView::levels() { return {1, 2, 4, 8}; }

double ZoomView::effectiveZoom() const {
  if (m_zoom > 0 || m_canvas->image.isNull()) return m_zoom > 0 ? m_zoom : 1;
  const QSize room = m_scroll->viewport()->size();
  const double f = std::min(static_cast<double>(room.width()) / m_canvas->image.width(),
                            static_cast<double>(room.height()) / m_canvas->image.height());
  // Enlarged to fit by a whole factor only, so every image pixel is the same square.
  return f >= 1 ? std::floor(f) : std::max(f, 0.01);
}

void ZoomView::setZoom(double factor) { apply(std::max(0.0, factor)); }

double ZoomView::nextLevel(bool up) const {
  const double now = effectiveZoom();
  const QList<double> all = levels();
  if (up) {
    for (double l : all)
      if (l > now + 1e-9) return l;
    return m_zoom;  // already at the largest
  }
  for (auto it = all.rbegin(); it != all.rend(); ++it)
    if (*it < now - 1e-9) return *it;
  return 0;  // below the smallest level: fit
}

void ZoomView::zoomIn() { apply(nextLevel(true)); }

void ZoomView::zoomOut() { apply(nextLevel(false)); }

void ZoomView::apply(double factor, QPointF anchor) {
  // The image point under `anchor` (viewport coordinates) stays under it.
  const double before = m_canvas->factor;
  const QPointF onCanvas = anchor.x() >= 0 ? QPointF(m_canvas->mapFrom(m_scroll->viewport(), anchor.toPoint())) : QPointF();
  m_zoom = factor;
  const double now = effectiveZoom();
  m_canvas->setFactor(now);
  if (anchor.x() >= 0 && before > 0) {
    const QPointF moved = onCanvas * (now / before);
    m_scroll->horizontalScrollBar()->setValue(static_cast<int>(moved.x() - anchor.x()));
    m_scroll->verticalScrollBar()->setValue(static_cast<int>(moved.y() - anchor.y()));
  }
  const int id = factor == 0 ? 0 : static_cast<int>(factor);
  if (QAbstractButton* b = m_levels->button(id); b && (factor == 0 || factor == id)) {
    b->setChecked(true);
  } else if (QAbstractButton* checked = m_levels->checkedButton()) {
    m_levels->setExclusive(false);
    checked->setChecked(false);
    m_levels->setExclusive(true);
  }
  const QImage& img = m_canvas->image;
  m_info->setText(img.isNull() ? tr("(cannot read the image)")
                               : tr("%1 × %2 px · %3 %").arg(img.width()).arg(img.height()).arg(std::lround(now * 100)));
  emit zoomChanged(m_zoom);
}

QImage ZoomView::shownImage() const { return m_canvas->image.isNull() ? QImage() : m_canvas->grab().toImage(); }

bool ZoomView::eventFilter(QObject* watched, QEvent* event) {
  if (watched == m_scroll->viewport()) {
    if (event->type() == QEvent::Wheel) {
      auto* wheel = static_cast<QWheelEvent*>(event);
      if (wheel->modifiers() & Qt::ControlModifier) {
        if (wheel->angleDelta().y() != 0) apply(nextLevel(wheel->angleDelta().y() > 0), wheel->position());
        return true;
      }
    } else if (event->type() == QEvent::Resize && m_zoom == 0) {
      apply(0);
    }
  }
  return QWidget::eventFilter(watched, event);
}

}  // namespace zs::ui
