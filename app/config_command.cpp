#include <filesystem>
#include <iostream>

#include <nlohmann/json.hpp>

#include "arg_parser.h"
#include "commands.h"
#include "config/config_import.h"
#include "config/config_loader.h"
#include "config/config_writer.h"
#include "config/schema.h"
#include "config/trainability.h"
#include "train/run_directory.h"
#include "train/run_length.h"
#include "config/schema_markdown.h"
#include "io/atomic_file.h"

namespace zs::cli {

namespace fs = std::filesystem;
using namespace zs::config;

void print_warnings(const std::vector<std::string>& warnings) {
  for (const auto& w : warnings) std::cerr << "warning: " << w << "\n";
}

namespace {

const OptionSpec kSet{"set", "KEY=VALUE", "Override one key, validated by the schema (repeatable)", true};

const CommandSpec kValidate{
    "config validate", "FILE [--set KEY=VALUE ...]",
    "Check a trainer config and report every problem at once as FILE:LINE:COL: key.path: message.",
    "", {kSet, {"print", "", "Print the resolved config (every key, defaults filled in)"}}, 1, 1};

const CommandSpec kImport{
    "config import", "--accelerate A.yaml [--deepspeed D.json] [--config BASE.yaml] -o OUT.yaml",
    "Turn accelerate's default_config.yaml and/or a DeepSpeed JSON into a trainer config.",
    "The DeepSpeed file can also come from the YAML's deepspeed_config_file (relative paths are tried\n"
    "from the current folder, then the YAML's folder). As with `accelerate launch`, settings that the\n"
    "YAML must leave to the DeepSpeed file are errors naming each key. \"auto\" values are filled from\n"
    "the trainer config (--config, else the defaults). Settings ZeroStudio does not use are listed\n"
    "in a warning.",
    {{"accelerate", "A.yaml", "accelerate config (as `accelerate config` writes it)"},
     {"deepspeed", "D.json", "DeepSpeed config; same as the YAML's deepspeed_config_file"},
     {"config", "BASE.yaml", "Trainer config to start from (its values fill \"auto\" and the rest)"},
     {"output", "OUT.yaml", "Where to write the trainer config", false, "o"},
     kSet},
    0, 0};

const CommandSpec kConfigExport{
    "config export", "FILE [--accelerate OUT.yaml] [--deepspeed OUT.json]",
    "Write a trainer config's launch and ZeRO settings as accelerate YAML and/or DeepSpeed JSON.",
    "With both, the YAML points at the JSON through deepspeed_config_file.",
    {{"accelerate", "OUT.yaml", "accelerate config to write"},
     {"deepspeed", "OUT.json", "DeepSpeed config to write"},
     kSet},
    1, 1};

const CommandSpec kSchema{"config schema", "[--markdown]",
                          "Print the trainer config reference (every key, its type, default and meaning).",
                          "docs/CONFIG.md is `zerostudio config schema --markdown`.",
                          {{"markdown", "", "Print it as Markdown"}},
                          0, 0};

const CommandSpec kConfig{"config", "{init,validate,import,export,schema} ...",
                          "Trainer config files: check them, convert from and to accelerate/DeepSpeed, "
                          "print the reference.",
                          "Subcommands:\n"
                          "  init       ask the setup questions in the terminal, write a trainer config\n"
                          "  validate   check a trainer config\n"
                          "  import     accelerate YAML / DeepSpeed JSON -> trainer config\n"
                          "  export     trainer config -> accelerate YAML / DeepSpeed JSON\n"
                          "  schema     print the reference of every key\n"
                          "Run `zerostudio config SUBCOMMAND --help` for each one's options.",
                          {}, 0, 0};

int validate(const ParsedArgs& a) {
  const std::string file = a.positional()[0];
  LoadedConfig loaded = load_config_file(file, a.all("set"));
  print_warnings(loaded.warnings);
  // Valid, but maybe not trainable yet (model or images not in place): warnings here, errors for
  // train and launch. The run folder is known only when logging.run_name names it.
  const train::RunDirectory run = train::resolve_run_dir(loaded.config, {"", "", "run"});
  std::vector<std::string> not_yet;
  for (const auto& p : trainability_problems(loaded, run.generated ? "" : run.path))
    not_yet.push_back(p.to_string() + " (needed before training)");
  print_warnings(not_yet);
  if (a.has("print")) {
    std::cout << to_yaml(loaded.config);
    return 0;
  }
  std::cout << file << ": valid\n";
  // The run's length as the trainer will count it, when the dataset can be read already.
  if (loaded.config.training.epochs) {
    try {
      const auto length = train::plan_run_length(loaded.config, dataset_folder(loaded.config, run.generated ? "" : run.path));
      std::cout << "length: " << length.describe(loaded.config) << "\n";
    } catch (const std::exception& e) {
      std::cout << "length: training.epochs " << *loaded.config.training.epochs
                << " (the steps follow once the dataset can be read: " << e.what() << ")\n";
    }
  }
  return 0;
}

int import(const ParsedArgs& a) {
  if (!a.has("output")) throw UsageError("'zerostudio config import' needs -o OUT.yaml");
  if (!a.has("accelerate") && !a.has("deepspeed"))
    throw UsageError("'zerostudio config import' needs --accelerate A.yaml, --deepspeed D.json or both");
  ImportRequest request;
  request.accelerate_yaml = a.get("accelerate");
  request.deepspeed_json = a.get("deepspeed");
  if (a.has("config")) request.base = load_config_file(a.get("config"), a.all("set"));
  else if (a.has("set")) request.base = load_config_string("", "--set", a.all("set"));
  ImportResult result = import_configs(request);
  print_warnings(result.warnings);
  const std::string out = a.get("output");
  save_config(result.loaded.config, out);
  std::cout << "wrote " << out << "\n";
  return 0;
}

int export_files(const ParsedArgs& a) {
  if (!a.has("accelerate") && !a.has("deepspeed"))
    throw UsageError("'zerostudio config export' needs --accelerate OUT.yaml, --deepspeed OUT.json or both");
  const LoadedConfig loaded = load_config_file(a.positional()[0], a.all("set"));
  write_launch_files(loaded.config, a.get("accelerate"), a.get("deepspeed"));
  for (const char* flag : {"deepspeed", "accelerate"})
    if (a.has(flag)) std::cout << "wrote " << a.get(flag) << "\n";
  return 0;
}

int schema(const ParsedArgs& a) {
  std::cout << (a.has("markdown") ? schema_markdown() : schema_text());
  return 0;
}

const RegisterCommands kRegisterConfigCommand{{&kValidate, &kImport, &kConfigExport, &kSchema, &kConfig}};

}  // namespace

int run_config_command(const std::vector<std::string>& args) {
  if (args.empty()) {
    std::cerr << kConfig.help();
    return 2;
  }
  if (args[0] == "--help" || args[0] == "-h") {
    std::cout << kConfig.help();
    return 0;
  }
  const std::vector<std::string> rest(args.begin() + 1, args.end());
  if (args[0] == "init") return run_config_init(rest);
  struct Entry {
    const CommandSpec* spec;
    int (*run)(const ParsedArgs&);
  };
  const std::map<std::string, Entry> table = {{"validate", {&kValidate, validate}},
                                              {"import", {&kImport, import}},
                                              {"export", {&kConfigExport, export_files}},
                                              {"schema", {&kSchema, schema}}};
  auto it = table.find(args[0]);
  if (it == table.end())
    throw UsageError("unknown config subcommand '" + args[0] + "' (init, validate, import, export, schema)");
  const ParsedArgs parsed = parse_args(*it->second.spec, rest);
  if (parsed.help) {
    std::cout << it->second.spec->help();
    return 0;
  }
  return it->second.run(parsed);
}

}  // namespace zs::cli
