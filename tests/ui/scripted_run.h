#pragma once
// A run directory written the way the trainer writes it, a piece at a time (dashboard tests).

#include <QString>

class ScriptedRun {
 public:
  explicit ScriptedRun(const QString& dir);
  void line(const QString& json);          ///< one raw events.jsonl line
  void start(int world, int maxSteps);     ///< run_start
  void metrics(int step, int world);       ///< one metrics event with `world` ranks
  void manyMetrics(int count);             ///< steps 1..count, one rank, in one write
  void samples(int step, int n);           ///< n PNGs + prompts.json + a samples event
  void checkpoint(int step);               ///< a real (tiny) checkpoint + its event
  void log(int rank, const QString& text); ///< a line in logs/rank<R>.log
  void message(const QString& text);       ///< a log event
  void error(int step, const QString& text);
  void end(int step, const QString& reason);

 private:
  static QString metricsLine(int step, int world);
  QString m_dir;
};
