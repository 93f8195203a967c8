#pragma once
// Configs compiled into the program, so the wizard and `config init` start from something
// sensible wherever the binary runs.

#include <string>

namespace zs::config {

/// configs/quickstart.yaml as it was at build time (the tiny model on generated shapes).
const std::string& quickstart_yaml();

}  // namespace zs::config
