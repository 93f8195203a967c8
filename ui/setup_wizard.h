#pragma once
// The setup wizard: accelerate config's questions in its order, then the training questions
// (the engine's setup_questions list, shared with `zerostudio config init`), a memory panel
// beside every page, inline problems from the engine's own validation (Next stays disabled
// while a page has one), and a last page that shows and saves the trainer YAML, optionally
// with accelerate YAML and DeepSpeed JSON next to it.

#include <atomic>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>

#include <QString>
#include <QStringList>
#include <QThread>
#include <QWizard>

#include "config/setup_questions.h"
#include "estimate/fastest_fitting.h"
#include "models/model_shape.h"

class QLabel;
class QListWidget;
class QPlainTextEdit;

namespace zs::ui {

class MemoryPanel;
class QuestionPage;

class SetupWizard : public QWizard {
  Q_OBJECT

 public:
  /// Starts from the built-in quickstart.
  explicit SetupWizard(QWidget* parent = nullptr);
  ~SetupWizard() override;

  /// Fills the answers from a trainer YAML, an accelerate YAML or a DeepSpeed JSON. On a file
  /// that cannot be read, returns false and leaves the answers as they were (`error` says why).
  bool loadConfig(const QString& path, QString* error = nullptr);

  /// Sets one answer as the user would (the widget changes, then everything is recomputed).
  void setAnswer(const QString& id, const QString& value);
  QString answer(const QString& id) const;
  /// The widget that asks question `id` (a QComboBox, QLineEdit, QCheckBox, QPlainTextEdit).
  QWidget* questionWidget(const QString& id) const;
  /// Whether the question is asked with the current answers (its row is shown).
  bool isAsked(const QString& id) const;
  /// The problems shown on page `pageId` (empty: none).
  QStringList problemsOnPage(const QString& pageId) const;
  /// Page id of the current page ("summary" for the last one).
  QString currentPageId() const;

  /// The config the answers make, when they have no problem.
  const std::optional<config::LoadedConfig>& result() const { return m_result; }
  /// The trainer YAML shown on the last page.
  QString yamlText() const;
  /// Notes about a valid config shown on the last page, among them what it needs before it can
  /// train (the model folder, images in the run's data/ folder).
  QStringList warnings() const { return m_warnings; }
  /// Writes the YAML (and, with `launchFiles`, STEM.accelerate.yaml and STEM.deepspeed.json
  /// beside it). False with `error` set when the answers have problems or a file cannot be written.
  bool saveTo(const QString& path, bool launchFiles, QString* error = nullptr);
  /// saveTo(), then asks for the saved config to join the job queue (queueRequested).
  bool saveToQueue(const QString& path, bool launchFiles, QString* error = nullptr);

  MemoryPanel* memoryPanel() const { return m_memory; }
  /// The fastest setting that fits the memory panel's card for the current answers (what "Use
  /// the fastest setting that fits" applies); empty while the estimate is unavailable or in a
  /// CPU-only run.
  const std::optional<estimate::FastestFit>& fastestFit() const { return m_fastest; }

  /// No model shape or dataset scan is under way (they run off the GUI thread; what shows them
  /// updates when they finish).
  bool idle() const { return m_pendingJobs == 0; }
  /// The thread the newest finished shape or scan ran on (nullptr before the first): never the
  /// GUI thread.
  QThread* lastWorkThread() const { return m_lastWorkThread.load(); }

 signals:
  void configSaved(const QString& path);
  /// The saved config at `path` should be added to the job queue (the last page's Add to Queue).
  void queueRequested(const QString& path);

 private:
  friend class QuestionPage;
  void buildPages();
  /// One question's label, input (with a Browse button for paths) and help line on `page`.
  void addQuestion(QuestionPage* page, const config::SetupQuestion& q);
  /// What a page shows besides its questions (model info; dataset info and thumbnails).
  void addPageExtras(QuestionPage* page, const std::string& pageId);
  /// The last page: the YAML, problems, notes and Save.
  void buildSummaryPage();
  void answerChanged(const std::string& id, const QString& value);
  void showAnswers();  // answers -> widgets (signals blocked)
  void refresh();      // validation, visibility, problems, model/dataset info, memory panel
  void updateChoices();  // choice lists that follow the answers (config::question_choices)
  /// The shape of `cfg`'s model as it trains (m_shapes caches it by models::model_shape_key),
  /// or nullptr while it is computed off the GUI thread (model info and the memory panel update
  /// when it arrives) or when that failed (`error` says why).
  const models::ModelShape* shapeOf(const config::TrainerConfig& cfg, QString* error);
  /// Runs `job` on the work thread; the function it returns runs on the GUI thread afterwards.
  void postWork(std::function<std::function<void()>()> job);
  void updateModelInfo();
  void updateDatasetInfo();
  void updateMemory();
  void applySuggestion(int stage, const QString& offloadOptimizer, const QString& offloadParam);
  /// Puts m_fastest's setting into the answers (and cpu_checkpointing, which no question asks,
  /// into the base YAML).
  void applyFastest();
  void openExisting();
  void saveInteractively(bool toQueue);

  config::SetupAnswers m_answers;
  std::string m_base;  ///< YAML the answers are applied on
  std::optional<config::LoadedConfig> m_result;
  std::optional<estimate::FastestFit> m_fastest;
  std::map<std::string, QStringList> m_problems;  ///< by question id
  QStringList m_unplaced;                          ///< problems no question owns
  std::map<std::string, QWidget*> m_widgets;       ///< by question id: the input
  std::map<std::string, QWidget*> m_rows;          ///< by question id: the form row's field
  std::map<std::string, QWidget*> m_helpRows;      ///< by question id: its help line
  std::map<std::string, QuestionPage*> m_pages;    ///< by page id
  std::map<std::string, models::ModelShape> m_shapes;  ///< model shapes by models::model_shape_key
  QString m_deviceKey;  ///< launch.use_cpu and processes of the device line shown (updateMemory)
  std::map<std::string, QString> m_shapeErrors;          ///< why a shape could not be read (until the next refresh)
  std::set<std::string> m_shapesAsked;                   ///< keys being computed
  QThread m_workThread;                                  ///< builds shapes and scans datasets
  QObject* m_work = nullptr;                             ///< lives in m_workThread; jobs are posted to it
  int m_pendingJobs = 0;
  std::atomic<QThread*> m_lastWorkThread{nullptr};
  MemoryPanel* m_memory = nullptr;
  QLabel* m_modelInfo = nullptr;
  QLabel* m_datasetInfo = nullptr;
  QListWidget* m_thumbnails = nullptr;
  QString m_datasetShown;
  QPlainTextEdit* m_yaml = nullptr;
  QLabel* m_summaryProblems = nullptr;
  QLabel* m_summaryWarnings = nullptr;
  QStringList m_warnings;
  bool m_updating = false;
  bool m_saved = false;
};

}  // namespace zs::ui
