#include "memory_panel.h"

#include <QComboBox>
#include <QPainter>
#include <QFormLayout>
#include <QLabel>
#include <QProgressBar>
#include <QPushButton>
#include <QVBoxLayout>

#include <algorithm>

#include "core/memory.h"
#include "core/text.h"

namespace zs::ui {
namespace {

QString bytesText(qint64 bytes) { return QString::fromStdString(format_bytes(bytes)); }

/// Bars count MiB so that 80 GB cards stay inside an int.
int mib(qint64 bytes) { return static_cast<int>(bytes >> 20); }

void fill(QProgressBar* bar, qint64 used, qint64 capacity) {
  bar->setRange(0, std::max(1, mib(capacity)));
  bar->setValue(std::min(mib(used), mib(capacity)));
  bar->setFormat(capacity > 0 ? QStringLiteral("%1 of %2").arg(bytesText(used), bytesText(capacity)) : bytesText(used));
  bar->setStyleSheet(used > capacity && capacity > 0 ? QStringLiteral("QProgressBar::chunk { background: #c0392b; }")
                                                     : QString());
}

}  // namespace

/// The device bar: each part of the estimate as a coloured segment, against the card's size
/// (past it, the bar is drawn to the total and a red line marks the card's end).
class MemoryPanel::StackedBar : public QWidget {
 public:
  explicit StackedBar(QWidget* parent) : QWidget(parent) {
    setMinimumHeight(22);
    setSizePolicy(QSizePolicy::Expanding, QSizePolicy::Fixed);
  }
  void set(QVector<Segment> segments, qint64 capacity) {
    segments_ = std::move(segments);
    capacity_ = capacity;
    update();
  }
  const QVector<Segment>& segments() const { return segments_; }
  qint64 total() const {
    qint64 t = 0;
    for (const auto& s : segments_) t += s.bytes;
    return t;
  }
  QString text() const {
    return capacity_ > 0 ? QStringLiteral("%1 of %2").arg(bytesText(total()), bytesText(capacity_)) : bytesText(total());
  }

 protected:
  void paintEvent(QPaintEvent*) override {
    QPainter p(this);
    const QRectF area = QRectF(rect()).adjusted(0.5, 0.5, -0.5, -0.5);
    p.fillRect(area, palette().base());
    const double scale = static_cast<double>(std::max({capacity_, total(), qint64{1}}));
    double x = area.left();
    for (const auto& s : segments_) {
      const double w = area.width() * static_cast<double>(s.bytes) / scale;
      p.fillRect(QRectF(x, area.top(), w, area.height()), s.color);
      x += w;
    }
    if (capacity_ > 0 && total() > capacity_) {
      const double at = area.left() + area.width() * static_cast<double>(capacity_) / scale;
      p.setPen(QPen(QColor(0xc0, 0x39, 0x2b), 3));
      p.drawLine(QPointF(at, area.top()), QPointF(at, area.bottom()));
    }
    p.setPen(palette().color(QPalette::Mid));
    p.drawRect(area);
    p.setPen(palette().color(QPalette::Text));
    p.drawText(area, Qt::AlignCenter, text());
  }

