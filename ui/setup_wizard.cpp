// Engine headers first (LibTorch's before Qt's macros).
#include "config/builtin_configs.h"
#include "config/config_import.h"
#include "config/config_writer.h"
#include "core/memory.h"
#include "data/dataset.h"
#include "doctor/system_check.h"
#include "estimate/memory_estimator.h"

#include "setup_wizard.h"

#include <QCheckBox>
#include <QComboBox>
#include <QDir>
#include <QFileDialog>
#include <QFileInfo>
#include <QFormLayout>
#include <QImage>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QListWidget>
#include <QMessageBox>
#include <QPixmap>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QToolButton>
#include <QVBoxLayout>
#include <QScrollArea>
#include <QWizardPage>

#include "memory_panel.h"

namespace zs::ui {

using config::SetupQuestion;
using Kind = SetupQuestion::Kind;

/// One page of questions (a setup_pages() entry): a form whose rows follow is_asked(), and a
/// problems label; complete when none of its asked questions has a problem.
class QuestionPage : public QWizardPage {
 public:
  QuestionPage(SetupWizard* wizard, std::string id, const QString& title) : m_wizard(wizard), m_id(std::move(id)) {
    setTitle(title);
    auto* page = new QVBoxLayout(this);
    page->setContentsMargins(0, 0, 0, 0);
    // The questions scroll when a page has more than the window holds: rows keep their natural
    // height instead of being squeezed until labels are cut.
    auto* scroll = new QScrollArea(this);
    scroll->setWidgetResizable(true);
    scroll->setFrameShape(QFrame::NoFrame);
    auto* content = new QWidget(scroll);
    auto* outer = new QVBoxLayout(content);
    m_form = new QFormLayout;
    m_form->setFieldGrowthPolicy(QFormLayout::ExpandingFieldsGrow);
    m_form->setRowWrapPolicy(QFormLayout::WrapAllRows);  // accelerate's questions are long: label above
    outer->addLayout(m_form);
    m_extra = new QVBoxLayout;
    outer->addLayout(m_extra);
    outer->addStretch(1);
    scroll->setWidget(content);
    page->addWidget(scroll, 1);
    m_problems = new QLabel(this);
    m_problems->setObjectName(QStringLiteral("problems"));
    m_problems->setWordWrap(true);
    m_problems->setStyleSheet(QStringLiteral("color: #c0392b;"));
    m_problems->setTextInteractionFlags(Qt::TextSelectableByMouse);
    page->addWidget(m_problems);
  }
  bool isComplete() const override { return m_wizard->problemsOnPage(QString::fromStdString(m_id)).isEmpty(); }
  void updateState() {
    const QStringList problems = m_wizard->problemsOnPage(QString::fromStdString(m_id));
    m_problems->setText(problems.join(QLatin1Char('\n')));
    m_problems->setVisible(!problems.isEmpty());
    emit completeChanged();
  }
  /// Registers the question's input as a QWizard field named after the question (setField and
  /// field() then work on it: text, checked, currentIndex or plainText).
  void addField(const QString& name, QWidget* input) {
    if (qobject_cast<QPlainTextEdit*>(input)) registerField(name, input, "plainText", SIGNAL(textChanged()));
    else registerField(name, input);
  }
  QFormLayout* form() const { return m_form; }
  QVBoxLayout* extra() const { return m_extra; }
  const std::string& id() const { return m_id; }

