#include "checkpoint/checkpoint.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>

#include <zlib.h>

#include "checkpoint/checkpoint_meta.h"
#include "core/error.h"
#include "core/text.h"
#include "io/atomic_file.h"
#include "io/json_file.h"
#include "io/safetensors.h"

namespace zs::checkpoint {

namespace fs = std::filesystem;

namespace {
constexpr const char* kFormat = "zerostudio-checkpoint";
constexpr int kVersion = 2;  // 2: files with sizes and CRC-32s, sharded model state

std::int64_t folder_bytes(const fs::path& dir) {
  std::int64_t n = 0;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.is_regular_file()) n += static_cast<std::int64_t>(e.file_size());
  return n;
}
}  // namespace

std::string staging_dir(const std::string& root, const std::string& tag) {
  return (fs::path(root) / ("." + tag + ".tmp")).string();
}

std::uint32_t file_crc32(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(ErrorKind::checkpoint, path + ": cannot read");
  std::vector<char> buf(1 << 20);
  uLong crc = crc32(0L, Z_NULL, 0);
  while (in) {
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    const auto n = in.gcount();
    if (n > 0) crc = crc32(crc, reinterpret_cast<const Bytef*>(buf.data()), static_cast<uInt>(n));
  }
  return static_cast<std::uint32_t>(crc);
}

CheckpointInfo finalize_checkpoint(const std::string& root, const std::string& tag, nlohmann::json meta) {
  const fs::path final_dir = fs::path(root) / tag;
  const fs::path tmp_dir = staging_dir(root, tag);
  std::error_code ec;
  nlohmann::json files = nlohmann::json::object();
  for (const auto& e : fs::directory_iterator(tmp_dir, ec)) {
    if (!e.is_regular_file() || e.path().filename() == "meta.json") continue;
    files[e.path().filename().string()] = {{"bytes", static_cast<std::int64_t>(e.file_size())},
                                           {"crc32", file_crc32(e.path().string())}};
  }
  meta["files"] = files;
  meta["format"] = kFormat;
  meta["version"] = kVersion;
  meta["tag"] = tag;
  io::write_file_atomic((tmp_dir / "meta.json").string(), meta.dump(2) + "\n");
  // Replace an older checkpoint of the same tag: move it aside first, so one of the two always exists.
  const fs::path old_dir = fs::path(root) / ("." + tag + ".old");
  io::remove_tree(old_dir, ec);
  if (fs::exists(final_dir)) fs::rename(final_dir, old_dir, ec);
  fs::rename(tmp_dir, final_dir, ec);
  if (ec) throw Error(ErrorKind::io, final_dir.string() + ": cannot move the checkpoint into place: " + ec.message());
  io::remove_tree(old_dir, ec);
  // `latest` names the newest complete checkpoint; it is written last.
  io::write_file_atomic((fs::path(root) / "latest").string(), tag + "\n");
  return open_checkpoint(final_dir.string());
}

CheckpointInfo save_checkpoint(const std::string& root, const std::string& tag,
                               const std::map<std::string, NamedTensors>& files, nlohmann::json meta) {
  const fs::path tmp_dir = staging_dir(root, tag);
  std::error_code ec;
  io::remove_tree(tmp_dir, ec);
  fs::create_directories(tmp_dir, ec);
  if (ec) throw Error(ErrorKind::io, tmp_dir.string() + ": cannot create the checkpoint folder: " + ec.message());
  for (const auto& [name, tensors] : files) io::write_safetensors((tmp_dir / name).string(), tensors, {{"format", "pt"}});
  return finalize_checkpoint(root, tag, std::move(meta));
}

std::vector<std::string> verify_checkpoint(const CheckpointInfo& info) {
  std::vector<std::string> problems;
  if (!info.meta.contains("files")) return problems;  // version 1: no checksums recorded
  for (const auto& [name, want] : info.meta["files"].items()) {
    const std::string path = (fs::path(info.path) / name).string();
    std::error_code ec;
    const auto size = fs::file_size(path, ec);
    if (ec) {
      problems.push_back(path + ": missing");
      continue;
    }
    // Typed reads: a value that is no integer is a damaged meta.json, named (not cast or thrown as "unexpected").
    const std::string entry = (fs::path(info.path) / "meta.json").string() + ": files: " + name;
    const std::int64_t bytes = io::json_int(want, "bytes", -1, -1, std::numeric_limits<std::int64_t>::max(), entry,
                                            ErrorKind::checkpoint);
    if (static_cast<std::int64_t>(size) != bytes) {
      problems.push_back(path + ": " + std::to_string(size) + " bytes, the checkpoint recorded " + std::to_string(bytes) +
                         " (truncated?)");
      continue;
    }
    const auto crc = static_cast<std::uint32_t>(
        io::json_int(want, "crc32", 0, 0, std::numeric_limits<std::uint32_t>::max(), entry, ErrorKind::checkpoint));
    if (file_crc32(path) != crc) problems.push_back(path + ": checksum mismatch (corrupt)");
  }
  return problems;
}

