#include "train/events.h"

#include <chrono>

#include "core/error.h"

namespace zs::train {

double unix_time() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

EventLog::EventLog(const std::string& path, Listener listener) : path_(path), listener_(std::move(listener)) {
  file_ = std::fopen(path.c_str(), "a+");
  if (!file_) throw Error(ErrorKind::io, path + ": cannot open the event log for writing");
  // A process killed in the middle of a line left it unfinished: the next event starts a line.
  const bool unfinished = std::fseek(file_, -1, SEEK_END) == 0 && std::fgetc(file_) != '\n';
  std::fseek(file_, 0, SEEK_END);  // from reading to writing
  if (unfinished) {
    std::fputc('\n', file_);
    std::fflush(file_);
  }
}

EventLog::~EventLog() {
  if (file_) std::fclose(file_);
}

nlohmann::json EventLog::write(const std::string& type, std::int64_t step, const nlohmann::json& fields) {
  nlohmann::json e = {{"type", type}, {"time", unix_time()}, {"step", step}};
  for (const auto& [k, v] : fields.items()) e[k] = v;
  const std::string line = e.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  {
    std::lock_guard<std::mutex> lock(mutex_);
    std::fputs(line.c_str(), file_);
    std::fflush(file_);
  }
  if (listener_) listener_(e);
  return e;
}

}  // namespace zs::train
