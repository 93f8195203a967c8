#include "screenshot.h"

#include <QCoreApplication>
#include <QDir>
#include <QImage>
#include <QPixmap>
#include <QWidget>

#include "test_support.h"

QString saveScreenshot(QWidget* w, const QString& name) {
  QCoreApplication::processEvents();
  const QImage shot = w->grab().toImage();
  if (shot.isNull()) return name + ": the grab is empty";
  bool drew = false;  // more than one colour, sampled every 5 pixels
  const QRgb first = shot.pixel(0, 0);
  for (int y = 0; y < shot.height() && !drew; y += 5)
    for (int x = 0; x < shot.width() && !drew; x += 5) drew = shot.pixel(x, y) != first;
  if (!drew) return name + ": the grab is one colour";
  const QString dir = zs::test::binaryDir() + "/screenshots";
  QDir().mkpath(dir);
  if (!shot.save(dir + "/" + name + ".png")) return name + ": cannot write " + dir + "/" + name + ".png";
  return QString();
}
