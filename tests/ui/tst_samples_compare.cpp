// Samples compared (issue 40): the Samples tab's strip (one prompt at every sampled step), the
// step and run comparisons, the zoomed view and "Open file", against run folders written here the
// way the image logger writes them (samples/step_<N>/NNN.png, grid.png, prompts.json). What is
// shown is compared with the files: the count, the order, and every pixel of a shown image.
#include <QAbstractScrollArea>
#include <QCoreApplication>
#include <QDir>
#include <QFile>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QMenu>
#include <QPainter>
#include <QPushButton>
#include <QScrollArea>
#include <QSettings>
#include <QTemporaryDir>
#include <QWheelEvent>
#include <QtTest>

#include "main_window.h"
#include "run_controller.h"
#include "sample_compare.h"
#include "sample_gallery.h"
#include "sample_strip.h"
#include "sample_tile.h"
#include "scripted_run.h"
#include "screenshot.h"
#include "test_support.h"
#include "zoom_view.h"

using namespace zs::ui;

namespace samples_compare_test {

// Two prompts, two images each (sampling.images_per_prompt: 2), as prompts.json lists them.
const QStringList kPrompts = {"a red circle", "a red circle", "a blue square", "a blue square"};
// Another run with the prompts the other way round: the comparison must match by prompt.
const QStringList kPromptsSwapped = {"a blue square", "a blue square", "a red circle", "a red circle"};

// A 48×40 picture that differs per step, prompt and image, and per pixel (noise that fades as the
// steps go on, a shape that grows), so a wrong file or a wrong pixel shows.
QImage picture(int step, int image, const QString& prompt, int variant = 0) {
  QImage img(48, 40, QImage::Format_RGB32);
  const bool red = prompt.contains("red");
  const int amplitude = std::max(12, 140 - step * 3);
  for (int y = 0; y < img.height(); ++y)
    for (int x = 0; x < img.width(); ++x) {
      quint32 h = static_cast<quint32>(x) * 73856093u ^ static_cast<quint32>(y) * 19349663u ^
                  static_cast<quint32>(step) * 83492791u ^ static_cast<quint32>(image + 1) * 2654435761u ^
                  static_cast<quint32>(variant) * 40503u;
      h ^= h >> 13;
      h *= 0x5bd1e995u;
      h ^= h >> 15;
      const int n = static_cast<int>(h % static_cast<quint32>(amplitude)) - amplitude / 2;
      img.setPixel(x, y, qRgb(std::clamp(40 + n, 0, 255), std::clamp(44 + n + image * 9, 0, 255), std::clamp(52 + n, 0, 255)));
    }
  QPainter p(&img);
  const int r = 4 + step / 4;
  p.setPen(Qt::NoPen);
  p.setBrush(red ? QColor(220, 40, 30) : QColor(40, 80, 230));
  if (red)
    p.drawEllipse(QPoint(24, 20), r, r);
  else
    p.drawRect(24 - r, 20 - r, 2 * r, 2 * r);
  return img;
}

// samples/step_<N>/ written as engine/train/image_logger.cpp does (a temporary folder renamed into
// place), then its samples event.
void writeStep(ScriptedRun& run, const QString& runDir, int step, const QStringList& prompts, int variant = 0) {
  const QString final = runDir + QString("/samples/step_%1").arg(step);
  const QString tmp = runDir + QString("/samples/.step_%1.tmp").arg(step);
  QDir().mkpath(tmp);
  QJsonArray listing;
  QImage grid(48 * 2, 40 * 2, QImage::Format_RGB32);
  QPainter g(&grid);
  for (int i = 0; i < prompts.size(); ++i) {
    const QString name = QString("%1.png").arg(i, 3, 10, QChar('0'));
    const QImage img = picture(step, i, prompts[i], variant);
    img.save(tmp + "/" + name);
    g.drawImage((i % 2) * 48, (i / 2) * 40, img);
    listing.append(QJsonObject{{"file", name}, {"prompt", prompts[i]}, {"seed", 42 + i}});
  }
  g.end();
  grid.save(tmp + "/grid.png");
  QFile json(tmp + "/prompts.json");
  if (json.open(QIODevice::WriteOnly)) json.write(QJsonDocument(listing).toJson(QJsonDocument::Indented));
  json.close();
  QDir().rename(tmp, final);
  run.line(QString::fromUtf8(
      QJsonDocument(QJsonObject{{"type", "samples"}, {"step", step}, {"time", 1}, {"dir", final}, {"count", prompts.size()}})
          .toJson(QJsonDocument::Compact)));
}

// A run folder with sample steps `steps` (in this order in events.jsonl); live unless `finished`.
void makeRun(const QString& dir, const QList<int>& steps, const QStringList& prompts, bool finished) {
  ScriptedRun run(dir);
  run.start(1, 100);
  for (int s : steps) {
    run.metrics(s, 1);
    writeStep(run, dir, s, prompts);
  }
  if (finished) run.end(steps.isEmpty() ? 0 : steps.back(), "finished");
}

QString png(const QString& runDir, int step, int image) {
  return QDir::cleanPath(runDir) + QString("/samples/step_%1/%2.png").arg(step).arg(image, 3, 10, QChar('0'));
}

// "" when `shown` is the file's pixels enlarged by a whole factor k (each file pixel a k×k block
// of the same colour; k = 1: the same image), else what differs.
QString compareShown(const QImage& shownImage, const QString& file) {
  const QImage src = QImage(file).convertToFormat(QImage::Format_RGB32);
  const QImage shown = shownImage.convertToFormat(QImage::Format_RGB32);
  if (src.isNull()) return "cannot read " + file;
  if (shown.isNull()) return "nothing shown for " + file;
  const int k = shown.width() / src.width();
  if (k < 1 || shown.size() != src.size() * k)
    return QString("shown %1×%2 is not a whole multiple of %3×%4").arg(shown.width()).arg(shown.height()).arg(src.width()).arg(src.height());
  for (int y = 0; y < shown.height(); ++y)
    for (int x = 0; x < shown.width(); ++x)
      if (shown.pixel(x, y) != src.pixel(x / k, y / k))
        return QString("pixel (%1,%2) at %3× differs from %4's (%5,%6)").arg(x).arg(y).arg(k).arg(file).arg(x / k).arg(y / k);
  return {};
}

ZoomView* zoomOf(QWidget* dialog) { return dialog ? dialog->findChild<ZoomView*>() : nullptr; }

}  // namespace samples_compare_test

