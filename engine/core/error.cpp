#include "core/error.h"

#include "core/text.h"

namespace zs {

std::string_view to_string(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::config: return "config";
    case ErrorKind::io: return "io";
    case ErrorKind::checkpoint: return "checkpoint";
    case ErrorKind::data: return "data";
    case ErrorKind::distributed: return "distributed";
  }
  return "unknown";
}

// Messages quote file names and contents: whatever bytes those hold, the message is printable.
Error::Error(ErrorKind kind, const std::string& message) : std::runtime_error(printable(message)), kind_(kind) {}

}  // namespace zs
