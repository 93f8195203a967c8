#include "sample_gallery.h"

#include <algorithm>

#include <QButtonGroup>
#include <QDesktopServices>
#include <QDialog>
#include <QDir>
#include <QGridLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QScreen>
#include <QScrollArea>
#include <QSlider>
#include <QStackedWidget>
#include <QToolButton>
#include <QVBoxLayout>

#include "run_controller.h"
#include "sample_compare.h"
#include "sample_folder.h"
#include "sample_strip.h"
#include "sample_tile.h"
#include "zoom_view.h"

namespace zs::ui {

SampleGallery::SampleGallery(QWidget* parent)
    : QWidget(parent), m_open([](const QUrl& url) { return QDesktopServices::openUrl(url); }) {
  auto* outer = new QVBoxLayout(this);
  auto* modes = new QHBoxLayout;
  m_modes = new QButtonGroup(this);
  const auto addMode = [&](Mode mode, const QString& text, const QString& name, const QString& tip) {
    auto* b = new QToolButton(this);
    b->setText(text);
    b->setToolTip(tip);
    b->setObjectName(name);
    b->setCheckable(true);
    b->setChecked(mode == Mode::grid);
    m_modes->addButton(b, static_cast<int>(mode));
    modes->addWidget(b);
  };
  addMode(Mode::grid, tr("Grid"), QStringLiteral("modeGrid"), tr("One step's images, a slider over the steps"));
  addMode(Mode::strip, tr("Strip"), QStringLiteral("modeStrip"), tr("One prompt at every sampled step"));
  addMode(Mode::compareSteps, tr("Compare steps"), QStringLiteral("modeCompareSteps"), tr("Two steps side by side"));
  addMode(Mode::compareRuns, tr("Compare runs"), QStringLiteral("modeCompareRuns"),
          tr("The same prompt in this run and another run"));
  modes->addStretch(1);
  outer->addLayout(modes);
  m_pages = new QStackedWidget(this);
  m_pages->addWidget(makeGridPage());
  m_strip = new SampleStrip(m_pages);
  m_compareSteps = new SampleCompare(SampleCompare::Kind::steps, m_pages);
  m_compareRuns = new SampleCompare(SampleCompare::Kind::runs, m_pages);
  for (QWidget* page : {static_cast<QWidget*>(m_strip), static_cast<QWidget*>(m_compareSteps), static_cast<QWidget*>(m_compareRuns)})
    m_pages->addWidget(page);
  outer->addWidget(m_pages, 1);
  connect(m_modes, &QButtonGroup::idClicked, this, [this](int id) { setMode(static_cast<Mode>(id)); });
  connect(m_slider, &QSlider::valueChanged, this, &SampleGallery::showStepIndex);
  const auto enlargeIt = [this](const QString& path, const QString& caption) { enlargeFile(path, caption); };
  connect(m_strip, &SampleStrip::activated, this, enlargeIt);
  connect(m_strip, &SampleStrip::openRequested, this, &SampleGallery::openFile);
  for (SampleCompare* c : {m_compareSteps, m_compareRuns}) {
    connect(c, &SampleCompare::activated, this, enlargeIt);
    connect(c, &SampleCompare::openRequested, this, &SampleGallery::openFile);
  }
}

QWidget* SampleGallery::makeGridPage() {
  auto* page = new QWidget(this);
  auto* v = new QVBoxLayout(page);
  v->setContentsMargins(0, 0, 0, 0);
  auto* bar = new QHBoxLayout;
  m_stepLabel = new QLabel(tr("No samples yet"), page);
  m_stepLabel->setObjectName(QStringLiteral("stepLabel"));
  bar->addWidget(m_stepLabel);
  m_slider = new QSlider(Qt::Horizontal, page);
  m_slider->setObjectName(QStringLiteral("stepSlider"));
  m_slider->setEnabled(false);
  bar->addWidget(m_slider, 1);
  v->addLayout(bar);
  auto* scroll = new QScrollArea(page);
  scroll->setWidgetResizable(true);
  m_gridHost = new QWidget(scroll);
  m_grid = new QGridLayout(m_gridHost);
  scroll->setWidget(m_gridHost);
  v->addWidget(scroll, 1);
  return page;
}

void SampleGallery::setController(RunController* controller) {
  m_controller = controller;
  connect(controller, &RunController::samplesAdded, this, &SampleGallery::refresh);
  connect(controller, &RunController::runOpened, this, [this] { setRecentRuns(m_recentRuns); });
}

void SampleGallery::setMode(Mode mode) {
  const Mode before = m_mode;
  m_mode = mode;
  if (QAbstractButton* b = m_modes->button(static_cast<int>(mode)); b && !b->isChecked()) b->setChecked(true);
  m_pages->setCurrentIndex(static_cast<int>(mode));
  updatePage();
  // Compare runs starts from the step the grid showed ("this run's step").
  if (mode == Mode::compareRuns && before == Mode::grid && currentStep() >= 0) m_compareRuns->setStep(0, currentStep());
}

void SampleGallery::updatePage() {
  // Only the page in view reads files; the others catch up when shown.
  if (!m_controller || m_mode == Mode::grid) return;
  const std::vector<SampleStep> steps = sortedByStep(m_controller->samples());
  if (m_mode == Mode::strip) m_strip->setSteps(steps);
  if (m_mode == Mode::compareSteps) m_compareSteps->setRun(m_controller->runDir(), steps);
  if (m_mode == Mode::compareRuns) m_compareRuns->setRun(m_controller->runDir(), steps);
}

void SampleGallery::setRecentRuns(const QStringList& runs) {
  m_recentRuns = runs;
  // This run is no run to compare with (the comparison page learns its folder only when shown).
  QStringList others;
  const QString self = m_controller && !m_controller->runDir().isEmpty() ? QDir::cleanPath(QDir(m_controller->runDir()).absolutePath()) : QString();
  for (const QString& dir : runs)
    if (QDir::cleanPath(QDir(dir).absolutePath()) != self) others << dir;
  m_compareRuns->setRecentRuns(others);
}

bool SampleGallery::openFile(const QString& path) { return !path.isEmpty() && m_open && m_open(QUrl::fromLocalFile(path)); }

int SampleGallery::stepCount() const { return m_controller ? static_cast<int>(m_controller->samples().size()) : 0; }

qint64 SampleGallery::currentStep() const {
  if (!m_controller || m_shown < 0 || m_shown >= stepCount()) return -1;
  return m_controller->samples()[static_cast<std::size_t>(m_shown)].step;
}

void SampleGallery::refresh() {
  updatePage();
  const int n = stepCount();
  const bool followNewest = m_slider->value() >= m_slider->maximum() || m_shown < 0;
  const QSignalBlocker block(m_slider);
  m_slider->setRange(0, std::max(0, n - 1));
  m_slider->setEnabled(n > 1);
  if (n == 0) {
    m_shown = -1;
    m_stepLabel->setText(tr("No samples yet"));
    for (SampleTile* t : m_tiles) delete t;
    m_tiles.clear();
    return;
  }
  const int index = followNewest ? n - 1 : std::min(m_slider->value(), n - 1);
  m_slider->setValue(index);
  showStepIndex(index);
}

void SampleGallery::showStepIndex(int index) {
  if (!m_controller || index < 0 || index >= stepCount()) return;
  const bool same = index == m_shown;
  m_shown = index;
  if (m_slider->value() != index) {
    const QSignalBlocker block(m_slider);
    m_slider->setValue(index);
  }
  const SampleStep& s = m_controller->samples()[static_cast<std::size_t>(index)];
  m_stepLabel->setText(tr("Step %1 (%2 of %3)").arg(s.step).arg(index + 1).arg(stepCount()));
  QStringList files;
  for (const SampleTile* t : m_tiles) files << t->path();
  // A new step elsewhere: this one's files are read already (unless they were replaced: the step
  // was sampled again after a resume).
  if (same && files == s.images && std::all_of(m_tiles.begin(), m_tiles.end(), [](const SampleTile* t) { return t->isCurrent(); }))
    return;
  for (SampleTile* t : m_tiles) delete t;
  m_tiles.clear();
  const int columns = 4;
  for (int i = 0; i < s.images.size(); ++i) {
    auto* tile = new SampleTile(s.images[i], i < s.prompts.size() ? s.prompts[i] : QString(), 160, m_gridHost);
    const qint64 step = s.step;
    connect(tile, &SampleTile::activated, this,
            [this, step](const QString& path, const QString& caption) { enlargeFile(path, tr("step %1 · %2").arg(step).arg(caption)); });
    connect(tile, &SampleTile::openRequested, this, &SampleGallery::openFile);
    m_grid->addWidget(tile, i / columns, i % columns);
    m_tiles << tile;
  }
}

QStringList SampleGallery::shownPrompts() const {
  QStringList out;
  for (const SampleTile* t : m_tiles) out << t->caption();
  return out;
}

SampleTile* SampleGallery::gridTile(int index) const { return index >= 0 && index < m_tiles.size() ? m_tiles[index] : nullptr; }

QWidget* SampleGallery::enlarge(int index) {
  const SampleTile* t = gridTile(index);
  if (!t) return nullptr;
  return enlargeFile(t->path(), t->caption().isEmpty() ? tr("step %1").arg(currentStep()) : t->caption());
}

QDialog* SampleGallery::enlargeFile(const QString& path, const QString& caption) {
  if (path.isEmpty()) return nullptr;
  auto* dialog = new QDialog(this);
  dialog->setObjectName(QStringLiteral("sampleZoom"));
  dialog->setAttribute(Qt::WA_DeleteOnClose);
  dialog->setWindowTitle(caption.isEmpty() ? tr("Sample") : caption);
  auto* v = new QVBoxLayout(dialog);
  auto* zoom = new ZoomView(dialog);
  zoom->setImage(path);
  connect(zoom, &ZoomView::openRequested, this, &SampleGallery::openFile);
  v->addWidget(zoom, 1);
  auto* text = new QLabel(caption, dialog);
  text->setWordWrap(true);
  text->setTextInteractionFlags(Qt::TextSelectableByMouse);
  v->addWidget(text);
  // Room for the image at up to 8× (small samples: about 512 px), within most of the screen.
  const QSize image = zoom->image().size();
  const QRect screen = this->screen()->availableGeometry();
  const int k = image.isEmpty() ? 1 : std::clamp(512 / std::max(image.width(), image.height()), 1, 8);
  dialog->resize(std::clamp(image.width() * k + 40, 420, screen.width() * 9 / 10),
                 std::clamp(image.height() * k + 110, 320, screen.height() * 9 / 10));
  dialog->show();
  return dialog;
}

}  // namespace zs::ui
