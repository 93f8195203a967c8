#include "test_support.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>

#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QtTest>

namespace zs::test {

QString sharedDir() { return QDir::cleanPath(QStringLiteral(ZS_SHARED_DIR)); }
bool sharedAvailable() { return QFileInfo(sharedDir() + QStringLiteral("/fixtures")).isDir(); }
std::string fixture(const QString& rel) { return (sharedDir() + QStringLiteral("/fixtures/") + rel).toStdString(); }
QString testDataDir() { return QStringLiteral(ZS_TEST_DATA_DIR); }
QString sourceDir() { return QStringLiteral(ZS_SOURCE_DIR); }
QString peerFixture(const QString& rel) { return sourceDir() + QStringLiteral("/tests/fixtures/") + rel; }
QString binaryDir() { return QStringLiteral(ZS_BINARY_DIR); }
QString quickstart() { return sourceDir() + QStringLiteral("/configs/quickstart.yaml"); }
QString cliPath() { return QStringLiteral(ZS_CLI_PATH); }
QString distWorkerPath() { return QStringLiteral(ZS_DIST_WORKER); }

int freePort() {
  const int s = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;  // the kernel picks one
  ::bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  ::getsockname(s, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(s);
  return ntohs(a.sin_port);
}

namespace {
std::map<std::string, TestFactory>& registry() {
  static std::map<std::string, TestFactory> tests;  // filled by static initialisers
  return tests;
}
}  // namespace

bool registerTest(const char* file, TestFactory make) {
  const QString stem = QFileInfo(QString::fromUtf8(file)).completeBaseName();
  return registry().emplace(stem.toStdString(), make).second;
}

std::unique_ptr<QObject> makeTest(const std::string& name) {
  const auto it = registry().find(name);
  return it == registry().end() ? nullptr : it->second();
}

namespace {

/// tmpfs's options for a disk of `bytes` (whole pages).
QByteArray tmpfs_options(qint64 bytes) { return "size=" + QByteArray::number((bytes + 4095) / 4096 * 4096) + ",mode=0755"; }

}  // namespace

SmallDisk::SmallDisk(const QString& dir, qint64 bytes) : m_dir(dir.toUtf8()) {
  QDir().mkpath(dir);
  m_mounted = ::mount("tmpfs", m_dir.constData(), "tmpfs", 0, tmpfs_options(bytes).constData()) == 0;
  if (!m_mounted) m_why = QString("cannot mount a tmpfs on %1 (%2): needs root").arg(dir, std::strerror(errno));
}

SmallDisk::~SmallDisk() {
  if (m_mounted) ::umount2(m_dir.constData(), MNT_DETACH);
}

bool SmallDisk::resize(qint64 bytes) const {
  return m_mounted && ::mount("tmpfs", m_dir.constData(), "tmpfs", MS_REMOUNT, tmpfs_options(bytes).constData()) == 0;
}

void SmallDisk::fill() const {
  const int fd = ::open((m_dir + "/filler").constData(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  if (fd < 0) return;
  const std::string block(512, 'x');
  while (::write(fd, block.data(), block.size()) > 0) {
  }
  ::close(fd);
}

bool rowInThisPart() {
  static const auto part = []() -> std::pair<int, int> {
    const QByteArray v = qgetenv("ZS_TEST_PART");
    const int slash = v.indexOf('/');
    if (slash <= 0) return {0, 1};
    const int k = v.left(slash).toInt(), n = v.mid(slash + 1).toInt();
    return k >= 1 && n >= k ? std::pair{k - 1, n} : std::pair{0, 1};
  }();
  static std::map<std::string, int> rows;  // rows seen per test function
  const int i = rows[QTest::currentTestFunction() ? QTest::currentTestFunction() : ""]++;
  return i % part.second == part.first;
}

QStringList registeredTests() {
  QStringList names;
  for (const auto& entry : registry()) names << QString::fromStdString(entry.first);
  return names;
}

void FailureReport::setOutput(const QString& label, const QString& text) {
  const qsizetype i = m_labels.indexOf(label);
  if (i >= 0) {
    m_outputs[i] = text;
    return;
  }
  m_labels << label;
  m_outputs << text;
}

FailureReport::~FailureReport() {
  if (!QTest::currentTestFailed()) return;
  auto print = [](const QString& title, const QByteArray& body) {
    std::fprintf(stderr, "----- %s -----\n%s%s", qPrintable(title), body.constData(), body.endsWith('\n') ? "" : "\n");
  };
  for (qsizetype i = 0; i < m_labels.size(); ++i) print(m_labels[i], m_outputs[i].toUtf8());
  for (const QString& run : m_runs) {
    const QDir logs(run + QStringLiteral("/logs"));
    for (const QString& name : logs.entryList({QStringLiteral("*.log")}, QDir::Files, QDir::Name)) {
      QFile f(logs.filePath(name));
      if (f.open(QIODevice::ReadOnly)) print(f.fileName(), f.readAll());
    }
    QFile events(run + QStringLiteral("/events.jsonl"));
    if (events.open(QIODevice::ReadOnly)) {
      const QByteArray all = events.readAll();
      print(events.fileName() + QStringLiteral(" (last 4 KB)"), all.right(4096));
    }
  }
  std::fflush(stderr);
}

}  // namespace zs::test
