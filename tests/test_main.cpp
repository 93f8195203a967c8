// The main of a test suite: `SUITE NAME [Qt Test arguments]` runs the test class registered as
// NAME (ZS_TEST_MAIN in tests/*/NAME.cpp), as QTEST_MAIN would: the application object first
// (QApplication where the suite links Qt Widgets), 96 DPI, then the test object.
#include <cstdio>
#include <vector>

#include <QTemporaryDir>
#include <QtTest>
#ifdef QT_WIDGETS_LIB
#include <QApplication>
#endif

#include "test_support.h"

int main(int argc, char** argv) {
  if (argc < 2 || argv[1][0] == '-') {
    std::fprintf(stderr, "usage: %s TEST [Qt Test arguments]\ntests: %s\n", argv[0],
                 qPrintable(zs::test::registeredTests().join(' ')));
    return 2;
  }
  const std::string name = argv[1];
  std::vector<char*> args{argv[0]};
  args.insert(args.end(), argv + 2, argv + argc);
  args.push_back(nullptr);
  int count = argc - 1;
  // Settings, the job queue and recent runs go to a folder of the suite's own, never the user's.
  QTemporaryDir configHome;
  qputenv("XDG_CONFIG_HOME", configHome.path().toUtf8());
#ifdef QT_WIDGETS_LIB
  QApplication app(count, args.data());
#else
  QCoreApplication app(count, args.data());
#endif
  app.setAttribute(Qt::AA_Use96Dpi, true);
  const std::unique_ptr<QObject> test = zs::test::makeTest(name);
  if (!test) {
    std::fprintf(stderr, "%s: no test %s; tests: %s\n", argv[0], name.c_str(),
                 qPrintable(zs::test::registeredTests().join(' ')));
    return 2;
  }
  return QTest::qExec(test.get(), count, args.data());
}
