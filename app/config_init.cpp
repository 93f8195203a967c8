// `zerostudio config init`: the setup wizard's questions in the terminal, for headless servers.
#include <algorithm>
#include <iostream>
#include <string>

#include "arg_parser.h"
#include "commands.h"
#include "config/builtin_configs.h"
#include "config/config_loader.h"
#include "config/config_writer.h"
#include "config/setup_questions.h"
#include "core/text.h"
#include "estimate/memory_estimator.h"
#include "models/model_shape.h"

namespace zs::cli {
namespace {

using config::SetupAnswers;
using config::SetupQuestion;
using Kind = SetupQuestion::Kind;

/// One answer from `in` for `q` (the current answer when the line is empty or input ended);
/// asks again on an answer of the wrong kind. A choice offers config::question_choices.
std::string ask(const SetupQuestion& q, const SetupAnswers& answers, std::istream& in, std::ostream& out) {
  const auto found = answers.find(q.id);
  const std::string current = found == answers.end() ? std::string() : found->second;
  const auto choices = config::question_choices(q, answers);
  for (;;) {
    out << q.prompt;
    if (q.kind == Kind::choice) {
      out << "\n";
      for (std::size_t i = 0; i < choices.size(); ++i)
        out << "  [" << i << "] " << choices[i].second << (choices[i].first == current ? "  (current)" : "") << "\n";
      out << "Choice";
    }
    if (q.kind == Kind::yes_no) out << " [yes/no]";
    if (q.kind == Kind::lines) {
      out << "\n(one per line, an empty line ends; nothing keeps the current ones)\n";
      std::string text, line;
      while (std::getline(in, line) && !line.empty()) text += line + "\n";
      return text.empty() ? current : text;
    }
    out << " [" << current << "]: " << std::flush;
    std::string line;
    if (!std::getline(in, line)) {
      out << "\n";
      return current;
    }
    while (!line.empty() && (line.back() == ' ' || line.back() == '\r')) line.pop_back();
    if (line.empty()) return current;
    switch (q.kind) {
      case Kind::choice:
        for (std::size_t i = 0; i < choices.size(); ++i)
          if (line == std::to_string(i) || line == choices[i].first) return choices[i].first;
        out << "  answer with a number from the list or one of its values\n";
        continue;
      case Kind::yes_no:
        if (line == "yes" || line == "y" || line == "YES" || line == "Yes") return "yes";
        if (line == "no" || line == "n" || line == "NO" || line == "No") return "no";
        out << "  answer yes or no\n";
        continue;
      case Kind::integer:
        if (line.find_first_not_of("0123456789") == std::string::npos) return line;
        out << "  a whole number, please\n";
        continue;
      case Kind::number:
        try {
          std::size_t used = 0;
          std::stod(line, &used);
          if (used == line.size()) return line;
        } catch (const std::exception&) {
        }
        out << "  a number, please\n";
        continue;
      default:
        return line;
    }
  }
}

/// Asks `q` and sets the answer with what follows from it (a family's defaults), naming those.
void ask_and_set(SetupAnswers& answers, const SetupQuestion& q, std::istream& in, std::ostream& out) {
  const auto changed = config::set_answer(answers, q.id, ask(q, answers, in, out));
  if (changed.empty()) return;
  out << "  (";
  for (std::size_t i = 0; i < changed.size(); ++i) {
    std::string value = answers[changed[i]];
    std::replace(value.begin(), value.end(), '\n', ' ');
    while (!value.empty() && value.back() == ' ') value.pop_back();
    out << (i ? "; " : "") << changed[i] << ": " << (value.empty() ? "(empty)" : value);
  }
  out << ")\n";
}

const CommandSpec kInit{
    "config init", "[-o OUT.yaml] [--from FILE]",
    "Ask the setup questions in the terminal (the GUI wizard's, in `accelerate config`'s order)\n"
    "and write a trainer config.",
    "Press Enter to keep the answer in brackets. --from starts from a trainer config, an accelerate\n"
    "YAML or a DeepSpeed JSON (default: the built-in quickstart). Answers are checked by the same\n"
    "rules as `config validate`; questions with a problem are asked again. The memory estimate for\n"
    "the answers is printed before writing.",
    {{"output", "OUT.yaml", "Where to write the trainer config (default zerostudio.yaml)", false, "o"},
     {"from", "FILE", "Config to start from"}},
    0, 0};

const RegisterCommands kRegisterConfigInit{{&kInit}};

}  // namespace

int run_config_init(const std::vector<std::string>& args) {
  const ParsedArgs a = parse_args(kInit, args);
  if (a.help) {
    std::cout << kInit.help();
    return 0;
  }
  // Without --from: the built-in quickstart (tiny model, generated shapes, trains on a CPU).
  const config::LoadedConfig start = a.has("from") ? config::load_any_config(a.get("from"))
                                                   : config::load_config_string(config::quickstart_yaml(), "quickstart");
  const std::string base = config::to_yaml(start.config);
  SetupAnswers answers = config::answers_from_config(start.config);
  std::ostream& out = std::cout;
  std::string page;
  for (const auto& q : config::setup_questions()) {
    if (!config::is_asked(q, answers)) continue;
    if (q.page != page) {
      page = q.page;
      for (const auto& [id, title] : config::setup_pages())
        if (id == page) out << "\n== " << title << " ==\n";
    }
    ask_and_set(answers, q, std::cin, out);
  }
  for (int round = 0;; ++round) {
    const config::SetupResult result = config::apply_answers(answers, base);
    print_warnings(result.warnings);
    if (result.loaded) {
      const auto& cfg = result.loaded->config;
      const auto shape = models::model_shape(cfg);
      const auto e = estimate::estimate_memory(shape, estimate::options_from_config(cfg));
      out << "\nMemory per process: device " << format_bytes(e.gpu.total()) << ", CPU "
          << format_bytes(e.cpu.total());
      if (e.nvme > 0) out << ", NVMe " << format_bytes(e.nvme);
      out << " (zerostudio estimate FILE --gpu-memory SIZE compares it with a card)\n";
      const std::string path = a.get("output", "zerostudio.yaml");
      config::save_config(cfg, path);
      out << "wrote " << path << "\n";
      return 0;
    }
    if (round >= 3 || !std::cin) throw config::ConfigError(result.problems);
    out << "\nSome answers do not work together:\n";
    std::vector<std::string> again;
    for (const auto& p : result.problems) {
      out << "  " << (p.key.empty() ? std::string() : p.key + ": ") << p.message << "\n";
      for (const auto& id : config::questions_for_problem(p, answers))
        if (std::find(again.begin(), again.end(), id) == again.end()) again.push_back(id);
    }
    if (again.empty()) throw config::ConfigError(result.problems);
    for (const auto& id : again) ask_and_set(answers, config::setup_question(id), std::cin, out);
  }
}

}  // namespace zs::cli
