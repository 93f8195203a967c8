#include "train/control_file.h"

#include <fstream>
#include <limits>
#include <sstream>

#include <nlohmann/json.hpp>

#include "io/atomic_file.h"
#include "io/json_file.h"

namespace zs::train {

namespace fs = std::filesystem;

std::string control_file_path(const std::string& run_dir) { return (fs::path(run_dir) / "control.json").string(); }

ControlState read_control_file(const std::string& run_dir) {
  ControlState s;
  std::ifstream in(control_file_path(run_dir));
  if (!in) return s;
  try {
    const auto j = nlohmann::json::parse(in);
    s.pause = j.value("pause", false);
    s.stop = j.value("stop", false);
    // Integers through io::json_int: a float such as 1e56 is refused (nlohmann would cast it).
    const std::int64_t most = std::numeric_limits<std::int64_t>::max();
    s.sample = io::json_int(j, "sample", 0, 0, most, "control.json");
    s.save = io::json_int(j, "save", 0, 0, most, "control.json");
    s.validate = io::json_int(j, "validate", 0, 0, most, "control.json");
  } catch (const std::exception&) {
    return ControlState{};
  }
  return s;
}

void write_control_file(const std::string& run_dir, const ControlState& s) {
  const nlohmann::json j = {{"pause", s.pause}, {"stop", s.stop}, {"sample", s.sample}, {"save", s.save}, {"validate", s.validate}};
  io::write_file_atomic(control_file_path(run_dir), j.dump() + "\n");
}

ControlFilePoller::ControlFilePoller(std::string run_dir, bool reset) : run_dir_(std::move(run_dir)) {
  // Without a reset the first poll applies whatever the file already asks (the starter reset it
  // and may have written since: a Stop while the model was loading is not lost).
  if (!reset) return;
  write_control_file(run_dir_, seen_);
  std::error_code ec;
  stamp_ = fs::last_write_time(control_file_path(run_dir_), ec);
  size_ = fs::file_size(control_file_path(run_dir_), ec);
}

void ControlFilePoller::poll(TrainerCommands& commands) {
  std::error_code ec;
  const std::string path = control_file_path(run_dir_);
  const auto stamp = fs::last_write_time(path, ec);
  if (ec) return;
  const auto size = fs::file_size(path, ec);
  if (stamp == stamp_ && size == size_) return;
  stamp_ = stamp;
  size_ = size;
  const ControlState now = read_control_file(run_dir_);
  if (now.stop && !seen_.stop) commands.request_stop();
  if (now.pause != seen_.pause) commands.set_paused(now.pause);
  if (now.sample > seen_.sample) commands.request_sample();
  if (now.save > seen_.save) commands.request_save();
  if (now.validate > seen_.validate) commands.request_validate();
  seen_ = now;
}

}  // namespace zs::train