using namespace samples_compare_test;

class TestSamplesCompare : public QObject {
  Q_OBJECT

 private slots:
  void initTestCase() { QCoreApplication::setOrganizationName("ZeroStudioTests"); }
  void init() { QSettings().remove("recentRuns"); }

  // One prompt at every sampled step, in step order (events.jsonl lists them out of order here),
  // each captioned with its step and showing that step's file, pixel for pixel.
  void stripShowsOnePromptAtEveryStepInOrder() {
    QTemporaryDir tmp;
    const QString dir = tmp.path() + "/run";
    makeRun(dir, {20, 10, 30}, kPrompts, true);
    MainWindow w;
    w.resize(1100, 720);
    w.show();
    QVERIFY(QTest::qWaitForWindowExposed(&w));
    QVERIFY(w.openRun(dir));
    w.tabs()->setCurrentWidget(w.gallery());
    w.gallery()->setMode(SampleGallery::Mode::strip);
    SampleStrip* strip = w.gallery()->strip();
    QVERIFY(strip->isVisible());
    QStringList labels;
    for (const auto& slot : strip->promptSlots()) labels << slot.label();
    QCOMPARE(labels, (QStringList{"a red circle", "a red circle (2)", "a blue square", "a blue square (2)"}));
    strip->setPromptIndex(3);  // the blue square's second image: 003.png of every step
    QCOMPARE(strip->count(), 3);
    QCOMPARE(strip->steps(), (QList<qint64>{10, 20, 30}));
    QCOMPARE(strip->imagePaths(), (QStringList{png(dir, 10, 3), png(dir, 20, 3), png(dir, 30, 3)}));
    for (int i = 0; i < strip->count(); ++i) {
      QCOMPARE(strip->tile(i)->caption(), QString("step %1").arg(strip->steps()[i]));
      const QString why = compareShown(strip->tile(i)->shownImage(), strip->imagePaths()[i]);
      QVERIFY2(why.isEmpty(), qPrintable(why));
    }
    QCOMPARE(strip->tile(0)->displayScale(), 4.0);  // 48 px in 192: four screen pixels per pixel
    // Another prompt: other files, still one per step.
    strip->setPromptIndex(0);
    QCOMPARE(strip->imagePaths(), (QStringList{png(dir, 10, 0), png(dir, 20, 0), png(dir, 30, 0)}));
    const QString why = compareShown(strip->tile(2)->shownImage(), png(dir, 30, 0));
    QVERIFY2(why.isEmpty(), qPrintable(why));
    QVERIFY(!compareShown(strip->tile(2)->shownImage(), png(dir, 30, 1)).isEmpty());  // the check tells files apart
    ZS_SAVE_SCREENSHOT(&w, "samples_strip");
  }

