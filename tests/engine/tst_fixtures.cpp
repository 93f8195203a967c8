// The shared reference fixtures are found through the path CMake bakes in (not the
// working folder); without them the tests that need them skip, and under CI they fail.
#include <QDir>
#include <QFileInfo>
#include <QtTest>

#include "test_support.h"

class TestFixtures : public QObject {
  Q_OBJECT

 private slots:
  void pathIsBakedInFromTheSourceFolder() {
    QCOMPARE(zs::test::sharedDir(), QDir::cleanPath(zs::test::sourceDir() + "/../shared"));
  }

  void referenceFixturesAreReachable() {
    ZS_REQUIRE_SHARED();
    const QString fixtures = zs::test::sharedDir() + "/fixtures";
    for (const char* file : {"/sd15-tiny/model_index.json", "/sd15-tiny/unet/config.json",
                             "/sd15-tiny-reference/unet_io.safetensors"})
      QVERIFY2(QFileInfo(fixtures + file).isFile(), file);
  }
};

ZS_TEST_MAIN(TestFixtures);
#include "tst_fixtures.moc"
