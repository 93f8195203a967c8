#include "memory_panel.h"

#include <QComboBox>
#include <QFormLayout>
#include <QLabel>
#include <QProgressBar>
#include <QPushButton>
#include <QVBoxLayout>

#include "core/memory.h"

namespace zs::ui {
namespace {

QString bytesText(qint64 bytes) { return QString::fromStdString(estimate::format_bytes(bytes)); }

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

MemoryPanel::MemoryPanel(QWidget* parent) : QWidget(parent) {
  setMinimumWidth(260);
  auto* layout = new QVBoxLayout(this);
  auto* title = new QLabel(tr("<b>Memory per process</b>"), this);
  layout->addWidget(title);
  m_card = new QComboBox(this);
  m_card->setObjectName(QStringLiteral("cardSize"));
  const qint64 detected = gpu_total_bytes(0);
  if (detected > 0) m_card->addItem(tr("Detected GPU (%1)").arg(bytesText(detected)), detected);
  for (int gb : {8, 12, 16, 24, 48, 80}) m_card->addItem(tr("%1 GB card").arg(gb), qint64{gb} << 30);
  m_card->setCurrentIndex(detected > 0 ? 0 : m_card->findData(qint64{24} << 30));
  layout->addWidget(m_card);
  m_deviceLabel = new QLabel(tr("GPU"), this);
  layout->addWidget(m_deviceLabel);
  m_deviceBar = new QProgressBar(this);
  m_deviceBar->setObjectName(QStringLiteral("deviceBar"));
  layout->addWidget(m_deviceBar);
  m_cpuLabel = new QLabel(tr("CPU memory"), this);
  layout->addWidget(m_cpuLabel);
  m_cpuBar = new QProgressBar(this);
  m_cpuBar->setObjectName(QStringLiteral("cpuBar"));
  layout->addWidget(m_cpuBar);
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
  layout->addStretch(1);
  connect(m_card, &QComboBox::currentIndexChanged, this, [this] { emit cardChanged(cardBytes()); });
  connect(m_apply, &QPushButton::clicked, this, &MemoryPanel::applySuggestionNow);
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

void MemoryPanel::showEstimate(const estimate::MemoryEstimate& e, bool cpu_run) {
  setEnabled(true);
  m_deviceBytes = e.gpu.total();
  m_cpuBytes = e.cpu.total();
  const qint64 ram = physical_memory_bytes();
  m_deviceLabel->setText(cpu_run ? tr("Device: the CPU (a CPU-only run)") : tr("GPU"));
  fill(m_deviceBar, m_deviceBytes, cpu_run ? ram : cardBytes());
  fill(m_cpuBar, m_cpuBytes * std::max(1, e.options.processes_per_machine), ram);
  m_breakdown->setText(tr("parameters %1<br>gradients %2<br>optimizer states %3<br>activations %4<br>buffers %5%6")
                           .arg(bytesText(e.gpu.parameters), bytesText(e.gpu.gradients),
                                bytesText(e.gpu.optimizer_states), bytesText(e.gpu.activations),
                                bytesText(e.gpu.buffers),
                                e.nvme > 0 ? tr("<br>NVMe files %1").arg(bytesText(e.nvme)) : QString()));
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
}

QString MemoryPanel::deviceText() const { return m_deviceBar->text(); }
QString MemoryPanel::fitText() const { return m_fit->text(); }
QString MemoryPanel::suggestionText() const { return m_suggestion->text(); }

void MemoryPanel::applySuggestionNow() {
  if (!m_lastSuggestion.found) return;
  emit suggestionApplied(m_lastSuggestion.stage,
                         QString::fromLatin1(estimate::offload_name(m_lastSuggestion.offload_optimizer)),
                         QString::fromLatin1(estimate::offload_name(m_lastSuggestion.offload_param)));
}

}  // namespace zs::ui