  // A step the run writes while the strip is open appears at its end; the tiles already shown stay.
  void stripFollowsALiveRun() {
    QTemporaryDir tmp;
    const QString dir = tmp.path() + "/live";
    makeRun(dir, {10, 20}, kPrompts, false);
    MainWindow w;
    w.show();
    QVERIFY(QTest::qWaitForWindowExposed(&w));
    QVERIFY(w.openRun(dir));
    QCOMPARE(w.controller()->state(), RunState::running);
    w.tabs()->setCurrentWidget(w.gallery());
    w.gallery()->setMode(SampleGallery::Mode::strip);
    SampleStrip* strip = w.gallery()->strip();
    strip->setPromptIndex(2);
    QCOMPARE(strip->count(), 2);
    SampleTile* first = strip->tile(0);
    ScriptedRun run(dir);
    run.metrics(30, 1);
    writeStep(run, dir, 30, kPrompts);
    QTRY_COMPARE_WITH_TIMEOUT(strip->count(), 3, 5000);  // the controller's timer reads the event
    QCOMPARE(strip->steps(), (QList<qint64>{10, 20, 30}));
    QCOMPARE(strip->imagePaths().last(), png(dir, 30, 2));
    const QString why = compareShown(strip->tile(2)->shownImage(), png(dir, 30, 2));
    QVERIFY2(why.isEmpty(), qPrintable(why));
    QCOMPARE(strip->tile(0), first);  // appended, not rebuilt
    QCOMPARE(w.gallery()->currentStep(), qint64{30});  // the grid followed too
  }

  // A step sampled again under its number (a run resumed from a checkpoint before it) shows its
  // new images in the strip and the grid, not the ones read before.
  void aResampledStepShowsItsNewImages() {
    QTemporaryDir tmp;
    const QString dir = tmp.path() + "/live";
    makeRun(dir, {10, 20}, kPrompts, false);
    MainWindow w;
    w.show();
    QVERIFY(QTest::qWaitForWindowExposed(&w));
    QVERIFY(w.openRun(dir));
    w.tabs()->setCurrentWidget(w.gallery());
    w.gallery()->setMode(SampleGallery::Mode::strip);
    SampleStrip* strip = w.gallery()->strip();
    strip->setPromptIndex(2);
    QCOMPARE(strip->count(), 2);
    const QImage before = strip->tile(1)->shownImage();
    QVERIFY(QDir(dir + "/samples/step_20").removeRecursively());
    QTest::qWait(20);  // (a new modification time, even on coarse clocks)
    ScriptedRun run(dir);
    writeStep(run, dir, 20, kPrompts, /*variant=*/1);
    QTRY_VERIFY_WITH_TIMEOUT(strip->count() == 2 && strip->tile(1)->shownImage() != before, 5000);
    QString why = compareShown(strip->tile(1)->shownImage(), png(dir, 20, 2));
    QVERIFY2(why.isEmpty(), qPrintable(why));
    w.gallery()->setMode(SampleGallery::Mode::grid);
    w.gallery()->showStepIndex(1);
    QCOMPARE(w.gallery()->currentStep(), qint64{20});
    why = compareShown(w.gallery()->gridTile(2)->shownImage(), png(dir, 20, 2));
    QVERIFY2(why.isEmpty(), qPrintable(why));
  }

