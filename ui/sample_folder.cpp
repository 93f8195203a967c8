#include "sample_folder.h"

#include <algorithm>

#include <QCoreApplication>
#include <QDir>
#include <QFile>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>

namespace zs::ui {

QString PromptSlot::label() const {
  if (prompt.isEmpty()) return QCoreApplication::translate("zs::ui::PromptSlot", "image %1").arg(occurrence + 1);
  return occurrence == 0 ? prompt : QStringLiteral("%1 (%2)").arg(prompt).arg(occurrence + 1);
}

SampleStep readSampleStep(const QString& stepDir, qint64 step) {
  SampleStep s;
  s.step = step;
  s.dir = stepDir;
  const QDir dir(stepDir);
  for (const QString& f : dir.entryList({QStringLiteral("[0-9][0-9][0-9].png")}, QDir::Files, QDir::Name))
    s.images << dir.filePath(f);
  QFile prompts(dir.filePath(QStringLiteral("prompts.json")));
  if (prompts.open(QIODevice::ReadOnly)) {
    const QJsonDocument doc = QJsonDocument::fromJson(prompts.readAll());
    const QJsonArray list = doc.isArray() ? doc.array() : doc.object().value(QStringLiteral("prompts")).toArray();
    for (const auto& p : list) s.prompts << (p.isString() ? p.toString() : p.toObject().value(QStringLiteral("prompt")).toString());
  }
  return s;
}

std::vector<SampleStep> readSampleFolder(const QString& runDir) {
  std::vector<SampleStep> steps;
  const QDir samples(runDir + QStringLiteral("/samples"));
  for (const QString& name : samples.entryList({QStringLiteral("step_*")}, QDir::Dirs | QDir::NoDotAndDotDot)) {
    bool ok = false;
    const qint64 step = name.mid(5).toLongLong(&ok);
    if (!ok) continue;
    SampleStep s = readSampleStep(samples.filePath(name), step);
    if (!s.images.isEmpty()) steps.push_back(std::move(s));
  }
  return sortedByStep(std::move(steps));
}

std::vector<SampleStep> sortedByStep(std::vector<SampleStep> steps) {
  std::stable_sort(steps.begin(), steps.end(), [](const SampleStep& a, const SampleStep& b) { return a.step < b.step; });
  return steps;
}

int nearestStepIndex(const std::vector<SampleStep>& steps, qint64 step) {
  int best = -1;
  for (int i = 0; i < static_cast<int>(steps.size()); ++i) {
    const qint64 d = std::abs(steps[static_cast<std::size_t>(i)].step - step);
    if (best < 0 || d < std::abs(steps[static_cast<std::size_t>(best)].step - step)) best = i;
  }
  return best;
}

namespace {

QList<PromptSlot> slotsOf(const SampleStep& step) {
  QList<PromptSlot> out;
  for (int i = 0; i < step.images.size(); ++i) {
    if (i >= step.prompts.size()) {
      out.push_back({QString(), i});
      continue;
    }
    const QString& p = step.prompts[i];
    out.push_back({p, static_cast<int>(std::count(step.prompts.begin(), step.prompts.begin() + i, p))});
  }
  return out;
}

}  // namespace

QList<PromptSlot> promptSlots(const std::vector<SampleStep>& steps) {
  QList<PromptSlot> out;
  for (auto it = steps.rbegin(); it != steps.rend(); ++it)
    for (const PromptSlot& s : slotsOf(*it))
      if (!out.contains(s)) out.push_back(s);
  return out;
}

int imageIndex(const SampleStep& step, const PromptSlot& slot) {
  return static_cast<int>(slotsOf(step).indexOf(slot));
}

}  // namespace zs::ui