std::int64_t free_bytes(const std::string& path) {
  std::error_code ec;
  const auto space = fs::space(path, ec);
  return ec ? -1 : static_cast<std::int64_t>(space.available);
}

CheckpointInfo open_checkpoint(const std::string& given) {
  const std::string path = without_trailing_slash(given);
  const fs::path meta_path = fs::path(path) / "meta.json";
  if (!fs::exists(meta_path))
    throw Error(ErrorKind::checkpoint, path + ": not a checkpoint folder (no meta.json); pass a folder under "
                                              "<run>/checkpoints/ or --resume latest");
  CheckpointInfo info;
  try {
    info.meta = nlohmann::json::parse(io::read_file(meta_path.string()));
  } catch (const nlohmann::json::exception& e) {
    throw Error(ErrorKind::checkpoint, meta_path.string() + ": unreadable: " + e.what());
  }
  if (!info.meta.is_object() || !info.meta.contains("format") || info.meta["format"] != kFormat)
    throw Error(ErrorKind::checkpoint, meta_path.string() + ": not a ZeroStudio checkpoint");
  const auto& version = info.meta.contains("version") ? info.meta["version"] : nlohmann::json();
  if (!version.is_number_integer() || version.get<std::int64_t>() < 1 || version.get<std::int64_t>() > kVersion)
    throw Error(ErrorKind::checkpoint, meta_path.string() + ": checkpoint version " + version.dump() +
                                           " is not supported by this build (it reads versions 1 and 2)");
  info.path = path;
  // Typed reads (io::json_int: a float such as 1e56 is refused, not cast).
  info.step = io::json_int(info.meta, "step", 0, 0, std::numeric_limits<std::int64_t>::max(), meta_path.string(),
                           ErrorKind::checkpoint);
  const auto& tag = info.meta.contains("tag") ? info.meta["tag"] : nlohmann::json();
  if (!tag.is_null() && !tag.is_string())
    throw Error(ErrorKind::checkpoint, meta_path.string() + ": tag: expected a string, found " + tag.dump());
  info.tag = tag.is_string() ? tag.get<std::string>() : fs::path(path).filename().string();
  // Every other key typed too (CheckpointMeta::from_json names the first one that is not what
  // ZeroStudio wrote), so `checkpoint list`, the browser and the exports read checked values.
  (void)CheckpointMeta::from_json(info.meta, path);
  info.bytes = folder_bytes(path);
  return info;
}

std::vector<CheckpointInfo> list_checkpoints(const std::string& root) {
  std::vector<CheckpointInfo> out;
  std::error_code ec;
  if (!fs::is_directory(root, ec)) return out;
  for (const auto& e : fs::directory_iterator(root, ec)) {
    if (!e.is_directory() || e.path().filename().string().starts_with(".")) continue;
    try {
      out.push_back(open_checkpoint(e.path().string()));
    } catch (const Error&) {
      // foreign or incomplete folders are not checkpoints
    }
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) {
    return a.step != b.step ? a.step < b.step : a.tag < b.tag;
  });
  return out;
}

std::vector<std::string> prune_checkpoints(const std::string& root, std::int64_t keep_last, std::int64_t keep_best,
                                           const std::string& metric) {
  std::vector<std::string> deleted;
  if (keep_last <= 0) return deleted;
  std::vector<CheckpointInfo> pool;  // oldest first
  for (auto& c : list_checkpoints(root)) {
    const std::string reason = c.meta.value("reason", "");
    if (reason == "periodic" || reason == "timed") pool.push_back(c);
  }
  std::set<std::string> keep;
  for (std::size_t i = pool.size() > static_cast<std::size_t>(keep_last) ? pool.size() - static_cast<std::size_t>(keep_last) : 0;
       i < pool.size(); ++i)
    keep.insert(pool[i].tag);
  std::vector<CheckpointInfo> by_loss = pool;
  std::stable_sort(by_loss.begin(), by_loss.end(), [&](const auto& a, const auto& b) {
    return a.meta.value(metric, 1e300) < b.meta.value(metric, 1e300);  // without the metric: last
  });
  for (std::size_t i = 0; i < by_loss.size() && i < static_cast<std::size_t>(std::max<std::int64_t>(keep_best, 0)); ++i)
    keep.insert(by_loss[i].tag);
  for (const auto& c : pool) {
    if (keep.count(c.tag)) continue;
    std::error_code ec;
    io::remove_tree(c.path, ec);
    if (!ec) deleted.push_back(c.tag);
  }
  return deleted;
}

}  // namespace zs::checkpoint