  // Two steps of this run side by side: every image of each step, then one prompt of each.
  void compareStepsShowsTheTwoChosenSteps() {
    QTemporaryDir tmp;
    const QString dir = tmp.path() + "/run";
    makeRun(dir, {10, 20, 30}, kPrompts, true);
    MainWindow w;
    w.resize(1100, 720);
    w.show();
    QVERIFY(QTest::qWaitForWindowExposed(&w));
    QVERIFY(w.openRun(dir));
    w.tabs()->setCurrentWidget(w.gallery());
    w.gallery()->setMode(SampleGallery::Mode::compareSteps);
    SampleCompare* c = w.gallery()->stepComparison();
    QCOMPARE(c->steps(0), (QList<qint64>{10, 20, 30}));
    QCOMPARE(c->step(0), qint64{10});  // the oldest against the newest at first
    QCOMPARE(c->step(1), qint64{30});
    c->setStep(0, 19);  // the nearest step there is
    QCOMPARE(c->step(0), qint64{20});
    QCOMPARE(c->paths(0), (QStringList{png(dir, 20, 0), png(dir, 20, 1), png(dir, 20, 2), png(dir, 20, 3)}));
    QCOMPARE(c->paths(1), (QStringList{png(dir, 30, 0), png(dir, 30, 1), png(dir, 30, 2), png(dir, 30, 3)}));
    QCOMPARE(c->tile(0, 2)->caption(), QString("a blue square"));
    for (int side = 0; side < 2; ++side)
      for (int i = 0; i < c->tileCount(side); ++i) {
        const QString why = compareShown(c->tile(side, i)->shownImage(), c->paths(side)[i]);
        QVERIFY2(why.isEmpty(), qPrintable(why));
      }
    ZS_SAVE_SCREENSHOT(&w, "samples_compare_steps");
    c->setPromptIndex(2);  // "a blue square"
    QCOMPARE(c->paths(0), QStringList{png(dir, 20, 2)});
    QCOMPARE(c->paths(1), QStringList{png(dir, 30, 2)});
    QCOMPARE(c->tile(1, 0)->displayScale(), 8.0);  // one prompt: shown larger
    for (int side = 0; side < 2; ++side) {
      const QString why = compareShown(c->tile(side, 0)->shownImage(), c->paths(side)[0]);
      QVERIFY2(why.isEmpty(), qPrintable(why));
    }
    QVERIFY(c->message().isEmpty());
  }

