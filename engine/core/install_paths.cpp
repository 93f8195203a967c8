#include "core/install_paths.h"

#include <cstdlib>
#include <filesystem>

namespace zs {

namespace fs = std::filesystem;

namespace {

std::string home() {
  const char* h = std::getenv("HOME");
  return h && *h ? h : "/tmp";
}

/// $NAME when it is an absolute path (the XDG spec ignores relative ones), else ~/fallback.
std::string xdg(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  if (v && *v == '/') return v;
  return (fs::path(home()) / fallback).string();
}

InstallPaths detect() {
  InstallPaths p;
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  // <prefix>/bin/zerostudio, or <prefix>/lib/zerostudio/zerostudio behind the GPU package's launcher.
  const bool in_bin = exe.parent_path().filename() == "bin";
  const bool in_lib = exe.parent_path().filename() == "zerostudio" && exe.parent_path().parent_path().filename() == "lib";
  if (!ec && (in_bin || in_lib)) {
    const fs::path prefix = in_bin ? exe.parent_path().parent_path() : exe.parent_path().parent_path().parent_path();
    if (fs::is_directory(prefix / "share" / "zerostudio" / "configs", ec)) {
      p.installed = true;
      p.prefix = prefix.string();
      p.data_dir = (prefix / "share" / "zerostudio").string();
    }
  }
  if (const char* force = std::getenv("ZEROSTUDIO_INSTALLED")) p.installed = std::string(force) == "1";
  return p;
}

}  // namespace

const InstallPaths& install_paths() {
  static const InstallPaths paths = detect();
  return paths;
}

std::string xdg_config_dir() { return (fs::path(xdg("XDG_CONFIG_HOME", ".config")) / "zerostudio").string(); }
std::string xdg_cache_dir() { return (fs::path(xdg("XDG_CACHE_HOME", ".cache")) / "zerostudio").string(); }

std::string effective_runs_root(const std::string& runs_root) {
  if (install_paths().installed && (runs_root == "runs" || runs_root.empty()))
    return (fs::path(home()) / "ZeroStudio" / "runs").string();
  return runs_root;
}

std::string default_cache_dir(const std::string& runs_root) {
  if (install_paths().installed) return (fs::path(xdg_cache_dir()) / "latents").string();
  return (fs::path(effective_runs_root(runs_root)) / ".latent-cache").string();
}

}  // namespace zs
