#include "core/memory.h"

#include "metrics_panel.h"

#include <algorithm>
#include <cmath>

#include <QCheckBox>
#include <QFileDialog>
#include <QMouseEvent>
#include <QFile>
#include <QGridLayout>
#include <QHBoxLayout>
#include <QMenu>
#include <QTextStream>
#include <QToolTip>
#include <QVBoxLayout>
#include <qcustomplot.h>

#include "run_controller.h"

namespace zs::ui {
namespace {

const QColor kColours[] = {QColor(31, 119, 180), QColor(255, 127, 14), QColor(44, 160, 44), QColor(214, 39, 40),
                           QColor(148, 103, 189), QColor(140, 86, 75), QColor(227, 119, 194), QColor(127, 127, 127)};

QCPGraph* addGraph(QCustomPlot* p, const QString& name, const QColor& colour, QCPAxis* y = nullptr) {
  QCPGraph* g = y ? p->addGraph(p->xAxis, y) : p->addGraph();
  g->setName(name);
  g->setPen(QPen(colour, 1.5));
  g->setAdaptiveSampling(true);
  return g;
}

}  // namespace

MetricsPanel::MetricsPanel(QWidget* parent) : QWidget(parent) {
  auto* outer = new QVBoxLayout(this);
  auto* bar = new QHBoxLayout;
  m_log = new QCheckBox(tr("Log scale (loss)"), this);
  m_log->setObjectName(QStringLiteral("logScale"));
  bar->addWidget(m_log);
  bar->addStretch(1);
  outer->addLayout(bar);
  auto* grid = new QGridLayout;
  outer->addLayout(grid, 1);
  const QList<QPair<QString, QPair<QString, QString>>> plots = {
      {QStringLiteral("loss"), {tr("Loss"), tr("loss")}},
      {QStringLiteral("lr"), {tr("Learning rate"), tr("lr")}},
      {QStringLiteral("memory"), {tr("Memory per rank"), tr("GiB")}},
      {QStringLiteral("throughput"), {tr("Throughput"), tr("samples/s")}},
      {QStringLiteral("grad_norm"), {tr("Gradient norm"), tr("norm")}},
      {QStringLiteral("loss_scale"), {tr("Loss scale (fp16)"), tr("scale")}}};
  for (int i = 0; i < plots.size(); ++i) {
    QCustomPlot* p = makePlot(plots[i].first, plots[i].second.first, plots[i].second.second);
    grid->addWidget(p, i / 2, i % 2);
  }
  addGraph(plot("loss"), tr("loss"), QColor(31, 119, 180, 110));
  addGraph(plot("loss"), tr("smoothed"), QColor(214, 39, 40));
  // Validation losses: points at the steps they were measured (graphs 2 and 3).
  for (const auto& [name, colour] : {std::pair{tr("val_loss"), kColours[2]}, std::pair{tr("val_loss (EMA)"), kColours[4]}}) {
    QCPGraph* g = addGraph(plot("loss"), name, colour);
    g->setLineStyle(QCPGraph::lsNone);
    g->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssDisc, 7));
    g->removeFromLegend();  // until the run has such points (drawValidation)
  }
  plot("loss")->legend->setVisible(true);
  addGraph(plot("lr"), tr("lr"), kColours[2]);
  QCustomPlot* tp = plot("throughput");
  tp->yAxis2->setVisible(true);
  tp->yAxis2->setLabel(tr("s/it"));
  addGraph(tp, tr("samples/s"), kColours[0]);
  addGraph(tp, tr("s/it"), kColours[1], tp->yAxis2);
  tp->legend->setVisible(true);
  // Its legend below the chart, one row: inside, it covered the two lines it names.
  tp->axisRect()->insetLayout()->take(tp->legend);
  tp->plotLayout()->addElement(2, 0, tp->legend);
  tp->plotLayout()->setRowStretchFactor(2, 0.001);
  tp->legend->setFillOrder(QCPLegend::foColumnsFirst);
  tp->legend->setMargins(QMargins(4, 2, 4, 2));
  addGraph(plot("grad_norm"), tr("grad norm"), kColours[4]);
  QCPGraph* scale = addGraph(plot("loss_scale"), tr("loss scale"), kColours[3]);
  scale->setLineStyle(QCPGraph::lsStepLeft);
  plot("loss_scale")->yAxis->setScaleType(QCPAxis::stLogarithmic);
  connect(m_log, &QCheckBox::toggled, this, &MetricsPanel::setLogScale);
}