  // The same prompt in this run and another (from Recent Runs, read from its folder), at the step
  // nearest to this run's; a step picked for the other side stays; a folder without samples says so.
  void compareRunsShowsTheOtherRunsImageOfTheSamePrompt() {
    QTemporaryDir tmp;
    const QString mine = tmp.path() + "/mine";
    const QString other = tmp.path() + "/other";
    makeRun(mine, {10, 20, 30}, kPrompts, false);
    makeRun(other, {12, 22, 33}, kPromptsSwapped, true);
    QDir().mkpath(tmp.path() + "/empty/samples");
    MainWindow w;
    w.resize(1100, 720);
    w.show();
    QVERIFY(QTest::qWaitForWindowExposed(&w));
    QVERIFY(w.openRun(other));
    QVERIFY(w.openRun(mine));
    SampleCompare* c = w.gallery()->runComparison();
    QCOMPARE(c->otherRunChoices(), QStringList{QDir::cleanPath(other)});  // Recent Runs without this run
    w.tabs()->setCurrentWidget(w.gallery());
    w.gallery()->showStepIndex(1);  // the grid shows step 20
    w.gallery()->setMode(SampleGallery::Mode::compareRuns);
    QCOMPARE(c->otherRun(), QDir::cleanPath(other));  // the newest other run, picked at first
    QCOMPARE(c->step(0), qint64{20});                 // the grid's step
    QCOMPARE(c->step(1), qint64{22});                 // the other run's nearest
    QCOMPARE(c->steps(1), (QList<qint64>{12, 22, 33}));
    c->setPromptIndex(2);  // "a blue square": 002.png here, 000.png there
    QCOMPARE(c->paths(0), QStringList{png(mine, 20, 2)});
    QCOMPARE(c->paths(1), QStringList{png(other, 22, 0)});
    for (int side = 0; side < 2; ++side) {
      const QString why = compareShown(c->tile(side, 0)->shownImage(), c->paths(side)[0]);
      QVERIFY2(why.isEmpty(), qPrintable(why));
    }
    QVERIFY(c->message().isEmpty());
    ZS_SAVE_SCREENSHOT(&w, "samples_compare_runs");
    c->setStep(0, 30);
    QCOMPARE(c->step(1), qint64{33});
    QCOMPARE(c->paths(1), QStringList{png(other, 33, 0)});
    c->setStep(1, 12);  // picked by hand: kept
    QCOMPARE(c->paths(0), QStringList{png(mine, 30, 2)});
    QCOMPARE(c->paths(1), QStringList{png(other, 12, 0)});
    const QString why = compareShown(c->tile(1, 0)->shownImage(), png(other, 12, 0));
    QVERIFY2(why.isEmpty(), qPrintable(why));
    // Browse… to a folder without samples: nothing on the right, and the message says where it looked.
    QVERIFY(!c->setOtherRun(tmp.path() + "/empty"));
    QCOMPARE(c->tileCount(1), 0);
    QVERIFY2(c->message().contains("No samples in") && c->message().contains("empty"), qPrintable(c->message()));
    QVERIFY(c->otherRunChoices().contains(QDir::cleanPath(tmp.path() + "/empty")));
    QVERIFY(c->setOtherRun(other));
    QCOMPARE(c->paths(1), QStringList{png(other, 33, 0)});  // nearest to this run's step 30 again
  }

