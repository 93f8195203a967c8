#include "sample_strip.h"

#include <algorithm>

#include <QComboBox>
#include <QHBoxLayout>
#include <QLabel>
#include <QScrollArea>
#include <QScrollBar>
#include <QTimer>
#include <QVBoxLayout>

#include "sample_tile.h"

namespace zs::ui {

SampleStrip::SampleStrip(QWidget* parent) : QWidget(parent) {
  auto* v = new QVBoxLayout(this);
  auto* bar = new QHBoxLayout;
  bar->addWidget(new QLabel(tr("Prompt:"), this));
  m_prompt = new QComboBox(this);
  m_prompt->setObjectName(QStringLiteral("stripPrompt"));
  m_prompt->setSizeAdjustPolicy(QComboBox::AdjustToContents);
  m_prompt->setMinimumContentsLength(24);
  bar->addWidget(m_prompt, 1);
  bar->addWidget(new QLabel(tr("Size:"), this));
  m_size = new QComboBox(this);
  m_size->setObjectName(QStringLiteral("stripSize"));
  for (int edge : {128, 192, 320, 512}) m_size->addItem(tr("%1 px").arg(edge), edge);
  m_size->setCurrentIndex(1);
  bar->addWidget(m_size);
  m_summary = new QLabel(this);
  m_summary->setObjectName(QStringLiteral("stripSummary"));
  bar->addWidget(m_summary);
  v->addLayout(bar);
  m_scroll = new QScrollArea(this);
  m_scroll->setWidgetResizable(true);
  m_host = new QWidget(m_scroll);
  m_row = new QHBoxLayout(m_host);
  m_row->addStretch(1);
  m_scroll->setWidget(m_host);
  v->addWidget(m_scroll, 1);
  connect(m_prompt, &QComboBox::currentIndexChanged, this, [this] {
    clearTiles();
    sync();
  });
  connect(m_size, &QComboBox::currentIndexChanged, this, [this] { setImageEdge(m_size->currentData().toInt()); });
}

void SampleStrip::setSteps(const std::vector<SampleStep>& steps) {
  m_steps = steps;
  const QList<PromptSlot> found = zs::ui::promptSlots(m_steps);
  if (found != m_slots) {
    const int chosen = promptIndex();
    const PromptSlot was = chosen >= 0 ? m_slots[chosen] : PromptSlot{};
    const int keep = chosen >= 0 ? static_cast<int>(found.indexOf(was)) : -1;
    m_slots = found;
    const QSignalBlocker block(m_prompt);
    m_prompt->clear();
    for (const PromptSlot& s : m_slots) m_prompt->addItem(s.label());
    m_prompt->setCurrentIndex(m_slots.isEmpty() ? -1 : std::max(keep, 0));
    if (keep < 0) clearTiles();
  }
  sync();
}

void SampleStrip::setPromptIndex(int index) {
  if (index >= 0 && index < m_slots.size()) m_prompt->setCurrentIndex(index);
}

int SampleStrip::promptIndex() const { return m_slots.isEmpty() ? -1 : m_prompt->currentIndex(); }

void SampleStrip::setImageEdge(int edge) {
  if (edge == m_edge || edge <= 0) return;
  m_edge = edge;
  if (const int i = m_size->findData(edge); i >= 0) {
    const QSignalBlocker block(m_size);
    m_size->setCurrentIndex(i);
  }
  clearTiles();
  sync();
}

QList<qint64> SampleStrip::steps() const {
  QList<qint64> out;
  for (const auto& s : m_shown) out << s.first;
  return out;
}

QStringList SampleStrip::imagePaths() const {
  QStringList out;
  for (const auto& s : m_shown) out << s.second;
  return out;
}

void SampleStrip::clearTiles() {
  for (SampleTile* t : m_tiles) delete t;
  m_tiles.clear();
  m_shown.clear();
}

void SampleStrip::sync() {
  const int chosen = promptIndex();
  QList<QPair<qint64, QString>> want;
  if (chosen >= 0)
    for (const SampleStep& s : m_steps) {
      const int i = imageIndex(s, m_slots[chosen]);
      want.push_back({s.step, i >= 0 ? s.images[i] : QString()});
    }
  // A live run only adds steps: keep the tiles already made (their files are read once), unless
  // a step was sampled again under its number (a resumed run) and its file replaced.
  if (want.mid(0, m_shown.size()) != m_shown ||
      std::any_of(m_tiles.begin(), m_tiles.end(), [](const SampleTile* t) { return !t->isCurrent(); }))
    clearTiles();
  QScrollBar* h = m_scroll->horizontalScrollBar();
  const bool atEnd = m_shown.isEmpty() || h->value() >= h->maximum() - 4;
  const QString prompt = chosen >= 0 ? m_slots[chosen].label() : QString();
  for (int k = static_cast<int>(m_shown.size()); k < want.size(); ++k) {
    const qint64 step = want[k].first;
    const QString file = want[k].second;
    auto* tile = new SampleTile(file, tr("step %1").arg(step), m_edge, m_host);
    connect(tile, &SampleTile::activated, this,
            [this, prompt, step](const QString& path, const QString&) { emit activated(path, tr("%1 · step %2").arg(prompt).arg(step)); });
    connect(tile, &SampleTile::openRequested, this, &SampleStrip::openRequested);
    m_row->insertWidget(m_row->count() - 1, tile);  // before the stretch
    m_tiles << tile;
    m_shown << want[k];
  }
  m_summary->setText(chosen >= 0 ? tr("%n step(s)", nullptr, static_cast<int>(m_shown.size())) : tr("No samples yet"));
  if (atEnd && !m_shown.isEmpty())
    QTimer::singleShot(0, this, [this] { m_scroll->horizontalScrollBar()->setValue(m_scroll->horizontalScrollBar()->maximum()); });
}

}  // namespace zs::ui