QCustomPlot* MetricsPanel::makePlot(const QString& name, const QString& title, const QString& yLabel) {
  auto* p = new QCustomPlot(this);
  p->setObjectName(name);
  p->setMinimumSize(300, 180);
  p->plotLayout()->insertRow(0);
  p->plotLayout()->addElement(0, 0, new QCPTextElement(p, title, QFont(font().family(), 10, QFont::Bold)));
  p->xAxis->setLabel(tr("step"));
  p->yAxis->setLabel(yLabel);
  p->setInteractions(QCP::iRangeDrag | QCP::iRangeZoom);
  p->setNoAntialiasingOnDrag(true);
  p->setContextMenuPolicy(Qt::CustomContextMenu);
  connect(p, &QCustomPlot::customContextMenuRequested, this, [this, p, name](const QPoint& pos) {
    QMenu menu(this);
    menu.addAction(tr("Fit to data"), this, [p] {
      p->rescaleAxes();
      p->replot();
    });
    menu.addAction(tr("Export PNG..."), this, [this, name] {
      const QString path = QFileDialog::getSaveFileName(this, tr("Export chart"), name + QStringLiteral(".png"), tr("PNG (*.png)"));
      if (!path.isEmpty()) exportPng(name, path);
    });
    menu.addAction(tr("Export CSV..."), this, [this, name] {
      const QString path = QFileDialog::getSaveFileName(this, tr("Export data"), name + QStringLiteral(".csv"), tr("CSV (*.csv)"));
      if (!path.isEmpty()) exportCsv(name, path);
    });
    menu.exec(p->mapToGlobal(pos));
  });
  connect(p, &QCustomPlot::mouseMove, this, [this, p, name](QMouseEvent* e) {
    if (p->graphCount() == 0 || p->graph(0)->data()->isEmpty()) return;
    const QString text = valueText(name, p->xAxis->pixelToCoord(e->position().x()));
    QToolTip::showText(e->globalPosition().toPoint(), text, p);
  });
  m_names << name;
  m_plots << p;
  return p;
}

QStringList MetricsPanel::plotNames() {
  return {QStringLiteral("loss"), QStringLiteral("lr"), QStringLiteral("memory"), QStringLiteral("throughput"),
          QStringLiteral("grad_norm"), QStringLiteral("loss_scale")};
}

QCustomPlot* MetricsPanel::plot(const QString& name) const {
  const int i = m_names.indexOf(name);
  return i < 0 ? nullptr : m_plots[i];
}

int MetricsPanel::pointCount(const QString& name, int graph) const {
  QCustomPlot* p = plot(name);
  if (!p || graph >= p->graphCount()) return 0;
  return p->graph(graph)->data()->size();
}

void MetricsPanel::setController(RunController* controller) {
  m_controller = controller;
  connect(controller, &RunController::runOpened, this, [this] { clear(); });
  connect(controller, &RunController::metricsAdded, this, &MetricsPanel::append);
  connect(controller, &RunController::validationAdded, this, &MetricsPanel::appendValidation);
}

void MetricsPanel::setNote(const QString& name, const QString& text) {
  QCustomPlot* p = plot(name);
  auto* note = p->findChild<QCPItemText*>(QStringLiteral("note"));
  if (!note) {
    note = new QCPItemText(p);
    note->setObjectName(QStringLiteral("note"));
    note->position->setType(QCPItemPosition::ptAxisRectRatio);
    note->position->setCoords(0.5, 0.5);
    note->setPositionAlignment(Qt::AlignCenter);
  }
  if (note->text() == text && note->visible() == !text.isEmpty()) return;
  note->setText(text);
  note->setVisible(!text.isEmpty());
  // A note replaces the plot: no axes (their ticks and labels crowded into a corner of an empty
  // log-scale plot) around it.
  p->xAxis->setVisible(text.isEmpty());
  p->yAxis->setVisible(text.isEmpty());
  p->replot(QCustomPlot::rpQueuedReplot);
}

