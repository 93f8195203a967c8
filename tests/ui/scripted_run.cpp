// A run directory written the way the trainer writes it, a piece at a time (dashboard tests).
// Kept out of the Qt Test file: moc misreads quotes inside raw string literals.
#include <ATen/ATen.h>

#include "checkpoint/checkpoint.h"

#include "scripted_run.h"

#include <cmath>

#include <QDir>
#include <QFile>
#include <QImage>

ScriptedRun::ScriptedRun(const QString& dir) : m_dir(dir) { QDir().mkpath(dir + "/logs"); }

void ScriptedRun::line(const QString& json) {
  QFile f(m_dir + "/events.jsonl");
  if (f.open(QIODevice::Append)) f.write(json.toUtf8() + "\n");
}

void ScriptedRun::start(int world, int maxSteps) {
  line(QString(R"({"type":"run_start","step":0,"time":1,"world_size":%1,"max_steps":%2,"run_dir":"x"})").arg(world).arg(maxSteps));
}

QString ScriptedRun::metricsLine(int step, int world) {
  QString ranks;
  for (int r = 0; r < world; ++r)
    ranks += QString(R"(%1{"rank":%2,"rss_bytes":%3,"gpu_allocated_bytes":0})").arg(r ? "," : "").arg(r).arg(1e9 + r * 1e8);
  return QString(R"({"type":"metrics","step":%1,"time":%1,"loss":%2,"lr":0.001,"grad_norm":1.5,"samples_per_s":100,)"
                 R"("s_per_step":0.25,"epoch":%3,"ranks":[%4]})")
      .arg(step)
      .arg(1.0 + std::sin(step * 0.001))
      .arg(step / 10.0)
      .arg(ranks);
}

void ScriptedRun::metrics(int step, int world) { line(metricsLine(step, world)); }

void ScriptedRun::manyMetrics(int count) {
  QFile f(m_dir + "/events.jsonl");
  if (!f.open(QIODevice::Append)) return;
  QByteArray block;
  for (int s = 1; s <= count; ++s) block += metricsLine(s, 1).toUtf8() + "\n";
  f.write(block);
}

void ScriptedRun::samples(int step, int n) {
  const QString dir = m_dir + QString("/samples/step_%1").arg(step);
  QDir().mkpath(dir);
  QString prompts = "[";
  for (int i = 0; i < n; ++i) {
    QImage img(16, 16, QImage::Format_RGB32);
    img.fill(QColor::fromHsv(i * 60, 255, 200));
    img.save(dir + QString("/%1.png").arg(i, 3, 10, QChar('0')));
    prompts += QString(R"(%1{"file":"%2.png","prompt":"prompt %3","seed":%3})").arg(i ? "," : "").arg(i, 3, 10, QChar('0')).arg(i);
  }
  QFile p(dir + "/prompts.json");
  if (p.open(QIODevice::WriteOnly)) p.write((prompts + "]").toUtf8());
  line(QString(R"({"type":"samples","step":%1,"time":1,"dir":"%2","count":%3})").arg(step).arg(dir).arg(n));
}

void ScriptedRun::checkpoint(int step) {
  const auto info = zs::checkpoint::save_checkpoint(
      (m_dir + "/checkpoints").toStdString(), "step_" + std::to_string(step), {{"rank0.safetensors", {{"w", at::ones({4})}}}},
      {{"step", step}, {"time", 1.7e9}, {"smoothed_loss", 0.5}, {"stage", 2}, {"world_size", 2}, {"reason", "periodic"}});
  line(QString(R"({"type":"checkpoint","step":%1,"time":1,"path":"%2","bytes":%3,"reason":"periodic"})")
           .arg(step)
           .arg(QString::fromStdString(info.path))
           .arg(info.bytes));
}

void ScriptedRun::log(int rank, const QString& text) {
  QFile f(m_dir + QString("/logs/rank%1.log").arg(rank));
  if (f.open(QIODevice::Append)) f.write(text.toUtf8() + "\n");
}

void ScriptedRun::message(const QString& text) {
  line(QString(R"({"type":"log","step":0,"time":1,"message":"%1"})").arg(text));
}

void ScriptedRun::error(int step, const QString& text) {
  line(QString(R"({"type":"error","step":%1,"time":2,"message":"%2"})").arg(step).arg(text));
}

void ScriptedRun::end(int step, const QString& reason) {
  line(QString(R"({"type":"run_end","step":%1,"time":2,"reason":"%2","loss":0.5})").arg(step).arg(reason));
}