 private:
  SetupWizard* m_wizard;
  std::string m_id;
  QFormLayout* m_form;
  QVBoxLayout* m_extra;
  QLabel* m_problems;
};

namespace {

QString qs(const std::string& s) { return QString::fromStdString(s); }

/// The widget's answer as text.
QString widgetValue(const QWidget* w) {
  if (auto* c = qobject_cast<const QComboBox*>(w)) return c->currentData().toString();
  if (auto* b = qobject_cast<const QCheckBox*>(w)) return b->isChecked() ? QStringLiteral("yes") : QStringLiteral("no");
  if (auto* e = qobject_cast<const QLineEdit*>(w)) return e->text();
  if (auto* t = qobject_cast<const QPlainTextEdit*>(w)) return t->toPlainText();
  return {};
}

void setWidgetValue(QWidget* w, const QString& value) {
  if (auto* c = qobject_cast<QComboBox*>(w)) c->setCurrentIndex(std::max(0, c->findData(value)));
  else if (auto* b = qobject_cast<QCheckBox*>(w)) b->setChecked(value == QLatin1String("yes"));
  else if (auto* e = qobject_cast<QLineEdit*>(w)) {
    if (e->text() != value) e->setText(value);
  } else if (auto* t = qobject_cast<QPlainTextEdit*>(w)) {
    if (t->toPlainText() != value) t->setPlainText(value);
  }
}

/// What kind of dataset a folder holds, as scan_dataset reads it.
QString datasetLayout(const QString& root) {
  const QDir dir(root);
  if (dir.exists(QStringLiteral("metadata"))) return QObject::tr("metadata JSON tree");
  if (dir.exists(QStringLiteral("metadata.csv"))) return QObject::tr("metadata.csv");
  if (dir.exists(QStringLiteral("images")) && dir.exists(QStringLiteral("captions"))) return QObject::tr("images/ + captions/");
  return QObject::tr("images with .txt captions side by side");
}

}  // namespace

SetupWizard::SetupWizard(QWidget* parent) : QWizard(parent) {
  setWindowTitle(tr("New training setup"));
  setWizardStyle(QWizard::ClassicStyle);
  setOption(QWizard::HaveCustomButton1, true);
  setButtonText(QWizard::CustomButton1, tr("Open config..."));
  connect(this, &QWizard::customButtonClicked, this, [this](int which) {
    if (which == QWizard::CustomButton1) openExisting();
  });
  const auto start = config::load_config_string(config::quickstart_yaml(), "quickstart");
  m_base = config::to_yaml(start.config);
  m_answers = config::answers_from_config(start.config);
  // Model shapes (the tiny preset is built with real tensors) and dataset scans run on a thread
  // of their own, so typing a path never blocks the GUI.
  m_work = new QObject;
  m_work->moveToThread(&m_workThread);
  connect(&m_workThread, &QThread::finished, m_work, &QObject::deleteLater);
  m_workThread.start();
  m_memory = new MemoryPanel(this);
  setSideWidget(m_memory);
  connect(m_memory, &MemoryPanel::cardChanged, this, [this] { updateMemory(); });
  connect(m_memory, &MemoryPanel::suggestionApplied, this, &SetupWizard::applySuggestion);
  connect(m_memory, &MemoryPanel::fastestRequested, this, &SetupWizard::applyFastest);
  buildPages();
  showAnswers();
  refresh();
  resize(980, 640);
}

SetupWizard::~SetupWizard() {
  // The job under way finishes; the answers it posts back are dropped with this object.
  m_workThread.quit();
  m_workThread.wait();
}

void SetupWizard::postWork(std::function<std::function<void()>()> job) {
  ++m_pendingJobs;
  QMetaObject::invokeMethod(
      m_work,
      [this, job = std::move(job)] {
        std::function<void()> show = job();  // the work thread: no widget is touched here
        m_lastWorkThread = QThread::currentThread();
        QMetaObject::invokeMethod(
            this,
            [this, show = std::move(show)] {
              --m_pendingJobs;
              show();
            },
            Qt::QueuedConnection);
      },
      Qt::QueuedConnection);
}

void SetupWizard::buildPages() {
  for (const auto& [pageId, title] : config::setup_pages()) {
    auto* page = new QuestionPage(this, pageId, qs(title));
    m_pages[pageId] = page;
    for (const auto& q : config::setup_questions())
      if (q.page == pageId) addQuestion(page, q);
    addPageExtras(page, pageId);
    setPage(static_cast<int>(m_pages.size()) - 1, page);
  }
  buildSummaryPage();
  connect(this, &QWizard::currentIdChanged, this, [this] { refresh(); });
}

void SetupWizard::addQuestion(QuestionPage* page, const SetupQuestion& q) {
  QWidget* field = nullptr;
  QWidget* input = nullptr;
  const std::string id = q.id;
  auto changed = [this, id](const QString& v) { answerChanged(id, v); };
  switch (q.kind) {
    case Kind::choice: {
      auto* combo = new QComboBox(page);
      for (const auto& [value, label] : q.choices) combo->addItem(qs(label), qs(value));
      connect(combo, &QComboBox::currentIndexChanged, this, [combo, changed] { changed(combo->currentData().toString()); });
      field = input = combo;
      break;
    }
    case Kind::yes_no: {
      auto* box = new QCheckBox(page);
      connect(box, &QCheckBox::toggled, this, [changed](bool on) { changed(on ? "yes" : "no"); });
      field = input = box;
      break;
    }
    case Kind::lines: {
      auto* text = new QPlainTextEdit(page);
      text->setMaximumHeight(140);
      connect(text, &QPlainTextEdit::textChanged, this, [text, changed] { changed(text->toPlainText()); });
      field = input = text;
      break;
    }
    default: {
      auto* edit = new QLineEdit(page);
      connect(edit, &QLineEdit::textChanged, this, changed);
      input = edit;
      field = edit;
      if (q.kind == Kind::folder || q.kind == Kind::file) {
        auto* row = new QWidget(page);
        auto* h = new QHBoxLayout(row);
        h->setContentsMargins(0, 0, 0, 0);
        h->addWidget(edit, 1);
        auto* browse = new QToolButton(row);
        browse->setText(tr("Browse..."));
        const bool folder = q.kind == Kind::folder;
        const bool checkpoint = q.id == "model_file";
        connect(browse, &QToolButton::clicked, this, [this, edit, folder, checkpoint] {
          const QString path =
              folder       ? QFileDialog::getExistingDirectory(this, tr("Choose a folder"), edit->text())
              : checkpoint ? QFileDialog::getOpenFileName(this, tr("Choose a checkpoint"), edit->text(),
                                                          tr("Single-file checkpoints (*.safetensors)"))
                           : QFileDialog::getOpenFileName(this, tr("Choose a DeepSpeed config"), edit->text(),
                                                          tr("DeepSpeed JSON (*.json)"));
          if (!path.isEmpty()) edit->setText(path);
        });
        h->addWidget(browse);
        field = row;
      }
    }
  }
  input->setObjectName(qs(q.id));
  page->addField(qs(q.id), input);
  if (!q.help.empty()) input->setToolTip(qs(q.help));
  auto* label = new QLabel(qs(q.prompt), page);
  label->setWordWrap(true);
  label->setStyleSheet(QStringLiteral("font-weight: bold;"));
  if (!q.help.empty()) label->setToolTip(qs(q.help));
  page->form()->addRow(label, field);
  m_widgets[q.id] = input;
  m_rows[q.id] = field;
  if (!q.help.empty()) {
    auto* help = new QLabel(qs(q.help), page);
    help->setWordWrap(true);
    help->setStyleSheet(QStringLiteral("color: #555; margin-bottom: 6px;"));
    page->form()->addRow(help);
    m_helpRows[q.id] = help;
  }
}

void SetupWizard::addPageExtras(QuestionPage* page, const std::string& pageId) {
  // The model page shows what the model holds; the dataset page what the folder holds.
  if (pageId == "model") {
    m_modelInfo = new QLabel(page);
    m_modelInfo->setObjectName(QStringLiteral("modelInfo"));
    m_modelInfo->setWordWrap(true);
    page->extra()->addWidget(m_modelInfo);
  }
  if (pageId == "dataset") {
    m_datasetInfo = new QLabel(page);
    m_datasetInfo->setObjectName(QStringLiteral("datasetInfo"));
    m_datasetInfo->setWordWrap(true);
    page->extra()->addWidget(m_datasetInfo);
    m_thumbnails = new QListWidget(page);
    m_thumbnails->setObjectName(QStringLiteral("thumbnails"));
    m_thumbnails->setViewMode(QListView::IconMode);
    m_thumbnails->setIconSize(QSize(96, 96));
    m_thumbnails->setGridSize(QSize(150, 140));
    m_thumbnails->setWordWrap(true);
    m_thumbnails->setMinimumHeight(160);
    page->extra()->addWidget(m_thumbnails);
  }
}

void SetupWizard::buildSummaryPage() {
  // Last page: the YAML, and where to save it.
  auto* summary = new QWizardPage(this);
  summary->setTitle(tr("Trainer config"));
  summary->setObjectName(QStringLiteral("summary"));
  auto* v = new QVBoxLayout(summary);
  m_yaml = new QPlainTextEdit(summary);
  m_yaml->setReadOnly(true);
  QFont mono(QStringLiteral("Monospace"));
  mono.setStyleHint(QFont::TypeWriter);
  m_yaml->setFont(mono);
  v->addWidget(m_yaml, 1);
  m_summaryProblems = new QLabel(summary);
  m_summaryProblems->setWordWrap(true);
  m_summaryProblems->setStyleSheet(QStringLiteral("color: #c0392b;"));
  v->addWidget(m_summaryProblems);
  m_summaryWarnings = new QLabel(summary);
  m_summaryWarnings->setObjectName(QStringLiteral("warnings"));
  m_summaryWarnings->setWordWrap(true);
  m_summaryWarnings->setStyleSheet(QStringLiteral("color: #b9770e;"));
  v->addWidget(m_summaryWarnings);
  auto* launchFiles = new QCheckBox(tr("Also write accelerate YAML and DeepSpeed JSON next to it"), summary);
  launchFiles->setObjectName(QStringLiteral("launchFiles"));
  v->addWidget(launchFiles);
  auto* save = new QPushButton(tr("Save..."), summary);
  save->setObjectName(QStringLiteral("save"));
  v->addWidget(save, 0, Qt::AlignLeft);
  connect(save, &QPushButton::clicked, this, [this] { saveInteractively(false); });
  auto* queue = new QPushButton(tr("Save and Add to Queue..."), summary);
  queue->setObjectName(QStringLiteral("saveToQueue"));
  queue->setToolTip(tr("Save the config, then add it as a job of the queue (the main window's Queue tab)"));
  v->addWidget(queue, 0, Qt::AlignLeft);
  connect(queue, &QPushButton::clicked, this, [this] { saveInteractively(true); });
  setPage(static_cast<int>(m_pages.size()), summary);
}

void SetupWizard::answerChanged(const std::string& id, const QString& value) {
  if (m_updating) return;
  // The engine says what follows from the answer (a family's defaults); those widgets follow.
  const auto changed = config::set_answer(m_answers, id, value.toStdString());
  m_saved = false;
  if (!changed.empty()) showAnswers();
  refresh();
}

void SetupWizard::showAnswers() {
  m_updating = true;
  for (const auto& [id, w] : m_widgets) {
    const QSignalBlocker block(w);
    setWidgetValue(w, qs(m_answers[id]));
  }
  m_updating = false;
}

void SetupWizard::updateChoices() {
  // Choices that follow the answers (the model sources of the chosen family).
  for (const auto& q : config::setup_questions()) {
    if (q.kind != Kind::choice) continue;
    auto* combo = qobject_cast<QComboBox*>(m_widgets[q.id]);
    const auto choices = config::question_choices(q, m_answers);
    bool same = combo->count() == static_cast<int>(choices.size());
    for (int i = 0; same && i < combo->count(); ++i) same = combo->itemData(i).toString() == qs(choices[i].first);
    if (same) continue;
    const QSignalBlocker block(combo);
    combo->clear();
    for (const auto& [value, label] : choices) combo->addItem(qs(label), qs(value));
    combo->setCurrentIndex(std::max(0, combo->findData(qs(m_answers[q.id]))));
  }
}

void SetupWizard::refresh() {
  updateChoices();
  // Visibility: a row is shown while its question is asked.
  for (const auto& q : config::setup_questions()) {
    const bool asked = config::is_asked(q, m_answers);
    m_pages[q.page]->form()->setRowVisible(m_rows[q.id], asked);
    if (const auto help = m_helpRows.find(q.id); help != m_helpRows.end())
      m_pages[q.page]->form()->setRowVisible(help->second, asked);
  }
  // Validation by the engine's loader; each problem goes to the questions that set its key.
  const config::SetupResult r = config::apply_answers(m_answers, m_base);
  m_result = r.loaded;
  m_warnings.clear();
  for (const auto& w : r.warnings) m_warnings << qs(w);
  m_summaryWarnings->setText(m_warnings.isEmpty() ? QString() : tr("Note:\n%1").arg(m_warnings.join(QLatin1Char('\n'))));
  m_summaryWarnings->setVisible(!m_warnings.isEmpty());
  m_problems.clear();
  m_unplaced.clear();
  for (const auto& p : r.problems) {
    const QString text = p.key.empty() ? qs(p.message) : qs(p.key + ": " + p.message);
    const auto ids = config::questions_for_problem(p, m_answers);
    if (ids.empty()) m_unplaced << text;
    for (const auto& id : ids) m_problems[id] << text;
  }
  for (auto& [id, page] : m_pages) page->updateState();
  m_shapeErrors.clear();  // a folder that failed may have been fixed: read it again
  updateModelInfo();
  updateDatasetInfo();
  updateMemory();
  if (m_result) {
    m_yaml->setPlainText(qs(config::to_yaml(m_result->config)));
    m_summaryProblems->clear();
  } else {
    QStringList all;
    for (const auto& p : r.problems) all << qs(p.to_string());
    m_summaryProblems->setText(tr("Fix these first:\n%1").arg(all.join(QLatin1Char('\n'))));
  }
}

const models::ModelShape* SetupWizard::shapeOf(const config::TrainerConfig& cfg, QString* error) {
  // Keyed by all that the shape depends on: LoRA's rank and targets and the text encoders'
  // training change it, so the model page's shape (full training) is never taken for a LoRA
  // estimate's, nor the other way round.
  const std::string key = models::model_shape_key(cfg);
  if (const auto it = m_shapes.find(key); it != m_shapes.end()) return &it->second;
  if (const auto e = m_shapeErrors.find(key); e != m_shapeErrors.end()) {
    *error = e->second;
    return nullptr;
  }
  if (m_shapesAsked.insert(key).second)
    postWork([this, key, cfg]() -> std::function<void()> {
      try {
        auto shape = std::make_shared<models::ModelShape>(models::model_shape(cfg));
        return [this, key, shape] {
          m_shapesAsked.erase(key);
          m_shapes.emplace(key, std::move(*shape));
          updateModelInfo();
          updateMemory();
        };
      } catch (const std::exception& e) {
        const QString why = QString::fromUtf8(e.what());
        return [this, key, why] {
          m_shapesAsked.erase(key);
          m_shapeErrors[key] = why;
          updateModelInfo();
          updateMemory();
        };
      }
    });
  error->clear();
  return nullptr;
}

void SetupWizard::updateModelInfo() {
  if (!m_modelInfo) return;
  const std::string source = m_answers["model_source"];
  const std::string key = source == "folder" ? m_answers["model_path"]
                          : source == "file" ? m_answers["model_file"] + "|" + m_answers["model_config_path"]
                                             : source;
  if (key.empty() || key.front() == '|') {
    m_modelInfo->setText(source == "file" ? tr("Choose the checkpoint file.") : tr("Choose the model folder."));
    return;
  }
  try {
    config::TrainerConfig c = config::TrainerConfig::defaults();
    if (source == "folder") {
      c.model.path = key;
    } else if (source == "file") {
      c.model.path = m_answers["model_file"];
      c.model.config_path = m_answers["model_config_path"];
    } else {
      c.model.preset = key;
    }
    QString error;
    const models::ModelShape* shape = shapeOf(c, &error);  // the model alone, as fully trained
    if (!shape) {
      m_modelInfo->setText(error.isEmpty() ? tr("Reading the model...")
                                           : tr("<span style='color:#c0392b'>%1</span>").arg(error.toHtmlEscaped()));
      return;
    }
    const models::ModelShape& m = *shape;
    QString text = tr("%1 trainable parameters (%2 units)")
                       .arg(QLocale().toString(static_cast<qlonglong>(m.trainable_parameters())))
                       .arg(m.units.size());
    if (m.frozen_parameters > 0)
      text += tr("; %1 frozen (VAE, text encoders)").arg(QLocale().toString(static_cast<qlonglong>(m.frozen_parameters)));
    m_modelInfo->setText(text);
  } catch (const std::exception& e) {
    m_modelInfo->setText(tr("<span style='color:#c0392b'>%1</span>").arg(QString::fromUtf8(e.what()).toHtmlEscaped()));
  }
}

void SetupWizard::updateDatasetInfo() {
  if (!m_datasetInfo) return;
  const bool folder = m_answers["data_source"] == "folder";
  const QString path = qs(m_answers["data_path"]);
  const QString shown = folder ? path : QStringLiteral("<shapes>");
  if (shown == m_datasetShown) return;  // scanning a large folder is not free: only on change
  m_datasetShown = shown;
  m_thumbnails->clear();
  if (!folder) {
    m_datasetInfo->setText(tr("The demo dataset (coloured shapes with captions) is generated into the run folder."));
    m_thumbnails->setVisible(false);
    return;
  }
  m_thumbnails->setVisible(true);
  if (path.isEmpty()) {
    m_datasetInfo->setText(tr("Choose the dataset folder."));
    return;
  }
  m_datasetInfo->setText(tr("Reading %1...").arg(path));
  // The scan and the thumbnails' decoding run off the GUI thread (a large folder takes a while);
  // a result for a path that is no longer the answer is dropped.
  postWork([this, path]() -> std::function<void()> {
    struct Thumb {
      QImage image;
      QString caption;
    };
    try {
      const auto items = data::scan_dataset(path.toStdString());
      const QString text = tr("%1: %n image(s)", nullptr, static_cast<int>(items.size())).arg(datasetLayout(path));
      std::vector<Thumb> thumbs;
      for (std::size_t i = 0; i < items.size() && i < 8; ++i) {
        QString file = qs(items[i].image);
        if (QFileInfo(file).isRelative()) file = QDir(path).filePath(file);
        thumbs.push_back({QImage(file).scaled(96, 96, Qt::KeepAspectRatio, Qt::SmoothTransformation), qs(items[i].caption)});
      }
      return [this, path, text, thumbs] {
        if (path != m_datasetShown) return;
        m_datasetInfo->setText(text);
        for (const auto& t : thumbs) {
          auto* item = new QListWidgetItem(QIcon(QPixmap::fromImage(t.image)), t.caption.left(60), m_thumbnails);
          item->setToolTip(t.caption);
        }
      };
    } catch (const std::exception& e) {
      const QString why = QString::fromUtf8(e.what());
      return [this, path, why] {
        if (path != m_datasetShown) return;
        m_datasetInfo->setText(tr("<span style='color:#c0392b'>%1</span>").arg(why.toHtmlEscaped()));
      };
    }
  });
}

void SetupWizard::updateMemory() {
  if (!m_result) {
    m_fastest.reset();
    m_memory->showUnavailable(tr("The estimate waits until the answers have no problem."));
    m_memory->showFastestUnavailable(tr("The fastest setting waits until the answers have no problem."));
    return;
  }
  const auto& cfg = m_result->config;
  try {
    QString error;
    const models::ModelShape* shape = shapeOf(cfg, &error);
    if (!shape) {
      m_fastest.reset();  // the last model's: never applied to this one
      m_memory->showUnavailable(error.isEmpty() ? tr("Reading the model...") : error);
      m_memory->showFastestUnavailable(error.isEmpty() ? tr("Reading the model...") : error);
      return;
    }
    estimate::EstimateOptions o = estimate::options_from_config(cfg);
    const bool cpu_run = cfg.launch.use_cpu;
    o.cpu_memory = physical_memory_bytes();
    o.gpu_memory = cpu_run ? o.cpu_memory : m_memory->cardBytes();
    m_memory->showEstimate(estimate::estimate_memory(*shape, o), cpu_run);
    // The device depends on the build, the driver and these two answers only: asked again (the
    // driver through nvidia-smi) when one of them changes, not on every answer.
    const int processes = std::max(o.processes_per_machine, 1);
    const QString device_key = QStringLiteral("%1/%2").arg(cpu_run).arg(processes);
    if (device_key != m_deviceKey) {
      m_deviceKey = device_key;
      m_memory->showDevice(QString::fromStdString(doctor::where_it_trains(cfg, processes).text()));
    }
    // The fastest setting for the chosen card (GPU runs: a CPU-only run has no card).
    if (cpu_run) {
      m_fastest.reset();
      m_memory->showFastestUnavailable(tr("The card sizes are for GPU runs: answer no to \"CPU only\" on the "
                                          "Machines page for the fastest setting that fits."));
    } else {
      m_fastest = estimate::fastest_fitting(*shape, o, m_memory->cardBytes(), o.cpu_memory);
      const bool current = m_fastest->found && m_fastest->setting == estimate::setting_of(o);
      m_memory->showFastest(*m_fastest, o.cpu_memory, current);
    }
  } catch (const std::exception& e) {
    m_fastest.reset();
    m_memory->showUnavailable(QString::fromUtf8(e.what()));
    m_memory->showFastestUnavailable(QString::fromUtf8(e.what()));
  }
}

void SetupWizard::applySuggestion(int stage, const QString& offloadOptimizer, const QString& offloadParam) {
  m_answers["use_deepspeed"] = stage > 0 || offloadOptimizer != QLatin1String("none") ? "yes" : "no";
  m_answers["deepspeed_config_file"] = "";
  m_answers["zero_stage"] = std::to_string(stage);
  m_answers["offload_optimizer"] = offloadOptimizer.toStdString();
  m_answers["offload_param"] = offloadParam.toStdString();
  showAnswers();
  refresh();
}

void SetupWizard::applyFastest() {
  if (!m_fastest || !m_fastest->found) return;
  // Through the questions that ask those keys; the rest (cpu_checkpointing) onto the base.
  const std::vector<std::string> rest = config::set_answers_from_settings(m_answers, m_fastest->setting.settings());
  if (!rest.empty()) {
    try {
      m_base = config::to_yaml(config::load_config_string(m_base, "wizard", rest).config);
    } catch (const std::exception& e) {
      QMessageBox::warning(this, tr("Not applied"), QString::fromUtf8(e.what()));
    }
  }
  m_saved = false;
  showAnswers();
  refresh();
}

bool SetupWizard::loadConfig(const QString& path, QString* error) {
  try {
    const config::LoadedConfig loaded = config::load_any_config(path.toStdString());
    m_base = config::to_yaml(loaded.config);
    m_answers = config::answers_from_config(loaded.config);
    showAnswers();
    refresh();
    return true;
  } catch (const config::ConfigError& e) {
    if (error) {
      QStringList lines;
      for (const auto& p : e.problems()) lines << qs(p.to_string());
      *error = lines.join(QLatin1Char('\n'));
    }
  } catch (const std::exception& e) {
    if (error) *error = QString::fromUtf8(e.what());
  }
  return false;
}

void SetupWizard::setAnswer(const QString& id, const QString& value) {
  const auto it = m_widgets.find(id.toStdString());
  if (it == m_widgets.end()) return;
  // A choice the combo does not list now (a model source of another family): answered directly,
  // and the combo's list follows.
  if (auto* combo = qobject_cast<QComboBox*>(it->second); combo && combo->findData(value) < 0) {
    answerChanged(id.toStdString(), value);
    return;
  }
  setWidgetValue(it->second, value);  // emits the widget's change signal like a user edit
  if (widgetValue(it->second) != value) answerChanged(id.toStdString(), value);
}

QString SetupWizard::answer(const QString& id) const {
  const auto it = m_answers.find(id.toStdString());
  return it == m_answers.end() ? QString() : qs(it->second);
}

QWidget* SetupWizard::questionWidget(const QString& id) const {
  const auto it = m_widgets.find(id.toStdString());
  return it == m_widgets.end() ? nullptr : it->second;
}

bool SetupWizard::isAsked(const QString& id) const {
  return config::is_asked(config::setup_question(id.toStdString()), m_answers);
}

QStringList SetupWizard::problemsOnPage(const QString& pageId) const {
  QStringList out;
  for (const auto& q : config::setup_questions()) {
    if (q.page != pageId.toStdString() || !config::is_asked(q, m_answers)) continue;
    const auto it = m_problems.find(q.id);
    if (it == m_problems.end()) continue;
    for (const auto& p : it->second)
      if (!out.contains(p)) out << p;
  }
  return out;
}

QString SetupWizard::currentPageId() const {
  for (const auto& [id, page] : m_pages)
    if (page == currentPage()) return qs(id);
  return QStringLiteral("summary");
}

QString SetupWizard::yamlText() const { return m_yaml->toPlainText(); }

bool SetupWizard::saveTo(const QString& path, bool launchFiles, QString* error) {
  if (!m_result) {
    if (error) *error = tr("The answers have problems: %1").arg(m_summaryProblems->text());
    return false;
  }
  try {
    config::save_config(m_result->config, path.toStdString());
    if (launchFiles) {
      const QFileInfo info(path);
      const QString stem = info.dir().filePath(info.completeBaseName());
      config::write_launch_files(m_result->config, (stem + QStringLiteral(".accelerate.yaml")).toStdString(),
                                 (stem + QStringLiteral(".deepspeed.json")).toStdString());
    }
  } catch (const std::exception& e) {
    if (error) *error = QString::fromUtf8(e.what());
    return false;
  }
  m_saved = true;
  emit configSaved(path);
  return true;
}

void SetupWizard::openExisting() {
  const QString path = QFileDialog::getOpenFileName(this, tr("Open a config"), QString(),
                                                    tr("Configs (*.yaml *.yml *.json);;All files (*)"));
  if (path.isEmpty()) return;
  QString error;
  if (!loadConfig(path, &error)) QMessageBox::warning(this, tr("Cannot open %1").arg(QFileInfo(path).fileName()), error);
}

bool SetupWizard::saveToQueue(const QString& path, bool launchFiles, QString* error) {
  if (!saveTo(path, launchFiles, error)) return false;
  emit queueRequested(path);
  return true;
}

void SetupWizard::saveInteractively(bool toQueue) {
  const QString path = QFileDialog::getSaveFileName(this, tr("Save trainer config"), QStringLiteral("train.yaml"),
                                                    tr("Trainer configs (*.yaml *.yml)"));
  if (path.isEmpty()) return;
  auto* launch = findChild<QCheckBox*>(QStringLiteral("launchFiles"));
  QString error;
  const bool launchFiles = launch && launch->isChecked();
  if (!(toQueue ? saveToQueue(path, launchFiles, &error) : saveTo(path, launchFiles, &error)))
    QMessageBox::warning(this, tr("Not saved"), error);
}

}  // namespace zs::ui
