#include "arg_parser.h"

#include <algorithm>

#include "core/text.h"

namespace zs::cli {

std::vector<const CommandSpec*>& command_registry() {
  static std::vector<const CommandSpec*> registry;
  return registry;
}

RegisterCommands::RegisterCommands(std::initializer_list<const CommandSpec*> specs) {
  for (const CommandSpec* s : specs) command_registry().push_back(s);
}

std::string normalize_flag(const std::string& flag) {
  std::string name = flag.substr(flag.find_first_not_of('-'));
  std::replace(name.begin(), name.end(), '-', '_');
  return name;
}

std::string ParsedArgs::get(const std::string& name, const std::string& fallback) const {
  auto it = values_.find(name);
  return it == values_.end() || it->second.empty() ? fallback : it->second.back();
}

long ParsedArgs::get_int(const std::string& name, long fallback, long min) const {
  const std::string v = get(name);
  if (v.empty()) return fallback;
  try {
    std::size_t used = 0;
    const long n = std::stol(v, &used);
    if (used == v.size() && n >= min) return n;
  } catch (const std::exception&) {
  }
  throw UsageError("--" + name + " needs a whole number, got '" + v + "'");
}

std::vector<std::string> ParsedArgs::all(const std::string& name) const {
  auto it = values_.find(name);
  return it == values_.end() ? std::vector<std::string>{} : it->second;
}

std::string CommandSpec::help() const {
  std::string out = "Usage: zerostudio " + name + (usage.empty() ? "" : " " + usage) + "\n\n" + summary + "\n";
  if (!options.empty()) {
    out += "\nOptions:\n";
    for (const auto& o : options) {
      std::string flag = (o.short_name.empty() ? "    " : "-" + o.short_name + ", ") + "--" + o.name;
      if (!o.value_name.empty()) flag += " " + o.value_name;
      if (flag.size() < 34) flag.resize(34, ' ');
      else flag += "  ";
      out += "  " + flag + o.help + "\n";
    }
  }
  out += "  -h, --help                          Show this help and exit\n";
  if (!details.empty()) out += "\n" + details + "\n";
  out += "\nFlags may be written with hyphens or underscores (--num-processes = --num_processes).\n"
         "Exit codes: 0 success, 1 a problem with the input (the message names it), 2 bad usage.\n";
  return out;
}

ParsedArgs parse_args(const CommandSpec& spec, const std::vector<std::string>& args) {
  ParsedArgs parsed;
  bool only_positional = false;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (only_positional || arg.size() < 2 || arg[0] != '-') {
      parsed.positional_.push_back(without_trailing_slash(arg));  // folders as shell completion writes them
      continue;
    }
    if (arg == "--") {
      only_positional = true;
      continue;
    }
    if (arg == "-h" || arg == "--help") {
      parsed.help = true;
      continue;
    }
    std::string name = arg;
    std::optional<std::string> inline_value;
    if (auto eq = arg.find('='); eq != std::string::npos && arg.rfind("--", 0) == 0) {
      name = arg.substr(0, eq);
      inline_value = arg.substr(eq + 1);
    }
    const bool is_short = arg[1] != '-';
    const std::string key = is_short ? name.substr(1) : normalize_flag(name);
    const auto it = std::find_if(spec.options.begin(), spec.options.end(), [&](const OptionSpec& o) {
      return is_short ? o.short_name == key : o.name == key;
    });
    if (it == spec.options.end())
      throw UsageError("unknown option '" + name + "' for 'zerostudio " + spec.name + "'");
    std::string value;
    if (!it->value_name.empty()) {
      if (inline_value) value = *inline_value;
      else if (i + 1 < args.size()) value = args[++i];
      else throw UsageError("option '" + name + "' needs a value (" + it->value_name + ")");
    } else if (inline_value) {
      throw UsageError("option '" + name + "' takes no value");
    }
    auto& slot = parsed.values_[it->name];
    if (!slot.empty() && !it->repeatable) throw UsageError("option '" + name + "' given twice");
    // Paths are taken with or without a trailing slash; --set's KEY=VALUE is the config's to read.
    slot.push_back(it->repeatable ? value : without_trailing_slash(value));
  }
  if (parsed.help) return parsed;
  const size_t n = parsed.positional_.size();
  if (n < spec.min_positional)
    throw UsageError("'zerostudio " + spec.name + "' needs " + spec.usage.substr(0, spec.usage.find(' ')) +
                     " (see --help)");
  if (n > spec.max_positional)
    throw UsageError("unexpected argument '" + parsed.positional_[spec.max_positional] + "' for 'zerostudio " +
                     spec.name + "'");
  return parsed;
}

}  // namespace zs::cli