 private:
  QVector<Segment> segments_;
  qint64 capacity_ = 0;
};

MemoryPanel::MemoryPanel(QWidget* parent) : QWidget(parent) {
  setMinimumWidth(260);
  auto* layout = new QVBoxLayout(this);
  auto* title = new QLabel(tr("<b>Memory per process</b>"), this);
  layout->addWidget(title);
  m_runsOn = new QLabel(this);
  m_runsOn->setObjectName(QStringLiteral("runsOn"));
  m_runsOn->setWordWrap(true);
  layout->addWidget(m_runsOn);
  m_card = new QComboBox(this);
  m_card->setObjectName(QStringLiteral("cardSize"));
  const qint64 detected = gpu_total_bytes(0);
  if (detected > 0) m_card->addItem(tr("Detected GPU (%1)").arg(bytesText(detected)), detected);
  for (int gb : {8, 12, 16, 24, 48, 80}) m_card->addItem(tr("%1 GB card").arg(gb), qint64{gb} << 30);
  m_card->setCurrentIndex(detected > 0 ? 0 : m_card->findData(qint64{24} << 30));
  layout->addWidget(m_card);
  m_deviceLabel = new QLabel(tr("GPU"), this);
  layout->addWidget(m_deviceLabel);
  m_deviceBar = new StackedBar(this);
  m_deviceBar->setObjectName(QStringLiteral("deviceBar"));
  layout->addWidget(m_deviceBar);
  m_legend = new QLabel(this);
  m_legend->setObjectName(QStringLiteral("legend"));
  m_legend->setWordWrap(true);
  layout->addWidget(m_legend);
  m_cpuLabel = new QLabel(tr("CPU memory"), this);
  layout->addWidget(m_cpuLabel);
  m_cpuBar = new QProgressBar(this);
  m_cpuBar->setObjectName(QStringLiteral("cpuBar"));
  layout->addWidget(m_cpuBar);
  m_hostWarning = new QLabel(this);
  m_hostWarning->setObjectName(QStringLiteral("hostWarning"));
  m_hostWarning->setWordWrap(true);
  layout->addWidget(m_hostWarning);
  m_breakdown = new QLabel(this);
  m_breakdown->setObjectName(QStringLiteral("breakdown"));
  m_breakdown->setWordWrap(true);
  layout->addWidget(m_breakdown);
  m_fit = new QLabel(this);
  m_fit->setObjectName(QStringLiteral("fit"));
  layout->addWidget(m_fit);
  m_suggestion = new QLabel(this);
  m_suggestion->setWordWrap(true);
  layout->addWidget(m_suggestion);
  m_apply = new QPushButton(tr("Apply suggestion"), this);
  m_apply->setObjectName(QStringLiteral("applySuggestion"));
  m_apply->setEnabled(false);
  layout->addWidget(m_apply);
  m_fastest = new QLabel(this);
  m_fastest->setObjectName(QStringLiteral("fastest"));
  m_fastest->setWordWrap(true);
  layout->addWidget(m_fastest);
  m_fastestHost = new QLabel(this);
  m_fastestHost->setObjectName(QStringLiteral("fastestHost"));
  m_fastestHost->setWordWrap(true);
  layout->addWidget(m_fastestHost);
  m_applyFastest = new QPushButton(tr("Use the fastest setting that fits"), this);
  m_applyFastest->setObjectName(QStringLiteral("applyFastest"));
  m_applyFastest->setToolTip(tr("Sets the ZeRO stage, offload, optimizer, master weights, fused step and "
                                "checkpointing to the fastest combination the estimate fits on this card"));
  m_applyFastest->setEnabled(false);
  layout->addWidget(m_applyFastest);
  layout->addStretch(1);
  connect(m_card, &QComboBox::currentIndexChanged, this, [this] { emit cardChanged(cardBytes()); });
  connect(m_apply, &QPushButton::clicked, this, &MemoryPanel::applySuggestionNow);
  connect(m_applyFastest, &QPushButton::clicked, this, &MemoryPanel::fastestRequested);
}

qint64 MemoryPanel::cardBytes() const { return m_card->currentData().toLongLong(); }

void MemoryPanel::setCardBytes(qint64 bytes) {
  int i = m_card->findData(bytes);
  if (i < 0) {
    m_card->addItem(bytesText(bytes), bytes);
    i = m_card->count() - 1;
  }
  m_card->setCurrentIndex(i);
}

void MemoryPanel::showDevice(const QString& text) { m_runsOn->setText(tr("Runs on: %1").arg(text)); }

QString MemoryPanel::runsOnText() const { return m_runsOn->text(); }

void MemoryPanel::showEstimate(const estimate::MemoryEstimate& e, bool cpu_run) {
  setEnabled(true);
  m_deviceBytes = e.gpu.total();
  m_cpuBytes = e.cpu.total();
  const qint64 ram = physical_memory_bytes();
  m_deviceLabel->setText(cpu_run ? tr("Device: the CPU (a CPU-only run)") : tr("GPU"));
  const QVector<Segment> parts = {{tr("parameters"), e.gpu.parameters - e.gpu_frozen, QColor(0x2e, 0x86, 0xc1)},
                                   {tr("gradients"), e.gpu.gradients, QColor(0x8e, 0x44, 0xad)},
                                   {tr("optimizer states"), e.gpu.optimizer_states, QColor(0xd3, 0x54, 0x00)},
                                   {tr("activations"), e.gpu.activations, QColor(0x27, 0xae, 0x60)},
                                   {tr("frozen parts"), e.gpu_frozen, QColor(0x7f, 0x8c, 0x8d)},
                                   {tr("buffers"), e.gpu.buffers, QColor(0xf1, 0xc4, 0x0f)}};
  m_deviceBar->set(parts, cpu_run ? ram : cardBytes());
  QStringList legend;
  for (const auto& part : parts)
    legend << tr("<span style='color:%1'>&#9632;</span> %2 %3").arg(part.color.name(), part.name, bytesText(part.bytes));
  m_legend->setText(legend.join(QStringLiteral("<br>")));
  // Host memory: every process on this machine, and the peak while loading.
  const qint64 host = std::max(m_cpuBytes, static_cast<qint64>(e.cpu_load_peak)) * std::max(1, e.options.processes_per_machine);
  fill(m_cpuBar, host, ram);
  m_hostWarning->setText(!e.cpu_fits && ram > 0
                             ? tr("<span style='color:#c0392b'>Needs %1 of CPU memory (offloaded state, EMA, "
                                  "loading); this machine has %2.</span>")
                                   .arg(bytesText(host), bytesText(ram))
                             : QString());
  m_breakdown->setText(e.nvme > 0 ? tr("NVMe files %1").arg(bytesText(e.nvme)) : QString());
  const bool fits = e.fits;  // against the card, or the RAM in a CPU run (the wizard sets which)
  m_fit->setText(fits ? tr("<span style='color:#1e8449'><b>fits</b></span>")
                      : tr("<span style='color:#c0392b'><b>does not fit</b></span>"));
  m_lastSuggestion = e.suggestion;
  if (!e.suggestion.found) {
    m_suggestion->setText(tr("No stage or offload fits this card: lower the batch or resolution, or turn on "
                             "gradient checkpointing."));
  } else {
    m_suggestion->setText(tr("Lowest setting that fits: ZeRO stage %1, optimizer offload %2, parameter offload %3")
                              .arg(e.suggestion.stage)
                              .arg(QString::fromLatin1(estimate::offload_name(e.suggestion.offload_optimizer)),
                                   QString::fromLatin1(estimate::offload_name(e.suggestion.offload_param))));
  }
  const bool same = e.suggestion.stage == e.options.stage && e.suggestion.offload_optimizer == e.options.offload_optimizer &&
                    e.suggestion.offload_param == e.options.offload_param;
  m_apply->setEnabled(e.suggestion.found && !same);
}

void MemoryPanel::showUnavailable(const QString& why) {
  m_fit->setText(tr("<i>%1</i>").arg(why.toHtmlEscaped()));
  m_apply->setEnabled(false);
  m_applyFastest->setEnabled(false);
}

void MemoryPanel::showFastest(const estimate::FastestFit& fit, qint64 ram, bool current) {
  const QString card = m_card->currentText();
  if (!fit.found) {
    m_fastest->setText(tr("<b>Fastest that fits the %1:</b> nothing, even with every offload and checkpointing: "
                          "lower the batch or the resolution, or choose a larger card.")
                           .arg(card.toHtmlEscaped()));
    m_fastestHost->clear();
    m_applyFastest->setEnabled(false);
    return;
  }
  m_fastest->setText(tr("<b>Fastest that fits the %1:</b> %2 (%3 on the device)%4")
                         .arg(card.toHtmlEscaped(), QString::fromStdString(fit.setting.describe()).toHtmlEscaped(),
                              bytesText(fit.estimate.gpu.total()), current ? tr("; the current answers") : QString()));
  const QString need = bytesText(fit.host_needed);
  if (ram <= 0)
    m_fastestHost->setText(tr("Host memory it needs: %1").arg(need));
  else if (fit.host_fits)
    m_fastestHost->setText(tr("Host memory it needs: %1 (this machine has %2)").arg(need, bytesText(ram)));
  else
    m_fastestHost->setText(tr("<span style='color:#c0392b'>Host memory it needs: %1; this machine has %2, and no "
                              "setting that fits the card needs less.</span>")
                               .arg(need, bytesText(ram)));
  m_applyFastest->setEnabled(!current);
}

void MemoryPanel::showFastestUnavailable(const QString& why) {
  m_fastest->setText(tr("<i>%1</i>").arg(why.toHtmlEscaped()));
  m_fastestHost->clear();
  m_applyFastest->setEnabled(false);
}

QString MemoryPanel::fastestText() const { return m_fastest->text(); }
QString MemoryPanel::fastestHostText() const { return m_fastestHost->text(); }

QString MemoryPanel::deviceText() const { return m_deviceBar->text(); }
QVector<MemoryPanel::Segment> MemoryPanel::deviceSegments() const { return m_deviceBar->segments(); }
QString MemoryPanel::hostWarning() const { return m_hostWarning->text(); }
QString MemoryPanel::fitText() const { return m_fit->text(); }
QString MemoryPanel::suggestionText() const { return m_suggestion->text(); }

void MemoryPanel::applySuggestionNow() {
  if (!m_lastSuggestion.found) return;
  emit suggestionApplied(m_lastSuggestion.stage,
                         QString::fromLatin1(estimate::offload_name(m_lastSuggestion.offload_optimizer)),
                         QString::fromLatin1(estimate::offload_name(m_lastSuggestion.offload_param)));
}

}  // namespace zs::ui
