// `zerostudio model info DIR` and `zerostudio model eval`: look into a diffusers folder and run
// one of its components on given inputs (the fixture files' tensor names), so a user can check a
// model folder and the tests can check every component.
#include <ATen/ATen.h>

#include <filesystem>
#include <iostream>
#include <map>

#include <nlohmann/json.hpp>

#include "arg_parser.h"
#include "commands.h"
#include "core/error.h"
#include "estimate/memory_estimator.h"
#include "io/atomic_file.h"
#include "io/json_file.h"
#include "io/safetensors.h"
#include "models/diffusers_pipeline.h"

namespace zs::cli {
namespace {

namespace fs = std::filesystem;

const CommandSpec kInfo{"model info", "DIR",
                        "List a diffusers pipeline folder's components: class, parameter count, dtype and size.",
                        "Counts come from the weight files' headers; nothing is loaded.", {}, 1, 1};

const CommandSpec kEval{
    "model eval",
    "--model DIR --component COMPONENT --inputs IO.safetensors|prompts.json --output OUT.safetensors|ids.json",
    "Run one component of a diffusers folder on given inputs and write its outputs.",
    "Components and tensors (the names of the reference fixture files; inputs a component does not\n"
    "use are ignored; the VAE works on raw latents, without scaling_factor):\n"
    "  unet          sample, timestep, encoder_hidden_states (SDXL: + text_embeds, time_ids) -> out\n"
    "  vae-encode    image                                        -> posterior_mean, posterior_logvar\n"
    "  vae-decode    latent                                       -> decoded\n"
    "  text-encoder  input_ids                                    -> last_hidden_state, penultimate_hidden_state\n"
    "  tokenizer     a JSON list of prompts                       -> {\"ids\": [[77 ids], ...]}\n"
    "  text-encoder-2  input_ids   -> the same and text_embeds (SDXL's CLIPTextModelWithProjection)\n"
    "  tokenizer-2   the same with the folder's tokenizer_2",
    {{"model", "DIR", "The diffusers pipeline folder"},
     {"component", "COMPONENT", "unet, vae-encode, vae-decode, text-encoder, text-encoder-2, tokenizer, tokenizer-2"},
     {"inputs", "FILE", "Input tensors (.safetensors) or prompts (.json)"},
     {"output", "FILE", "Where to write the outputs", false, "o"}},
    0, 0};

const CommandSpec kModel{"model", "{info,eval} ...", "Diffusers model folders: what is in them, run a component.",
                         "Subcommands:\n  info   list the components\n  eval   run one component on inputs\n",
                         {}, 0, 0};

int info(const ParsedArgs& a) {
  const auto p = models::DiffusersPipeline::open(a.positional()[0]);
  std::cout << p.root() << ": " << (p.class_name().empty() ? "pipeline" : p.class_name()) << "\n";
  for (const auto& c : p.components()) {
    std::cout << "  " << c.name << "  " << c.library << "." << c.class_name;
    std::vector<std::string> files;
    try {
      files = p.weight_files(c.name);
    } catch (const Error&) {
      // Tokenizers and schedulers have no weights.
    }
    if (!files.empty()) {
      std::int64_t params = 0, bytes = 0;
      std::map<std::string, std::int64_t> dtypes;
      for (const auto& f : files) {
        const io::SafetensorsReader r(f);
        for (const auto& e : r.entries()) {
          std::int64_t n = 1;
          for (auto d : e.shape) n *= d;
          params += n;
          dtypes[e.dtype] += n;
        }
        bytes += static_cast<std::int64_t>(fs::file_size(f));
      }
      std::cout << "  " << params << " parameters  ";
      for (const auto& [d, n] : dtypes) std::cout << d << (dtypes.size() > 1 ? "(" + std::to_string(n) + ") " : " ");
      std::cout << estimate::format_bytes(bytes) << (files.size() > 1 ? " in " + std::to_string(files.size()) + " shards" : "");
    } else if (c.class_name.find("Tokenizer") != std::string::npos) {
      try {
        const auto t = p.load_tokenizer(c.name);
        std::cout << "  vocabulary " << t.vocab_size() << ", " << t.max_length() << " tokens, padding id " << t.pad_id();
      } catch (const Error& e) {
        std::cout << "  (" << e.what() << ")";
      }
    }
    std::cout << "\n";
  }
  return 0;
}

int eval(const ParsedArgs& a) {
  for (const char* flag : {"model", "component", "inputs", "output"})
    if (!a.has(flag)) throw UsageError(std::string("'zerostudio model eval' needs --") + flag);
  const auto p = models::DiffusersPipeline::open(a.get("model"));
  const std::string component = a.get("component"), out = a.get("output");
  if (component == "tokenizer" || component == "tokenizer-2") {
    const auto tok = p.load_tokenizer(component == "tokenizer" ? "tokenizer" : "tokenizer_2");
    const auto prompts = io::read_json_file(a.get("inputs"), "prompt list");
    if (!prompts.is_array()) throw Error(ErrorKind::config, a.get("inputs") + ": expected a JSON list of prompts");
    nlohmann::json ids = nlohmann::json::array();
    for (const auto& prompt : prompts) ids.push_back(tok.frame(prompt.get<std::string>()));
    io::write_file_atomic(out, nlohmann::json{{"ids", ids}}.dump() + "\n");
    std::cout << "wrote " << out << "\n";
    return 0;
  }
  const io::SafetensorsReader in(a.get("inputs"));
  auto input = [&](const char* name) {
    if (!in.contains(name)) throw Error(ErrorKind::config, a.get("inputs") + ": no tensor \"" + name + "\" (" + component + " needs it)");
    return in.tensor(name);
  };
  c10::NoGradGuard no_grad;
  std::vector<std::pair<std::string, at::Tensor>> outputs;
  if (component == "unet") {
    auto unet = p.load_unet();
    unet->eval();
    const at::Tensor sample = input("sample"), timestep = input("timestep"), context = input("encoder_hidden_states");
    at::Tensor text_embeds, time_ids;
    if (!unet->config().addition_embed_type.empty()) {  // SDXL
      text_embeds = input("text_embeds");
      time_ids = input("time_ids");
    }
    outputs.emplace_back("out", unet->forward(sample, timestep, context, text_embeds, time_ids));
  } else if (component == "vae-encode") {
    auto vae = p.load_vae();
    const auto posterior = vae->encode(input("image"));
    outputs.emplace_back("posterior_mean", posterior.mean);
    outputs.emplace_back("posterior_logvar", posterior.logvar);
  } else if (component == "vae-decode") {
    outputs.emplace_back("decoded", p.load_vae()->decode(input("latent")));
  } else if (component == "text-encoder") {
    auto te = p.load_text_encoder();
    const auto o = te->forward(input("input_ids"));
    outputs.emplace_back("last_hidden_state", o.last_hidden_state);
    outputs.emplace_back("penultimate_hidden_state", o.penultimate_hidden_state);
  } else if (component == "text-encoder-2") {
    if (!p.has("text_encoder_2")) throw Error(ErrorKind::config, a.get("model") + ": has no text_encoder_2 (an SDXL folder has)");
    auto te = p.load_text_encoder("text_encoder_2");
    const auto o = te->forward(input("input_ids"));
    outputs.emplace_back("last_hidden_state", o.last_hidden_state);
    outputs.emplace_back("penultimate_hidden_state", o.penultimate_hidden_state);
    if (o.text_embeds.defined()) outputs.emplace_back("text_embeds", o.text_embeds);
  } else {
    throw UsageError("--component " + component +
                     " is not one of unet, vae-encode, vae-decode, text-encoder, text-encoder-2, tokenizer, tokenizer-2");
  }
  io::write_safetensors(out, outputs);
  std::cout << "wrote " << out << "\n";
  return 0;
}

}  // namespace

int run_model_command(const std::vector<std::string>& args) {
  if (args.empty() || args[0] == "--help" || args[0] == "-h") {
    (args.empty() ? std::cerr : std::cout) << kModel.help();
    return args.empty() ? 2 : 0;
  }
  const std::vector<std::string> rest(args.begin() + 1, args.end());
  const CommandSpec* spec = args[0] == "info" ? &kInfo : args[0] == "eval" ? &kEval : nullptr;
  if (!spec) throw UsageError("unknown model subcommand '" + args[0] + "' (info, eval)");
  const ParsedArgs parsed = parse_args(*spec, rest);
  if (parsed.help) {
    std::cout << spec->help();
    return 0;
  }
  return args[0] == "info" ? info(parsed) : eval(parsed);
}

}  // namespace zs::cli
