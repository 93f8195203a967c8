#include "sample_compare.h"

#include <cmath>

#include <QComboBox>
#include <QDir>
#include <QFileDialog>
#include <QFileInfo>
#include <QGridLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QPushButton>
#include <QScrollArea>
#include <QSplitter>
#include <QTimer>
#include <QVBoxLayout>

#include "sample_tile.h"

namespace zs::ui {

namespace {

QString cleanRunPath(const QString& dir) { return dir.isEmpty() ? QString() : QDir::cleanPath(QDir(dir).absolutePath()); }

}  // namespace

SampleCompare::SampleCompare(Kind kind, QWidget* parent) : QWidget(parent), m_kind(kind) {
  const QString prefix = kind == Kind::steps ? QStringLiteral("compareSteps") : QStringLiteral("compareRuns");
  auto* v = new QVBoxLayout(this);
  auto* bar = new QHBoxLayout;
  bar->addWidget(new QLabel(tr("Prompt:"), this));
  m_prompt = new QComboBox(this);
  m_prompt->setObjectName(prefix + QStringLiteral("Prompt"));
  m_prompt->setSizeAdjustPolicy(QComboBox::AdjustToContents);
  m_prompt->setMinimumContentsLength(20);
  m_prompt->addItem(tr("All prompts"));
  bar->addWidget(m_prompt, 1);
  if (kind == Kind::runs) {
    bar->addWidget(new QLabel(tr("Compare with:"), this));
    m_other = new QComboBox(this);
    m_other->setObjectName(QStringLiteral("otherRun"));
    m_other->setPlaceholderText(tr("Pick a run (Recent Runs or Browse…)"));
    m_other->setSizeAdjustPolicy(QComboBox::AdjustToMinimumContentsLengthWithIcon);
    m_other->setMinimumContentsLength(30);
    bar->addWidget(m_other, 2);
    m_browse = new QPushButton(tr("Browse…"), this);
    m_browse->setObjectName(QStringLiteral("browseRun"));
    bar->addWidget(m_browse);
    connect(m_other, &QComboBox::activated, this, [this](int i) { setOtherRun(m_other->itemData(i).toString()); });
    connect(m_browse, &QPushButton::clicked, this, [this] {
      const QString start = m_otherDir.isEmpty() ? QFileInfo(m_runDir).absolutePath() : m_otherDir;
      const QString dir = QFileDialog::getExistingDirectory(this, tr("Run folder to compare with"), start);
      if (!dir.isEmpty()) setOtherRun(dir);
    });
    // The other run may be live too: its folder is read again while this page shows.
    m_reread = new QTimer(this);
    m_reread->setInterval(2000);
    connect(m_reread, &QTimer::timeout, this, [this] {
      readOtherRun();
      renderAll();
    });
  }
  v->addLayout(bar);
  auto* split = new QSplitter(Qt::Horizontal, this);
  split->addWidget(makeSide(m_sides[0], prefix + QStringLiteral("Left")));
  split->addWidget(makeSide(m_sides[1], prefix + QStringLiteral("Right")));
  v->addWidget(split, 1);
  m_message = new QLabel(this);
  m_message->setObjectName(QStringLiteral("compareMessage"));
  m_message->setWordWrap(true);
  v->addWidget(m_message);
  connect(m_prompt, &QComboBox::currentIndexChanged, this, &SampleCompare::renderAll);
  renderAll();
}

QWidget* SampleCompare::makeSide(Side& side, const QString& name) {
  auto* pane = new QWidget(this);
  auto* v = new QVBoxLayout(pane);
  v->setContentsMargins(0, 0, 0, 0);
  auto* head = new QHBoxLayout;
  side.title = new QLabel(pane);
  side.title->setObjectName(name + QStringLiteral("Title"));
  QFont bold = side.title->font();
  bold.setBold(true);
  side.title->setFont(bold);
  head->addWidget(side.title, 1);
  side.picker = new QComboBox(pane);
  side.picker->setObjectName(name + QStringLiteral("Step"));
  side.picker->setToolTip(tr("The step this side shows"));
  head->addWidget(side.picker);
  v->addLayout(head);
  auto* scroll = new QScrollArea(pane);
  scroll->setWidgetResizable(true);
  side.host = new QWidget(scroll);
  auto* packed = new QVBoxLayout(side.host);  // the images at the top, centred
  side.grid = new QGridLayout;
  packed->addLayout(side.grid);
  packed->setAlignment(side.grid, Qt::AlignHCenter);
  packed->addStretch(1);
  scroll->setWidget(side.host);
  v->addWidget(scroll, 1);
  const int index = &side == &m_sides[0] ? 0 : 1;
  connect(side.picker, &QComboBox::currentIndexChanged, this, [this, index] { pickerChanged(index); });
  return pane;
}

void SampleCompare::fillPicker(Side& side, int index) {
  const QSignalBlocker block(side.picker);
  side.picker->clear();
  for (const SampleStep& s : side.steps) side.picker->addItem(tr("step %1").arg(s.step), s.step);
  side.picker->setCurrentIndex(side.steps.empty() ? -1 : std::clamp(index, 0, static_cast<int>(side.steps.size()) - 1));
}

void SampleCompare::setRun(const QString& runDir, const std::vector<SampleStep>& steps) {
  const QString dir = cleanRunPath(runDir);
  Side& left = m_sides[0];
  Side& right = m_sides[1];
  if (dir != m_runDir) {
    m_runDir = dir;
    left.steps.clear();
    right.steps.clear();
    fillPicker(left, -1);
    fillPicker(right, -1);
    m_rightPicked = false;
    if (m_kind == Kind::runs) setRecentRuns(m_recent);  // this run is no choice
  }
  const QList<PromptSlot> found = zs::ui::promptSlots(steps);
  if (found != m_slots) {
    const int chosen = promptIndex();
    const int keep = chosen >= 0 ? static_cast<int>(found.indexOf(m_slots[chosen])) : -1;
    m_slots = found;
    const QSignalBlocker block(m_prompt);
    while (m_prompt->count() > 1) m_prompt->removeItem(1);
    for (const PromptSlot& s : m_slots) m_prompt->addItem(s.label());
    m_prompt->setCurrentIndex(keep + 1);
  }
  const auto atNewest = [](const Side& s) { return s.picker->currentIndex() < 0 || s.picker->currentIndex() == s.picker->count() - 1; };
  const qint64 leftWas = step(0);
  const int newest = static_cast<int>(steps.size()) - 1;
  if (m_kind == Kind::steps) {
    // Left keeps its step (the oldest at first); right follows the newest while it shows it.
    const bool rightFollows = atNewest(right);
    const qint64 rightWas = step(1);
    left.steps = right.steps = steps;
    fillPicker(left, leftWas < 0 ? 0 : nearestStepIndex(steps, leftWas));
    fillPicker(right, rightFollows ? newest : nearestStepIndex(steps, rightWas));
  } else {
    const bool leftFollows = atNewest(left);
    left.steps = steps;
    fillPicker(left, leftFollows ? newest : nearestStepIndex(steps, leftWas));
    readOtherRun();
  }
  renderAll();
}

void SampleCompare::setRecentRuns(const QStringList& runs) {
  m_recent = runs;
  if (!m_other) return;
  const QSignalBlocker block(m_other);
  m_other->clear();
  QStringList seen;
  for (const QString& raw : m_browsed + m_recent) {
    const QString dir = cleanRunPath(raw);
    if (dir.isEmpty() || dir == m_runDir || seen.contains(dir) || (dir != m_otherDir && !QFileInfo(dir).isDir())) continue;
    seen << dir;
    m_other->addItem(QStringLiteral("%1 — %2").arg(QFileInfo(dir).fileName(), QDir::toNativeSeparators(QFileInfo(dir).absolutePath())), dir);
    m_other->setItemData(m_other->count() - 1, QDir::toNativeSeparators(dir), Qt::ToolTipRole);
  }
  m_other->setCurrentIndex(m_other->findData(m_otherDir));
}

QStringList SampleCompare::otherRunChoices() const {
  QStringList out;
  if (m_other)
    for (int i = 0; i < m_other->count(); ++i) out << m_other->itemData(i).toString();
  return out;
}

bool SampleCompare::setOtherRun(const QString& runDir) {
  if (m_kind != Kind::runs || runDir.isEmpty()) return false;
  m_otherDir = cleanRunPath(runDir);
  if (!otherRunChoices().contains(m_otherDir)) {
    m_browsed.removeAll(m_otherDir);
    m_browsed.prepend(m_otherDir);
  }
  setRecentRuns(m_recent);
  m_rightPicked = false;
  readOtherRun();
  renderAll();
  return !m_sides[1].steps.empty();
}

void SampleCompare::readOtherRun() {
  if (m_kind != Kind::runs) return;
  Side& right = m_sides[1];
  const qint64 was = step(1);
  const QList<qint64> before = steps(1);
  right.steps = m_otherDir.isEmpty() ? std::vector<SampleStep>{} : readSampleFolder(m_otherDir);
  const qint64 target = m_rightPicked || step(0) < 0 ? was : step(0);
  // The same steps: leave the picker alone (refilling it would close its list under the mouse).
  if (steps(1) == before && right.picker->currentIndex() == nearestStepIndex(right.steps, target)) return;
  fillPicker(right, nearestStepIndex(right.steps, target));
}

qint64 SampleCompare::step(int side) const {
  if (side < 0 || side > 1) return -1;
  const QComboBox* p = m_sides[static_cast<std::size_t>(side)].picker;
  return p->currentIndex() < 0 ? -1 : p->currentData().toLongLong();
}

void SampleCompare::setStep(int side, qint64 step) {
  if (side < 0 || side > 1) return;
  Side& s = m_sides[static_cast<std::size_t>(side)];
  const int i = nearestStepIndex(s.steps, step);
  if (i < 0) return;
  if (i == s.picker->currentIndex())
    pickerChanged(side);  // the same step, picked by hand all the same
  else
    s.picker->setCurrentIndex(i);
}

QList<qint64> SampleCompare::steps(int side) const {
  QList<qint64> out;
  if (side >= 0 && side <= 1)
    for (const SampleStep& s : m_sides[static_cast<std::size_t>(side)].steps) out << s.step;
  return out;
}

void SampleCompare::pickerChanged(int side) {
  if (m_kind == Kind::runs) {
    if (side == 0) {
      // The other run's nearest step follows this run's.
      m_rightPicked = false;
      fillPicker(m_sides[1], nearestStepIndex(m_sides[1].steps, step(0)));
    } else {
      m_rightPicked = true;
    }
  }
  renderAll();
}

void SampleCompare::setPromptIndex(int index) {
  if (index >= -1 && index < m_slots.size()) m_prompt->setCurrentIndex(index + 1);
}

int SampleCompare::promptIndex() const { return m_prompt->currentIndex() - 1; }

QStringList SampleCompare::paths(int side) const {
  QStringList out;
  if (side >= 0 && side <= 1)
    for (const SampleTile* t : m_sides[static_cast<std::size_t>(side)].tiles) out << t->path();
  return out;
}

int SampleCompare::tileCount(int side) const {
  return side >= 0 && side <= 1 ? static_cast<int>(m_sides[static_cast<std::size_t>(side)].tiles.size()) : 0;
}

SampleTile* SampleCompare::tile(int side, int i) const {
  if (side < 0 || side > 1) return nullptr;
  const auto& tiles = m_sides[static_cast<std::size_t>(side)].tiles;
  return i >= 0 && i < tiles.size() ? tiles[i] : nullptr;
}

QString SampleCompare::message() const { return m_message->text(); }

QString SampleCompare::sideName(int side) const {
  if (m_kind == Kind::steps) return {};
  return side == 0 ? tr("This run (%1)").arg(QFileInfo(m_runDir).fileName()) : QFileInfo(m_otherDir).fileName();
}

void SampleCompare::renderAll() {
  render(0);
  render(1);
  QString why;
  if (m_sides[0].steps.empty())
    why = tr("This run has no samples yet.");
  else if (m_kind == Kind::runs && m_otherDir.isEmpty())
    why = tr("Pick a run to compare with: one of the recent runs, or Browse… for any run folder.");
  else if (m_kind == Kind::runs && m_sides[1].steps.empty())
    why = tr("No samples in %1 yet.").arg(QDir::toNativeSeparators(m_otherDir + QStringLiteral("/samples")));
  m_message->setText(why);
  m_message->setVisible(!why.isEmpty());
}

void SampleCompare::render(int side) {
  Side& s = m_sides[static_cast<std::size_t>(side)];
  const int index = s.picker->currentIndex();
  const SampleStep* shown = index >= 0 && index < static_cast<int>(s.steps.size()) ? &s.steps[static_cast<std::size_t>(index)] : nullptr;
  const int prompt = promptIndex();
  QStringList files, captions;
  if (shown && prompt < 0) {
    for (int i = 0; i < shown->images.size(); ++i) {
      files << shown->images[i];
      captions << (i < shown->prompts.size() ? shown->prompts[i] : PromptSlot{QString(), i}.label());
    }
  } else if (shown) {
    const int i = imageIndex(*shown, m_slots[prompt]);
    files << (i >= 0 ? shown->images[i] : QString());
    captions << (i >= 0 ? m_slots[prompt].label() : tr("no image of “%1” at step %2").arg(m_slots[prompt].label()).arg(shown->step));
  }
  const QString name = sideName(side);
  const QString stepText = shown ? tr("step %1").arg(shown->step) : tr("no step");
  s.title->setText(name.isEmpty() ? stepText : QStringLiteral("%1 · %2").arg(name, stepText));
  const int edge = prompt < 0 ? 160 : 384;
  const QStringList key = files + captions + QStringList{QString::number(edge)};
  if (key == s.shown) return;  // the same files: keep the tiles (no reading, no flicker)
  s.shown = key;
  for (SampleTile* t : s.tiles) delete t;
  s.tiles.clear();
  const int columns = std::max(1, static_cast<int>(std::ceil(std::sqrt(static_cast<double>(files.size())))));
  for (int i = 0; i < files.size(); ++i) {
    auto* t = new SampleTile(files[i], captions[i], edge, s.host);
    const QString where = name.isEmpty() ? stepText : QStringLiteral("%1 · %2").arg(name, stepText);
    connect(t, &SampleTile::activated, this,
            [this, where](const QString& path, const QString& caption) { emit activated(path, QStringLiteral("%1 · %2").arg(where, caption)); });
    connect(t, &SampleTile::openRequested, this, &SampleCompare::openRequested);
    s.grid->addWidget(t, i / columns, i % columns);
    s.tiles << t;
  }
}

void SampleCompare::showEvent(QShowEvent* event) {
  QWidget::showEvent(event);
  if (!m_reread) return;
  // The newest other run at first, so the page shows a comparison as soon as it opens.
  if (m_otherDir.isEmpty() && m_other->count() > 0) setOtherRun(m_other->itemData(0).toString());
  m_reread->start();
}

void SampleCompare::hideEvent(QHideEvent* event) {
  QWidget::hideEvent(event);
  if (m_reread) m_reread->stop();
}

}  // namespace zs::ui
