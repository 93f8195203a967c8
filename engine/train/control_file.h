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
  std::int64_t validate = 0;
};

/// `<run_dir>/control.json`.
std::string control_file_path(const std::string& run_dir);
/// The file's state; defaults when it is missing or unreadable (a half-written file is never
/// seen: writers rename a complete file into place).
ControlState read_control_file(const std::string& run_dir);
/// Writes the state atomically. Throws zs::Error(io) naming the file.
void write_control_file(const std::string& run_dir, const ControlState& state);
/// Writes the default state (no pause, no stop, no requests): what a starting run reads.
inline void reset_control_file(const std::string& run_dir) { write_control_file(run_dir, ControlState{}); }

/// Follows a run's control file and turns changes into TrainerCommands requests.
class ControlFilePoller {
 public:
  /// With `reset`, writes the default state first (a new run, or a resumed one, starts unpaused
  /// and not stopped, whatever an earlier run left there). Without, the starter has reset it
  /// (reset_control_file) and requests made since then are applied at the first poll.
  explicit ControlFilePoller(std::string run_dir, bool reset = true);
  /// Re-reads the file when it changed since the last call and applies it to `commands`.
  void poll(TrainerCommands& commands);

 private:
  std::string run_dir_;
  ControlState seen_;
  std::filesystem::file_time_type stamp_{};
  std::uintmax_t size_ = 0;
};

}  // namespace zs::train