QString MetricsPanel::plotNote(const QString& name) const {
  const auto* note = plot(name)->findChild<QCPItemText*>(QStringLiteral("note"));
  return note && note->visible() ? note->text() : QString();
}

void MetricsPanel::drawValidation() {
  if (!m_controller) return;
  QCustomPlot* p = plot("loss");
  p->graph(2)->data()->clear();
  p->graph(3)->data()->clear();
  for (const ValidationPoint& v : m_controller->validation()) {
    p->graph(2)->addData(v.step, v.val_loss);
    if (v.has_ema) p->graph(3)->addData(v.step, v.val_loss_ema);
  }
  // The legend names only what the run has: no validation entries without validation points.
  for (int g : {2, 3}) {
    if (p->graph(g)->data()->isEmpty()) p->graph(g)->removeFromLegend();
    else p->graph(g)->addToLegend();
  }
}

void MetricsPanel::appendValidation() {
  drawValidation();
  replotAll();
}

void MetricsPanel::clear() {
  setNote(QStringLiteral("loss_scale"), QString());
  for (QCustomPlot* p : m_plots)
    for (int g = 0; g < p->graphCount(); ++g) p->graph(g)->data()->clear();
  QCustomPlot* mem = plot("memory");
  mem->clearGraphs();
  mem->clearItems();
  m_ranksShown = 0;
  replotAll();
}

void MetricsPanel::append(int first) {
  if (!m_controller) return;
  const auto& points = m_controller->metrics();
  if (first == 0) clear();
  QCustomPlot* mem = plot("memory");
  const bool gpu = !points.empty() && !points.back().ranks.empty() && points.back().ranks.front().gpu_allocated > 0;
  for (std::size_t i = static_cast<std::size_t>(first); i < points.size(); ++i) {
    const MetricPoint& p = points[i];
    plot("loss")->graph(0)->addData(p.step, p.loss);
    plot("loss")->graph(1)->addData(p.step, p.smoothed);
    plot("lr")->graph(0)->addData(p.step, p.lr);
    plot("throughput")->graph(0)->addData(p.step, p.samples_per_s);
    plot("throughput")->graph(1)->addData(p.step, p.s_per_step);
    plot("grad_norm")->graph(0)->addData(p.step, p.grad_norm);
    if (p.has_loss_scale) plot("loss_scale")->graph(0)->addData(p.step, p.loss_scale);
    // Memory: one graph per rank (RSS on the CPU; allocated, reserved and peak on a GPU).
    const int perRank = gpu ? 3 : 1;
    for (const RankPoint& r : p.ranks) {
      while (m_ranksShown <= r.rank) {
        const QColor c = kColours[m_ranksShown % 8];
        if (gpu) {
          addGraph(mem, tr("rank %1 allocated").arg(m_ranksShown), c);
          QCPGraph* reserved = addGraph(mem, tr("rank %1 reserved").arg(m_ranksShown), c.lighter(140));
          reserved->setPen(QPen(c.lighter(140), 1, Qt::DashLine));
          QCPGraph* peak = addGraph(mem, tr("rank %1 peak").arg(m_ranksShown), c.darker(140));
          peak->setPen(QPen(c.darker(140), 1, Qt::DotLine));
        } else {
          addGraph(mem, tr("rank %1 RSS").arg(m_ranksShown), c);
        }
        ++m_ranksShown;
      }
      const int g = r.rank * perRank;
      if (gpu) {
        mem->graph(g)->addData(p.step, r.gpu_allocated / 1073741824.0);
        mem->graph(g + 1)->addData(p.step, r.gpu_reserved / 1073741824.0);
        mem->graph(g + 2)->addData(p.step, r.gpu_peak / 1073741824.0);
      } else {
        mem->graph(g)->addData(p.step, r.rss / 1073741824.0);
      }
    }
  }
  if (mem->itemCount() == 0 && !points.empty()) {
    // The capacity line: the card (CUDA) or the machine's RAM.
    const qint64 capacity = gpu ? gpu_total_bytes(0) : physical_memory_bytes();
    if (capacity > 0) {
      auto* line = new QCPItemStraightLine(mem);
      line->point1->setCoords(0, capacity / 1073741824.0);
      line->point2->setCoords(1, capacity / 1073741824.0);
      line->setPen(QPen(Qt::red, 1, Qt::DashLine));
    }
  }
  mem->legend->setVisible(m_ranksShown > 0 && m_ranksShown <= 4);
  // fp32 and bf16 runs scale no loss: say so instead of an empty plot.
  const bool scaled = std::any_of(points.begin(), points.end(), [](const MetricPoint& p) { return p.has_loss_scale; });
  setNote(QStringLiteral("loss_scale"),
          points.empty() || scaled ? QString() : tr("No loss scaling in this run\n(only fp16 runs scale the loss)"));
  drawValidation();  // a redraw from the start cleared them
  replotAll();
}

