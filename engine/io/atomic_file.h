#pragma once
// Writing files so that a crash never leaves half of one: write a temporary
// file beside the target, flush it to disk, then rename it over the target.

#include <filesystem>
#include <string>
#include <system_error>

namespace zs::io {

/// Writes `contents` to `path` atomically; creates missing parent folders.
/// Throws zs::Error(io) naming the file when it cannot be written.
void write_file_atomic(const std::string& path, const std::string& contents);

/// Reads a whole file; throws zs::Error(io) naming it when it cannot be read.
std::string read_file(const std::string& path);

/// Removes `path` and everything under it (symbolic links are removed, not followed); nothing
/// when it does not exist. `ec` says why something could not be removed. Use this, never
/// std::filesystem::remove_all: the LibTorch of PyTorch's wheels exports its own copy of
/// libstdc++'s filesystem functions, and its remove_all crashes when our code calls it.
void remove_tree(const std::filesystem::path& path, std::error_code& ec);

}  // namespace zs::io
