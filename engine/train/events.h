#pragma once
// events.jsonl: one flat JSON object per line, appended and flushed as they happen.

#include <cstdio>
#include <functional>
#include <mutex>
#include <string>

#include <nlohmann/json.hpp>

namespace zs::train {

class EventLog {
 public:
  using Listener = std::function<void(const nlohmann::json&)>;
  /// Opens `path` for appending (creating it). Throws zs::Error(io) naming the file.
  EventLog(const std::string& path, Listener listener = {});
  ~EventLog();
  EventLog(const EventLog&) = delete;
  EventLog& operator=(const EventLog&) = delete;

  /// Writes {"type": type, "time": now, "step": step, ...fields} as one line and flushes it,
  /// then hands a copy to the listener; returns the event as written. Safe from several threads.
  nlohmann::json write(const std::string& type, std::int64_t step, const nlohmann::json& fields = nlohmann::json::object());
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::FILE* file_ = nullptr;
  Listener listener_;
  std::mutex mutex_;
};

/// Unix time in seconds (with fractions).
double unix_time();

}  // namespace zs::train
