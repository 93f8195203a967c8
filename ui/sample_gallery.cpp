#include "sample_gallery.h"

#include <QDialog>
#include <QEvent>
#include <QGridLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QPixmap>
#include <QScrollArea>
#include <QSlider>
#include <QVBoxLayout>

#include "run_controller.h"

namespace zs::ui {

SampleGallery::SampleGallery(QWidget* parent) : QWidget(parent) {
  auto* outer = new QVBoxLayout(this);
  auto* bar = new QHBoxLayout;
  m_stepLabel = new QLabel(tr("No samples yet"), this);
  m_stepLabel->setObjectName(QStringLiteral("stepLabel"));
  bar->addWidget(m_stepLabel);
  m_slider = new QSlider(Qt::Horizontal, this);
  m_slider->setObjectName(QStringLiteral("stepSlider"));
  m_slider->setEnabled(false);
  bar->addWidget(m_slider, 1);
  outer->addLayout(bar);
  auto* scroll = new QScrollArea(this);
  scroll->setWidgetResizable(true);
  m_gridHost = new QWidget(scroll);
  m_grid = new QGridLayout(m_gridHost);
  scroll->setWidget(m_gridHost);
  outer->addWidget(scroll, 1);
  connect(m_slider, &QSlider::valueChanged, this, &SampleGallery::showStepIndex);
}

void SampleGallery::setController(RunController* controller) {
  m_controller = controller;
  connect(controller, &RunController::samplesAdded, this, &SampleGallery::refresh);
}

int SampleGallery::stepCount() const { return m_controller ? static_cast<int>(m_controller->samples().size()) : 0; }

qint64 SampleGallery::currentStep() const {
  if (!m_controller || m_shown < 0 || m_shown >= stepCount()) return -1;
  return m_controller->samples()[static_cast<std::size_t>(m_shown)].step;
}

void SampleGallery::refresh() {
  const int n = stepCount();
  const bool followNewest = m_slider->value() >= m_slider->maximum() || m_shown < 0;
  const QSignalBlocker block(m_slider);
  m_slider->setRange(0, std::max(0, n - 1));
  m_slider->setEnabled(n > 1);
  if (n == 0) {
    m_shown = -1;
    m_stepLabel->setText(tr("No samples yet"));
    for (auto* l : m_images) l->deleteLater();
    for (auto* l : m_captions) l->deleteLater();
    m_images.clear();
    m_captions.clear();
    return;
  }
  const int index = followNewest ? n - 1 : std::min(m_slider->value(), n - 1);
  m_slider->setValue(index);
  showStepIndex(index);
}

void SampleGallery::showStepIndex(int index) {
  if (!m_controller || index < 0 || index >= stepCount()) return;
  m_shown = index;
  if (m_slider->value() != index) {
    const QSignalBlocker block(m_slider);
    m_slider->setValue(index);
  }
  const SampleStep& s = m_controller->samples()[static_cast<std::size_t>(index)];
  m_stepLabel->setText(tr("Step %1 (%2 of %3)").arg(s.step).arg(index + 1).arg(stepCount()));
  for (auto* l : m_images) l->deleteLater();
  for (auto* l : m_captions) l->deleteLater();
  m_images.clear();
  m_captions.clear();
  m_paths = s.images;
  const int columns = 4;
  for (int i = 0; i < s.images.size(); ++i) {
    auto* img = new QLabel(m_gridHost);
    const QPixmap pix(s.images[i]);
    img->setPixmap(pix.scaled(160, 160, Qt::KeepAspectRatio, pix.width() < 64 ? Qt::FastTransformation : Qt::SmoothTransformation));
    img->setAlignment(Qt::AlignCenter);
    img->setCursor(Qt::PointingHandCursor);
    img->setProperty("index", i);
    img->installEventFilter(this);
    auto* caption = new QLabel(i < s.prompts.size() ? s.prompts[i] : QString(), m_gridHost);
    caption->setWordWrap(true);
    caption->setAlignment(Qt::AlignHCenter | Qt::AlignTop);
    caption->setMaximumWidth(180);
    m_grid->addWidget(img, (i / columns) * 2, i % columns);
    m_grid->addWidget(caption, (i / columns) * 2 + 1, i % columns);
    m_images << img;
    m_captions << caption;
  }
}

QStringList SampleGallery::shownPrompts() const {
  QStringList out;
  for (auto* c : m_captions) out << c->text();
  return out;
}

QWidget* SampleGallery::enlarge(int index) {
  if (index < 0 || index >= m_paths.size()) return nullptr;
  auto* dialog = new QDialog(this);
  dialog->setAttribute(Qt::WA_DeleteOnClose);
  dialog->setWindowTitle(index < m_captions.size() ? m_captions[index]->text() : tr("Sample"));
  auto* v = new QVBoxLayout(dialog);
  auto* img = new QLabel(dialog);
  const QPixmap pix(m_paths[index]);
  img->setPixmap(pix.scaled(512, 512, Qt::KeepAspectRatio, pix.width() < 128 ? Qt::FastTransformation : Qt::SmoothTransformation));
  v->addWidget(img);
  if (index < m_captions.size()) v->addWidget(new QLabel(m_captions[index]->text(), dialog));
  dialog->show();
  return dialog;
}

bool SampleGallery::eventFilter(QObject* watched, QEvent* event) {
  if (event->type() == QEvent::MouseButtonRelease)
    if (auto* label = qobject_cast<QLabel*>(watched); label && m_images.contains(label)) {
      enlarge(label->property("index").toInt());
      return true;
    }
  return QWidget::eventFilter(watched, event);
}

}  // namespace zs::ui
