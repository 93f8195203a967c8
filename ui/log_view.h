#pragma once
// The run's log: every rank's logs/rank<R>.log as it grows, a rank filter, errors in red.

#include <QWidget>

class QComboBox;
class QPlainTextEdit;

namespace zs::ui {

class RunController;

class LogView : public QWidget {
  Q_OBJECT

 public:
  explicit LogView(QWidget* parent = nullptr);
  void setController(RunController* controller);
  /// -1: every rank.
  void setRankFilter(int rank);
  int shownLines() const { return m_shown; }
  int shownErrors() const { return m_errors; }
  QString text() const;

 private:
  void rebuild();
  void add(int first);
  RunController* m_controller = nullptr;
  QComboBox* m_filter = nullptr;
  QPlainTextEdit* m_text = nullptr;
  int m_rank = -1;
  int m_shown = 0;
  int m_errors = 0;
  int m_ranksListed = 0;
};

}  // namespace zs::ui
