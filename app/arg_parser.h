#pragma once
// Command-line parsing for zerostudio's subcommands. Flags are accepted with hyphens or
// underscores (--num-processes = --num_processes, as accelerate spells them), as
// "--flag value" or "--flag=value".

#include <initializer_list>
#include <limits>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace zs::cli {

/// Bad usage (unknown flag, missing argument): exit code 2.
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// One flag of a command.
struct OptionSpec {
  std::string name;        ///< canonical spelling, underscores ("num_processes")
  std::string value_name;  ///< empty: a switch that takes no value
  std::string help;        ///< one line
  bool repeatable = false; ///< may be given several times (--set)
  std::string short_name;  ///< e.g. "o" for -o
};

/// A (sub)command: its name, what it does and its flags; prints its own --help.
struct CommandSpec {
  std::string name;         ///< "config validate"
  std::string usage;        ///< "FILE [--set key=value ...]"
  std::string summary;      ///< one line
  std::string details;      ///< paragraphs after the flags, may be empty
  std::vector<OptionSpec> options;
  size_t min_positional = 0;
  size_t max_positional = 0;

  std::string help() const;
};

/// Every command's spec, as the command files register them (the shell completion and the man
/// page are generated from these tables, so they list exactly what --help lists).
std::vector<const CommandSpec*>& command_registry();
/// Registers specs at start-up: `const RegisterCommands kRegisterTrain{{&kTrain, &kMakeDataset}};`.
struct RegisterCommands {
  RegisterCommands(std::initializer_list<const CommandSpec*> specs);
};

/// Parsed flags and positional arguments.
class ParsedArgs {
 public:
  bool has(const std::string& name) const { return values_.count(name) != 0; }
  std::string get(const std::string& name, const std::string& fallback = "") const;
  std::vector<std::string> all(const std::string& name) const;
  /// The flag as a whole number (fallback when absent); UsageError "--NAME needs a whole number,
  /// got 'V'" when it is not one or is below `min`.
  long get_int(const std::string& name, long fallback, long min = std::numeric_limits<long>::min()) const;
  const std::vector<std::string>& positional() const { return positional_; }
  bool help = false;  ///< --help / -h was given

 private:
  friend ParsedArgs parse_args(const CommandSpec&, const std::vector<std::string>&);
  std::map<std::string, std::vector<std::string>> values_;
  std::vector<std::string> positional_;
};

/// Parses `args` against `spec`; throws UsageError naming the flag. --help is always accepted.
ParsedArgs parse_args(const CommandSpec& spec, const std::vector<std::string>& args);

/// "--num-processes" -> "num_processes".
std::string normalize_flag(const std::string& flag);

}  // namespace zs::cli
