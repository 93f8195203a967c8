#include "test_support.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <QDir>
#include <QFileInfo>

namespace zs::test {

QString sharedDir() { return QDir::cleanPath(QStringLiteral(ZS_SHARED_DIR)); }
bool sharedAvailable() { return QFileInfo(sharedDir() + QStringLiteral("/fixtures")).isDir(); }
QString testDataDir() { return QStringLiteral(ZS_TEST_DATA_DIR); }
QString sourceDir() { return QStringLiteral(ZS_SOURCE_DIR); }
QString binaryDir() { return QStringLiteral(ZS_BINARY_DIR); }

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

}  // namespace zs::test
