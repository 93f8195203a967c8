#pragma once
// A run's TensorBoard event file, made from the run's own events: live (rank 0 passes every
// event it writes to events.jsonl) or afterwards (`zerostudio tensorboard` replays
// events.jsonl), so both give the same file.

#include <memory>
#include <string>

#include <nlohmann/json.hpp>

namespace zs::io {
class TfEventWriter;
}

namespace zs::train {

/// Scalars (tags in tensorboard.cpp's table), each sample grid as a PNG image ("samples"), and
/// the resolved config as text ("config").
class TensorBoardLog {
 public:
  /// A new file `out_dir`/events.out.tfevents.<unix time>.<host> for the run in `run_dir` (its
  /// samples and config.yaml are read from there). Throws zs::Error(io) naming the file.
  TensorBoardLog(const std::string& out_dir, const std::string& run_dir);
  ~TensorBoardLog();
  /// What one event became.
  struct Written {
    int scalars = 0, images = 0, texts = 0;
  };
  /// Records what TensorBoard shows of one event; flushes at metrics, validation and the end.
  Written add(const nlohmann::json& event);
  const std::string& path() const;

 private:
  std::string run_dir_;
  std::unique_ptr<io::TfEventWriter> writer_;
};

/// `zerostudio tensorboard`: the event file for a finished or live run, from its events.jsonl
/// and samples, in `out_dir`; returns the file's path and counts the records by kind.
struct TensorBoardExport {
  std::string path;
  TensorBoardLog::Written written;
};
TensorBoardExport write_tensorboard(const std::string& run_dir, const std::string& out_dir);

}  // namespace zs::train
