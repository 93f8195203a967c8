#pragma once
// Checkpoint folders: checkpoints/<tag>/ with safetensors files and meta.json, written to a
// hidden temporary folder and renamed, so a crash never leaves a half-written checkpoint.

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>
#include <nlohmann/json.hpp>

namespace zs::checkpoint {

using NamedTensors = std::vector<std::pair<std::string, at::Tensor>>;

/// A complete checkpoint on disk.
struct CheckpointInfo {
  std::string path;       ///< the tag folder
  std::string tag;        ///< e.g. "step_500"
  std::int64_t step = 0;
  std::int64_t bytes = 0; ///< total size of its files
  nlohmann::json meta;    ///< meta.json
};

/// Writes `files` (file name -> tensors, e.g. "model.safetensors") and meta.json (with "format",
/// "version", "tag" added) to `root`/`tag`, replacing an older checkpoint of that tag.
CheckpointInfo save_checkpoint(const std::string& root, const std::string& tag,
                               const std::map<std::string, NamedTensors>& files, nlohmann::json meta);

/// The hidden folder a checkpoint is written into (by every rank) before it is complete.
std::string staging_dir(const std::string& root, const std::string& tag);

/// Once everything is in staging_dir(root, tag): records each file's size and CRC-32 in `meta`,
/// writes meta.json, moves the folder into place (an older checkpoint of that tag is replaced
/// only once the new one is complete) and updates `root`/latest last.
CheckpointInfo finalize_checkpoint(const std::string& root, const std::string& tag, nlohmann::json meta);

/// Checks every file meta.json lists: present, the recorded size, the recorded CRC-32. Returns
/// one line per problem, naming the file.
std::vector<std::string> verify_checkpoint(const CheckpointInfo& info);

/// CRC-32 (zlib's) of a file.
std::uint32_t file_crc32(const std::string& path);

/// Bytes free for an unprivileged user on `path`'s file system (-1 when unknown).
std::int64_t free_bytes(const std::string& path);

/// Complete checkpoints under `root`, oldest step first (temporary folders are ignored).
std::vector<CheckpointInfo> list_checkpoints(const std::string& root);

/// Opens a checkpoint folder; throws zs::Error(checkpoint) naming it when meta.json is missing,
/// unreadable or of another format/version.
CheckpointInfo open_checkpoint(const std::string& path);

/// Among the checkpoints whose meta has "reason" "periodic" or "timed", deletes all but the
/// newest `keep_last` and the `keep_best` with the lowest meta[`metric`] ("smoothed_loss" or
/// "val_loss"; a checkpoint without it ranks last; keep_last <= 0 keeps all). Checkpoints saved
/// for other reasons (final, stopped, requested, overwrite, on an exception) are never deleted.
/// Returns the deleted tags.
std::vector<std::string> prune_checkpoints(const std::string& root, std::int64_t keep_last, std::int64_t keep_best = 0,
                                           const std::string& metric = "smoothed_loss");

}  // namespace zs::checkpoint
