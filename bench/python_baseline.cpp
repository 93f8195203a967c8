#include "python_baseline.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <sstream>

#include "source_dir.h"

std::string run_command(const std::string& command) {
  std::string out;
  if (FILE* f = popen(command.c_str(), "r")) {
    char buf[4096];
    while (fgets(buf, sizeof buf, f)) out += buf;
    pclose(f);
  }
  return out;
}

std::vector<std::string> baseline_pythons() {
  std::vector<std::string> out{"/usr/bin/python3"};
  const std::string venv = std::string(zs_bench_source_dir()) + "/.venv/bin/python";
  if (access(venv.c_str(), X_OK) == 0) out.push_back(venv);
  return out;
}

std::vector<std::string> split_list(const std::string& list) {
  std::vector<std::string> out;
  std::istringstream in(list);
  for (std::string item; std::getline(in, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

double number_after(const std::string& line, const std::string& key) {
  const auto at = line.find(key + " ");
  return at == std::string::npos ? -1 : std::atof(line.c_str() + at + key.size() + 1);
}

std::string word_after(const std::string& line, const std::string& key) {
  const auto at = line.find(key + " ");
  if (at == std::string::npos) return "";
  std::istringstream in(line.substr(at + key.size() + 1));
  std::string word;
  in >> word;
  return word;
}

std::string short_version(const std::string& version) {
  const auto first = version.find('.');
  const auto second = first == std::string::npos ? std::string::npos : version.find('.', first + 1);
  return version.substr(0, second);
}