void MetricsPanel::replotAll() {
  for (QCustomPlot* p : m_plots) {
    p->rescaleAxes(true);
    if (p == plot("memory")) p->yAxis->setRangeLower(0);
    p->replot(QCustomPlot::rpQueuedReplot);
  }
}

void MetricsPanel::setLogScale(bool on) {
  if (m_log->isChecked() != on) m_log->setChecked(on);
  QCustomPlot* p = plot("loss");
  p->yAxis->setScaleType(on ? QCPAxis::stLogarithmic : QCPAxis::stLinear);
  if (on) p->yAxis->setTicker(QSharedPointer<QCPAxisTickerLog>(new QCPAxisTickerLog));
  else p->yAxis->setTicker(QSharedPointer<QCPAxisTicker>(new QCPAxisTicker));
  p->rescaleAxes();
  p->replot();
}

bool MetricsPanel::exportPng(const QString& name, const QString& path) const {
  QCustomPlot* p = plot(name);
  return p && p->savePng(path, std::max(p->width(), 640), std::max(p->height(), 400));
}

bool MetricsPanel::exportCsv(const QString& name, const QString& path) const {
  QCustomPlot* p = plot(name);
  QFile f(path);
  if (!p || !f.open(QIODevice::WriteOnly | QIODevice::Text)) return false;
  QTextStream out(&f);
  out << "step";
  for (int g = 0; g < p->graphCount(); ++g) out << ',' << p->graph(g)->name();
  out << '\n';
  // Rows by the first graph's x values; other graphs looked up at the same x.
  if (p->graphCount() == 0) return true;
  const auto data = p->graph(0)->data();
  for (auto it = data->constBegin(); it != data->constEnd(); ++it) {
    out << QString::number(it->key, 'g', 10);
    for (int g = 0; g < p->graphCount(); ++g) {
      const auto d = p->graph(g)->data();
      auto at = d->findBegin(it->key, false);
      out << ',';
      if (at != d->constEnd() && at->key == it->key) out << QString::number(at->value, 'g', 10);
    }
    out << '\n';
  }
  return true;
}

QString MetricsPanel::valueText(const QString& name, double x) const {
  QCustomPlot* p = plot(name);
  if (!p) return {};
  QStringList parts;
  for (int g = 0; g < p->graphCount(); ++g) {
    const auto d = p->graph(g)->data();
    if (d->isEmpty()) continue;
    auto it = d->findBegin(x, true);
    if (it == d->constEnd()) --it;
    auto next = it + 1;
    if (next != d->constEnd() && std::abs(next->key - x) < std::abs(it->key - x)) it = next;
    if (parts.isEmpty()) parts << tr("step %1").arg(it->key);
    parts << QStringLiteral("%1: %2").arg(p->graph(g)->name()).arg(it->value, 0, 'g', 5);
  }
  return parts.join(QLatin1Char('\n'));
}

}  // namespace zs::ui