  // The enlarged view: 4× is four screen pixels per image pixel, 1:1 is the file itself, Ctrl+wheel
  // zooms; Open file (button, context menu) hands the PNG's URL to the opener.
  void zoomShowsSharpPixelsAndOpensTheFile() {
    QTemporaryDir tmp;
    const QString dir = tmp.path() + "/run";
    makeRun(dir, {10, 20}, kPrompts, true);
    MainWindow w;
    w.show();
    QVERIFY(QTest::qWaitForWindowExposed(&w));
    QVERIFY(w.openRun(dir));
    QList<QUrl> opened;
    w.gallery()->setUrlOpener([&opened](const QUrl& url) {
      opened << url;
      return true;
    });
    w.tabs()->setCurrentWidget(w.gallery());
    QCOMPARE(w.gallery()->currentStep(), qint64{20});
    QWidget* dialog = w.gallery()->enlarge(1);
    ZoomView* zoom = zoomOf(dialog);
    QVERIFY(zoom);
    QVERIFY(QTest::qWaitForWindowExposed(dialog));
    const QString file = png(dir, 20, 1);
    QCOMPARE(zoom->path(), file);
    const QImage src = QImage(file).convertToFormat(QImage::Format_RGB32);
    zoom->setZoom(4);
    QImage shown = zoom->shownImage().convertToFormat(QImage::Format_RGB32);
    QCOMPARE(shown.size(), src.size() * 4);
    for (int y = 0; y < src.height(); ++y)
      for (int x = 0; x < src.width(); ++x)
        QVERIFY2(shown.pixel(4 * x + 1, 4 * y + 1) == src.pixel(x, y), qPrintable(QString("(%1,%2)").arg(x).arg(y)));
    QString why = compareShown(shown, file);  // every pixel of each 4×4 block
    QVERIFY2(why.isEmpty(), qPrintable(why));
    zoom->setZoom(1);
    QCOMPARE(zoom->shownImage().convertToFormat(QImage::Format_RGB32), src);
    zoom->setZoom(0);  // fit: a whole factor for an image smaller than the view
    QVERIFY2(zoom->effectiveZoom() >= 2 && zoom->effectiveZoom() == std::floor(zoom->effectiveZoom()),
             qPrintable(QString::number(zoom->effectiveZoom())));
    why = compareShown(zoom->shownImage(), file);
    QVERIFY2(why.isEmpty(), qPrintable(why));
    // Ctrl+wheel over the image: 1:1 → 2× → 4×, back down to 2×.
    zoom->setZoom(1);
    QWidget* viewport = zoom->findChild<QScrollArea*>()->viewport();
    const auto wheel = [viewport](int delta) {
      QWheelEvent e(QPointF(5, 5), viewport->mapToGlobal(QPointF(5, 5)), QPoint(), QPoint(0, delta), Qt::NoButton,
                    Qt::ControlModifier, Qt::NoScrollPhase, false);
      QCoreApplication::sendEvent(viewport, &e);
    };
    wheel(120);
    QCOMPARE(zoom->zoom(), 2.0);
    wheel(120);
    QCOMPARE(zoom->zoom(), 4.0);
    wheel(-120);
    QCOMPARE(zoom->zoom(), 2.0);
    QCOMPARE(zoom->shownImage().size(), src.size() * 2);
    zoom->setZoom(8);
    ZS_SAVE_SCREENSHOT(dialog, "samples_zoom");
    // Open file from the enlarged view.
    auto* open = zoom->findChild<QPushButton*>("openFile");
    QVERIFY(open);
    open->click();
    QCOMPARE(opened, QList<QUrl>{QUrl::fromLocalFile(file)});
    dialog->close();
    // …and from an image's context menu in the strip; its Enlarge opens that file zoomable.
    w.gallery()->setMode(SampleGallery::Mode::strip);
    SampleTile* tile = w.gallery()->strip()->tile(0);
    QVERIFY(tile);
    std::unique_ptr<QMenu> menu(tile->createContextMenu(nullptr));
    auto* openAction = menu->findChild<QAction*>("openFile");
    QVERIFY(openAction && openAction->isEnabled());
    openAction->trigger();
    QCOMPARE(opened.size(), 2);
    QCOMPARE(opened.last(), QUrl::fromLocalFile(png(dir, 10, 0)));
    menu->findChild<QAction*>("openFolder")->trigger();
    QCOMPARE(opened.last(), QUrl::fromLocalFile(QDir::cleanPath(dir) + "/samples/step_10"));
    // A click on an image enlarges it.
    QTest::mouseClick(tile, Qt::LeftButton);
    QDialog* big = nullptr;
    for (auto* d : w.gallery()->findChildren<QDialog*>("sampleZoom"))
      if (d->isVisible()) big = d;
    QVERIFY(big);
    QCOMPARE(zoomOf(big)->path(), png(dir, 10, 0));
    QVERIFY(big->windowTitle().contains("step 10"));
    big->close();
  }
};

ZS_TEST_MAIN(TestSamplesCompare);
#include "tst_samples_compare.moc"
