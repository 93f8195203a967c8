// `zerostudio model info DIR` and `zerostudio model eval`: look into a diffusers folder (or a
// single-file checkpoint) and run one of its components on given inputs (the fixture files' tensor names), so a user can check a
// model folder and the tests can check every component.
#include <ATen/ATen.h>

#include <filesystem>
#include <iostream>
#include <map>

#include <nlohmann/json.hpp>

#include "arg_parser.h"
#include "checkpoint/export.h"
#include "commands.h"
#include "core/error.h"
#include "estimate/memory_estimator.h"
#include "io/atomic_file.h"
#include "io/json_file.h"
#include "io/safetensors.h"
#include "models/sd/diffusers_pipeline.h"
#include "models/sd/single_file_model.h"

namespace zs::cli {
namespace {

namespace fs = std::filesystem;

const CommandSpec kInfo{"model info", "DIR|FILE.safetensors",
                        "List a diffusers pipeline folder's components (class, parameter count, dtype and size), "
                        "or what a single-file checkpoint holds.",
                        "Counts come from the weight files' headers; nothing is loaded. For a single file, the\n"
                        "configs inferred from its shapes are printed (--config DIR takes them from a companion\n"
                        "diffusers folder where it has them).",
                        {{"config", "DIR", "A single file's companion folder (model.config_path)"}}, 1, 1};

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
    {{"model", "DIR", "The diffusers pipeline folder, or a single-file .safetensors"},
     {"config", "DIR", "For a single file: its companion folder (model.config_path: tokenizers, configs)"},
     {"component", "COMPONENT", "unet, vae-encode, vae-decode, text-encoder, text-encoder-2, tokenizer, tokenizer-2"},
     {"inputs", "FILE", "Input tensors (.safetensors) or prompts (.json)"},
     {"output", "FILE", "Where to write the outputs", false, "o"}},
    0, 0};

const CommandSpec kConvert{"model convert", "DIR -o OUT.safetensors [--dtype fp16|bf16|fp32]",
                           "Write a diffusers pipeline folder (SD 1.x or SDXL) as one single-file checkpoint in the "
                           "original layout, as A1111 and ComfyUI load it.",
                           "UNet, VAE and text encoders, one tensor at a time (memory holds one tensor).",
                           {{"output", "FILE", "The .safetensors file to write", false, "o"},
                            {"dtype", "DTYPE", "fp16, bf16 or fp32 (default fp32)"}},
                           1, 1};

const CommandSpec kModel{"model", "{info,eval,convert} ...",
                         "Stable Diffusion models (diffusers folders, single files): what is in them, run a component.",
                         "Subcommands:\n  info     list the components\n  eval     run one component on inputs\n"
                         "  convert  diffusers folder -> single file\n",
                         {}, 0, 0};

int single_file_info(const std::string& path, const std::string& config) {
  const auto file = models::SingleFileModel::open(path, config);
  const auto& i = file.info();
  const auto counts = file.parameter_counts();
  std::cout << path << ": single-file Stable Diffusion " << (i.family == "sdxl" ? "XL" : "1.x") << " checkpoint, "
            << estimate::format_bytes(static_cast<std::int64_t>(fs::file_size(path))) << "\n";
  auto line = [&](const std::string& part, const std::string& what, const nlohmann::json& config) {
    std::cout << "  " << part << "  " << what << "  " << (counts.count(part) ? counts.at(part) : 0) << " parameters  (config "
              << i.config_sources.at(part) << ")\n    " << config.dump() << "\n";
  };
  line("unet", "UNet2DConditionModel", i.unet.to_json());
  line("vae", "AutoencoderKL", i.vae.to_json());
  line("text_encoder", "CLIPTextModel", i.text_encoder.to_json());
  if (i.family == "sdxl") line("text_encoder_2", "CLIPTextModelWithProjection", i.text_encoder_2.to_json());
  if (config.empty()) std::cout << "  tokenizer: none in the file (give --config DIR, as model.config_path)\n";
  return 0;
}

int info(const ParsedArgs& a) {
  if (models::is_single_file(a.positional()[0])) return single_file_info(a.positional()[0], a.get("config", ""));
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
          params += e.numel();
          dtypes[e.dtype] += e.numel();
        }
        bytes += static_cast<std::int64_t>(fs::file_size(f));
      }
      std::cout << "  " << params << " parameters  ";
      for (const auto& [d, n] : dtypes) {
        std::cout << d;
        if (dtypes.size() > 1)
          std::cout << '(' << n << ") ";
        else
          std::cout << ' ';
      }
      std::cout << estimate::format_bytes(bytes);
      if (files.size() > 1) std::cout << " in " << files.size() << " shards";
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
  const auto source = models::open_model_source(a.get("model"), a.get("config", ""));
  const models::ModelSource& p = *source;
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
    auto te = p.load_text_encoder("text_encoder");
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

int convert(const ParsedArgs& a) {
  if (!a.has("output")) throw UsageError("'zerostudio model convert' needs -o OUT.safetensors");
  checkpoint::ExportOptions o;
  o.dtype = export_dtype(a.get("dtype", "fp32"));
  o.progress = export_progress("converting");
  const auto r = checkpoint::convert_to_single_file(a.positional()[0], a.get("output"), o);
  std::cout << "wrote " << a.get("output") << " (" << r.tensors << " tensors, " << estimate::format_bytes(r.bytes) << ")\n";
  return 0;
}

const RegisterCommands kRegisterModelCommand{{&kInfo, &kEval, &kConvert, &kModel}};

}  // namespace

int run_model_command(const std::vector<std::string>& args) {
  if (args.empty() || args[0] == "--help" || args[0] == "-h") {
    (args.empty() ? std::cerr : std::cout) << kModel.help();
    return args.empty() ? 2 : 0;
  }
  const std::vector<std::string> rest(args.begin() + 1, args.end());
  const CommandSpec* spec = args[0] == "info" ? &kInfo : args[0] == "eval" ? &kEval : args[0] == "convert" ? &kConvert : nullptr;
  if (!spec) throw UsageError("unknown model subcommand '" + args[0] + "' (info, eval, convert)");
  const ParsedArgs parsed = parse_args(*spec, rest);
  if (parsed.help) {
    std::cout << spec->help();
    return 0;
  }
  return args[0] == "info" ? info(parsed) : args[0] == "eval" ? eval(parsed) : convert(parsed);
}

}  // namespace zs::cli
