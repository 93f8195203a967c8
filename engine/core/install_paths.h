#pragma once
// Where ZeroStudio keeps its files. The installed program (a package: the executable in
// <prefix>/bin, or in <prefix>/lib/zerostudio behind the GPU package's launcher, with
// <prefix>/share/zerostudio) follows the XDG base directories: settings under
// $XDG_CONFIG_HOME/zerostudio, caches under $XDG_CACHE_HOME/zerostudio, runs under
// ~/ZeroStudio/runs. Run from a build tree it keeps today's places: runs/ and runs/.latent-cache
// relative to the working folder.

#include <string>

namespace zs {

struct InstallPaths {
  bool installed = false;  ///< the executable is an installed one (see above)
  std::string prefix;      ///< <prefix> when installed ("/usr"), else empty
  std::string data_dir;    ///< <prefix>/share/zerostudio when installed, else empty
};

/// This process's installation, from /proc/self/exe (read once). `ZEROSTUDIO_INSTALLED=0|1`
/// overrides the detection (tests).
const InstallPaths& install_paths();

/// $XDG_CONFIG_HOME/zerostudio (default ~/.config/zerostudio).
std::string xdg_config_dir();
/// $XDG_CACHE_HOME/zerostudio (default ~/.cache/zerostudio).
std::string xdg_cache_dir();

/// The runs root a config's `logging.runs_root` means: the installed program reads the default
/// ("runs") as ~/ZeroStudio/runs; anything else, or a build tree, as it is.
std::string effective_runs_root(const std::string& runs_root);
/// The latent/text cache folder for an empty `data.latent_cache_dir`: the installed program's
/// $XDG_CACHE_HOME/zerostudio/latents, else `.latent-cache` under the runs root.
std::string default_cache_dir(const std::string& runs_root);

}  // namespace zs
