#include "main_window.h"

#include <QApplication>
#include <QFileDialog>
#include <QFileInfo>
#include <QLabel>
#include <QMenuBar>
#include <QMessageBox>
#include <QPlainTextEdit>
#include <QSplitter>
#include <QStatusBar>
#include <qcustomplot.h>

#include "config/config_loader.h"
#include "config/config_writer.h"
#include "setup_wizard.h"

namespace zs::ui {

MainWindow::MainWindow(QWidget* parent) : QMainWindow(parent) {
  setWindowTitle(QStringLiteral("ZeroStudio"));
  resize(1100, 700);

  auto* splitter = new QSplitter(this);
  m_configView = new QPlainTextEdit(splitter);
  m_configView->setReadOnly(true);
  m_configView->setPlaceholderText(tr("Open a trainer config (File > Open Config...)"));
  QFont mono(QStringLiteral("Monospace"));
  mono.setStyleHint(QFont::TypeWriter);
  m_configView->setFont(mono);

  m_lossPlot = new QCustomPlot(splitter);
  m_lossPlot->plotLayout()->insertRow(0);
  m_lossPlot->plotLayout()->addElement(0, 0, new QCPTextElement(m_lossPlot, tr("Loss (no run yet)")));
  m_lossPlot->addGraph();
  m_lossPlot->xAxis->setLabel(tr("step"));
  m_lossPlot->yAxis->setLabel(tr("loss"));
  splitter->setStretchFactor(1, 1);
  setCentralWidget(splitter);

  auto* file = menuBar()->addMenu(tr("&File"));
  QAction* wizard = file->addAction(tr("&New Config..."), QKeySequence::New, this, &MainWindow::newConfig);
  wizard->setObjectName(QStringLiteral("newConfig"));
  file->addAction(tr("&Open Config..."), QKeySequence::Open, this, &MainWindow::chooseConfig);
  file->addSeparator();
  file->addAction(tr("&Quit"), QKeySequence::Quit, qApp, &QApplication::quit);
  auto* help = menuBar()->addMenu(tr("&Help"));
  help->addAction(tr("&About ZeroStudio"), this, &MainWindow::showAbout);

  m_status = new QLabel(tr("No config open"), this);
  statusBar()->addWidget(m_status, 1);
}

bool MainWindow::openConfig(const QString& path) {
  bool valid = false;
  try {
    const auto loaded = config::load_config_file(path.toStdString());
    m_configView->setPlainText(QString::fromStdString(config::to_yaml(loaded.config)));
    m_status->setText(tr("%1: valid").arg(QFileInfo(path).fileName()));
    valid = true;
  } catch (const config::ConfigError& e) {
    QString text;
    for (const auto& p : e.problems()) text += QString::fromStdString(p.to_string()) + QLatin1Char('\n');
    m_configView->setPlainText(text);
    m_status->setText(tr("%1: %n problem(s)", nullptr, static_cast<int>(e.problems().size()))
                          .arg(QFileInfo(path).fileName()));
  } catch (const std::exception& e) {
    m_configView->setPlainText(QString::fromStdString(e.what()));
    m_status->setText(tr("%1: cannot be read").arg(QFileInfo(path).fileName()));
  }
  setWindowTitle(tr("%1 - ZeroStudio").arg(QFileInfo(path).fileName()));
  if (valid) m_configPath = path;
  emit configOpened(path, valid);
  return valid;
}

QString MainWindow::configText() const { return m_configView->toPlainText(); }

QString MainWindow::statusText() const { return m_status->text(); }

SetupWizard* MainWindow::newConfig() {
  auto* wizard = new SetupWizard(this);
  wizard->setAttribute(Qt::WA_DeleteOnClose);
  if (!m_configPath.isEmpty()) wizard->loadConfig(m_configPath);
  connect(wizard, &SetupWizard::configSaved, this, [this](const QString& path) { openConfig(path); });
  wizard->show();
  return wizard;
}

void MainWindow::chooseConfig() {
  const QString path = QFileDialog::getOpenFileName(this, tr("Open Trainer Config"), QString(),
                                                    tr("Trainer configs (*.yaml *.yml)"));
  if (!path.isEmpty()) openConfig(path);
}

void MainWindow::showAbout() {
  QMessageBox::about(this, tr("About ZeroStudio"),
                     tr("ZeroStudio %1\nTraining studio for diffusion models with ZeRO sharding "
                        "and CPU/NVMe offload.")
                         .arg(QStringLiteral(ZS_VERSION)));
}

}  // namespace zs::ui
