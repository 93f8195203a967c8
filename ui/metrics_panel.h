#pragma once
// The dashboard's charts (QCustomPlot): loss (raw and smoothed, optional log scale), learning
// rate, memory per rank (RSS on the CPU; GPU allocated / reserved / peak with the card's
// capacity), throughput (samples/s and s/it), gradient norm and, for fp16, the loss scale. Every
// point is kept; QCustomPlot's adaptive sampling thins what is drawn, so 100 000 points stay
// smooth. Drag to pan, wheel to zoom, hover for values, export as PNG or CSV.

#include <QString>
#include <QStringList>
#include <QWidget>

class QCustomPlot;
class QCheckBox;

namespace zs::ui {

class RunController;

class MetricsPanel : public QWidget {
  Q_OBJECT

 public:
  explicit MetricsPanel(QWidget* parent = nullptr);
  /// Follows `controller` (its metricsAdded/runOpened signals).
  void setController(RunController* controller);

  /// Plot names: loss, lr, memory, throughput, grad_norm, loss_scale.
  static QStringList plotNames();
  QCustomPlot* plot(const QString& name) const;
  /// Points in graph `graph` of a plot (all points, not the drawn ones).
  int pointCount(const QString& name, int graph = 0) const;
  void setLogScale(bool on);
  bool exportPng(const QString& name, const QString& path) const;
  /// Every graph of the plot as columns: x, then one column per graph.
  bool exportCsv(const QString& name, const QString& path) const;
  /// The note a plot shows instead of data ("" when none), e.g. a run without loss scaling.
  QString plotNote(const QString& name) const;
  /// The hover text for the data point of plot `name` nearest to step `x`.
  QString valueText(const QString& name, double x) const;

 private:
  void clear();
  void append(int first);
  void appendValidation();
  void drawValidation();  ///< the validation points into the loss plot (no replot)
  void setNote(const QString& name, const QString& text);
  void replotAll();
  QCustomPlot* makePlot(const QString& name, const QString& title, const QString& yLabel);

  RunController* m_controller = nullptr;
  QCheckBox* m_log = nullptr;
  QStringList m_names;
  QList<QCustomPlot*> m_plots;
  int m_ranksShown = 0;
};

}  // namespace zs::ui
