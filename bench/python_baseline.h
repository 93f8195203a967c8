#pragma once
// What the benchmarks share to run their Python baselines (bench/*.py) in the same run and read
// their one-line answers ("key value key value ...").

#include <string>
#include <vector>

/// Runs `command` through the shell; its standard output ("" when it could not start).
std::string run_command(const std::string& command);

/// The Pythons that run the baselines by default: Debian's python3-torch (LibTorch 1.13) and,
/// where `make peers` has made it, the pinned PyTorch 2.x of the repository's .venv.
std::vector<std::string> baseline_pythons();

/// "a,b,c" -> {"a", "b", "c"} (empty items dropped).
std::vector<std::string> split_list(const std::string& list);

/// The number after "key " in `line` (-1 when missing).
double number_after(const std::string& line, const std::string& key);

/// The word after "key " in `line` ("" when missing).
std::string word_after(const std::string& line, const std::string& key);

/// "2.11.0+cu130" -> "2.11".
std::string short_version(const std::string& version);
