#pragma once
// UI -> run commands through the run directory: `control.json` holds the wanted state
// ({"pause": bool, "stop": bool, "sample": n, "save": n}; sample and save are counters, one
// request per increment). The GUI (or anyone) rewrites it atomically; rank 0 polls it between
// steps and the trainer agrees the result with every rank, so Pause, Stop, Sample now and Save
// now work the same for one rank or many, in-process or started from a terminal.

#include <cstdint>
#include <filesystem>
#include <string>

#include "train/commands.h"

namespace zs::train {

struct ControlState {
  bool pause = false;
  bool stop = false;
  std::int64_t sample = 0;  ///< requests so far
  std::int64_t save = 0;
};

/// `<run_dir>/control.json`.
std::string control_file_path(const std::string& run_dir);
/// The file's state; defaults when it is missing or unreadable (a half-written file is never
/// seen: writers rename a complete file into place).
ControlState read_control_file(const std::string& run_dir);
/// Writes the state atomically. Throws zs::Error(io) naming the file.
void write_control_file(const std::string& run_dir, const ControlState& state);

/// Follows a run's control file and turns changes into TrainerCommands requests.
class ControlFilePoller {
 public:
  /// Resets the file to the default state (a new run, or a resumed one, starts unpaused).
  explicit ControlFilePoller(std::string run_dir);
  /// Re-reads the file when it changed since the last call and applies it to `commands`.
  void poll(TrainerCommands& commands);

 private:
  std::string run_dir_;
  ControlState seen_;
  std::filesystem::file_time_type stamp_{};
  std::uintmax_t size_ = 0;
};

}  // namespace zs::train
