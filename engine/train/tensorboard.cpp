#include "train/tensorboard.h"

#include "train/event_types.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "io/atomic_file.h"
#include "io/tfevents.h"

namespace zs::train {

namespace fs = std::filesystem;

namespace {

/// metrics fields -> scalar tags.
const std::pair<const char*, const char*> kScalars[] = {
    {event::loss, "train/loss"},           {event::loss_smoothed, "train/loss_smoothed"}, {event::lr, "train/lr"},
    {event::grad_norm, "train/grad_norm"}, {event::samples_per_s, "train/samples_per_s"},
    {event::s_per_step, "train/s_per_step"}, {event::loss_scale, "train/loss_scale"}};
/// validation fields -> scalar tags.
const std::pair<const char*, const char*> kValidation[] = {{event::val_loss, "val/loss"}, {event::val_loss_ema, "val/loss_ema"}};
/// per-rank memory fields (metrics.ranks[r]) -> memory/rank<R>/<kind>.
const char* const kMemory[] = {event::rss_bytes, event::gpu_allocated_bytes, event::gpu_reserved_bytes,
                               event::gpu_peak_bytes};

std::string host_name() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0 || !buf[0]) return "localhost";
  return buf;
}

/// A PNG's height, width and channels from its IHDR chunk; false when it is not a PNG.
bool png_size(const std::string& png, int& height, int& width, int& channels) {
  if (png.size() < 26 || png.compare(1, 3, "PNG") != 0) return false;
  auto be32 = [&](std::size_t at) {
    return static_cast<int>(static_cast<unsigned char>(png[at]) << 24 | static_cast<unsigned char>(png[at + 1]) << 16 |
                            static_cast<unsigned char>(png[at + 2]) << 8 | static_cast<unsigned char>(png[at + 3]));
  };
  width = be32(16);
  height = be32(20);
  const int colour = static_cast<unsigned char>(png[25]);  // 0 grey, 2 RGB, 4 grey+alpha, 6 RGBA
  channels = colour == 2 ? 3 : colour == 6 ? 4 : colour == 4 ? 2 : 1;
  return true;
}

}  // namespace

TensorBoardLog::TensorBoardLog(const std::string& out_dir, const std::string& run_dir) : run_dir_(run_dir) {
  std::error_code ec;
  fs::create_directories(out_dir, ec);
  if (ec) throw Error(ErrorKind::io, out_dir + ": cannot create the TensorBoard folder: " + ec.message());
  const auto now = std::chrono::system_clock::now();
  const double wall = std::chrono::duration<double>(now.time_since_epoch()).count();
  std::string path = out_dir + "/events.out.tfevents." + std::to_string(static_cast<long long>(wall)) + "." + host_name();
  for (int n = 1; fs::exists(path); ++n)  // a second file in the same second (a quick resume)
    path = out_dir + "/events.out.tfevents." + std::to_string(static_cast<long long>(wall)) + "." + host_name() + "." +
           std::to_string(n);
  writer_ = std::make_unique<io::TfEventWriter>(path, wall);
}

TensorBoardLog::~TensorBoardLog() = default;

const std::string& TensorBoardLog::path() const { return writer_->path(); }

TensorBoardLog::Written TensorBoardLog::add(const nlohmann::json& e) {
  Written out;
  const std::string type = e.value(event::type, "");
  const double time = e.value(event::time, 0.0);
  const std::int64_t step = e.value(event::step, std::int64_t{0});
  auto scalar = [&](const std::string& tag, const nlohmann::json& v) {
    if (!v.is_number()) return;
    writer_->scalar(time, step, tag, v.get<float>());
    ++out.scalars;
  };
  if (type == event::metrics) {
    for (const auto& [field, tag] : kScalars)
      if (e.contains(field)) scalar(tag, e[field]);
    if (e.contains(event::ranks)) {
      // Without CUDA every rank reports zeros for the GPU fields: those are no measurement.
      bool gpu = false;
      for (const auto& r : e[event::ranks])
        gpu |= r.value(event::gpu_reserved_bytes, std::int64_t{0}) > 0 || r.value(event::gpu_peak_bytes, std::int64_t{0}) > 0;
      for (const auto& r : e[event::ranks])
        for (const char* kind : kMemory)
          if (r.contains(kind) && (gpu || kind == event::rss_bytes))
            scalar("memory/rank" + std::to_string(r.value(event::rank, 0)) + "/" + kind, r[kind]);
    }
  } else if (type == event::validation) {
    for (const auto& [field, tag] : kValidation)
      if (e.contains(field)) scalar(tag, e[field]);
  } else if (type == event::samples) {
    const std::string grid = e.value(event::dir, "") + "/grid.png";
    std::error_code ec;
    if (!fs::exists(grid, ec)) return out;
    const std::string png = io::read_file(grid);
    int h = 0, w = 0, c = 0;
    if (!png_size(png, h, w, c)) return out;
    writer_->image(time, step, "samples", h, w, c, png);
    ++out.images;
  } else if (type == event::run_start) {
    std::error_code ec;
    const std::string config = run_dir_ + "/config.yaml";
    // TensorBoard's text plugin renders Markdown: a fenced block keeps the YAML as it is.
    if (!fs::exists(config, ec)) return out;
    writer_->text(time, step, "config", "```yaml\n" + io::read_file(config) + "```");
    ++out.texts;
  } else if (type != event::run_end) {
    return out;
  }
  writer_->flush();  // a live TensorBoard follows the run
  return out;
}

TensorBoardExport write_tensorboard(const std::string& run_dir, const std::string& out_dir) {
  const std::string events = run_dir + "/events.jsonl";
  std::ifstream in(events);
  if (!in) throw Error(ErrorKind::io, events + ": cannot read (is " + run_dir + " a run folder?)");
  TensorBoardLog log(out_dir, run_dir);
  TensorBoardExport out;
  out.path = log.path();
  for (std::string line; std::getline(in, line);) {
    const auto e = nlohmann::json::parse(line, nullptr, false);
    if (!e.is_object()) continue;  // a line being written by a live run
    const auto w = log.add(e);
    out.written.scalars += w.scalars;
    out.written.images += w.images;
    out.written.texts += w.texts;
  }
  return out;
}

}  // namespace zs::train
