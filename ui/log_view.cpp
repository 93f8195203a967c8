#include "log_view.h"

#include <QComboBox>
#include <QHBoxLayout>
#include <QLabel>
#include <QPlainTextEdit>
#include <QScrollBar>
#include <QVBoxLayout>

#include "run_controller.h"

namespace zs::ui {

LogView::LogView(QWidget* parent) : QWidget(parent) {
  auto* outer = new QVBoxLayout(this);
  auto* bar = new QHBoxLayout;
  bar->addWidget(new QLabel(tr("Rank:"), this));
  m_filter = new QComboBox(this);
  m_filter->setObjectName(QStringLiteral("rankFilter"));
  m_filter->addItem(tr("all ranks"), -1);
  bar->addWidget(m_filter);
  bar->addStretch(1);
  outer->addLayout(bar);
  m_text = new QPlainTextEdit(this);
  m_text->setReadOnly(true);
  m_text->setMaximumBlockCount(200000);
  QFont mono(QStringLiteral("Monospace"));
  mono.setStyleHint(QFont::TypeWriter);
  m_text->setFont(mono);
  outer->addWidget(m_text, 1);
  connect(m_filter, &QComboBox::currentIndexChanged, this, [this] { setRankFilter(m_filter->currentData().toInt()); });
}

void LogView::setController(RunController* controller) {
  m_controller = controller;
  connect(controller, &RunController::logsAdded, this, &LogView::add);
}

void LogView::setRankFilter(int rank) {
  m_rank = rank;
  const int i = m_filter->findData(rank);
  if (i >= 0 && m_filter->currentIndex() != i) m_filter->setCurrentIndex(i);
  rebuild();
}

void LogView::rebuild() {
  m_text->clear();
  m_shown = m_errors = 0;
  add(0);
}

void LogView::add(int first) {
  if (!m_controller) return;
  const auto& lines = m_controller->logs();
  if (first == 0 && m_shown > 0) {
    m_text->clear();
    m_shown = m_errors = 0;
  }
  const bool atEnd = m_text->verticalScrollBar()->value() >= m_text->verticalScrollBar()->maximum() - 4;
  for (std::size_t i = static_cast<std::size_t>(first); i < lines.size(); ++i) {
    const LogLine& l = lines[i];
    while (m_ranksListed <= l.rank) {
      m_filter->addItem(tr("rank %1").arg(m_ranksListed), m_ranksListed);
      ++m_ranksListed;
    }
    if (m_rank >= 0 && l.rank != m_rank) continue;
    const QString text = QStringLiteral("[rank %1] %2").arg(l.rank).arg(l.text).toHtmlEscaped();
    m_text->appendHtml(l.error ? QStringLiteral("<span style='color:#c0392b;font-weight:bold'>%1</span>").arg(text)
                               : QStringLiteral("<span>%1</span>").arg(text));
    ++m_shown;
    m_errors += l.error;
  }
  if (atEnd) m_text->verticalScrollBar()->setValue(m_text->verticalScrollBar()->maximum());
}

QString LogView::text() const { return m_text->toPlainText(); }

}  // namespace zs::ui
