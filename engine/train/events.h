#pragma once
// events.jsonl: one flat JSON object per line, appended and flushed as they happen.

#include <cstdint>
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

  /// Writes {"type": type, "time": now, "step": step, ...fields} as one line (one write(2)), then
  /// hands a copy to the listener; returns the event. Safe from several threads. A line that cannot
  /// be written whole (a full disk past the reserve) leaves no part of it in the file and goes to
  /// stderr instead ("event: ..."; the launcher's log keeps a rank's stderr), counted in lost().
  nlohmann::json write(const std::string& type, std::int64_t step, const nlohmann::json& fields = nlohmann::json::object());
  const std::string& path() const { return path_; }
  /// Events that could not be written to the file.
  std::int64_t lost() const;

  /// Bytes kept allocated past the file's end (fallocate, size unchanged) so that a full disk
  /// still takes the run's last events; renewed whenever less than half of it is left.
  static constexpr std::int64_t kReserveBytes = 64 * 1024;

 private:
  void reserve(std::int64_t size);
  void append(const std::string& text);

  std::string path_;
  int fd_ = -1;
  std::int64_t reserved_to_ = 0;  // allocated up to here (as this process last saw the end)
  std::int64_t lost_ = 0;
  Listener listener_;
  mutable std::mutex mutex_;
};

/// Unix time in seconds (with fractions).
double unix_time();

}  // namespace zs::train
