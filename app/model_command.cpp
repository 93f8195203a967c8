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
#include "core/text.h"
#include "estimate/memory_estimator.h"
#include "models/model_family.h"
#include "models/sd/sd_export.h"
#include "settings/trainer_config.h"

namespace zs::cli {
namespace {

namespace fs = std::filesystem;

const CommandSpec kInfo{"model info", "DIR|FILE.safetensors",
                        "List a diffusers pipeline folder's components (class, parameter count, dtype and size), "
                        "or what a single-file checkpoint holds.",
                        "Counts come from the weight files' headers; nothing is loaded. For a single file, the\n"
                        "configs inferred from its shapes are printed (--config DIR takes them from a companion\n"
                        "diffusers folder where it has them). A component that cannot be read (a missing or\n"
                        "damaged shard, a broken tokenizer) is listed as unreadable, and then the command\n"
                        "exits with 1 after the listing.",
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
                         "Models (diffusers folders of SD 1.x, SDXL, Flux.1 and Qwen-Image; single files of SD, "
                         "SDXL and Flux.1): what is in them, run a component (SD), convert (SD).",
                         "Subcommands:\n  info     list the components\n  eval     run one component on inputs\n"
                         "  convert  diffusers folder -> single file\n",
                         {}, 0, 0};

/// The family of the model at `path` (a config naming it as model.path).
const models::ModelFamily& family_at(const std::string& path, const std::string& config_path) {
  config::TrainerConfig cfg;
  cfg.model.path = path;
  cfg.model.config_path = config_path;
  return models::family_of(cfg);
}

int info(const ParsedArgs& a) {
  const std::string& path = a.positional()[0];
  family_at(path, a.get("config", "")).describe(std::cout, path, a.get("config", ""));
  return 0;
}

int eval(const ParsedArgs& a) {
  for (const char* flag : {"model", "component", "inputs", "output"})
    if (!a.has(flag)) throw UsageError(std::string("'zerostudio model eval' needs --") + flag);
  family_at(a.get("model"), a.get("config", ""))
      .evaluate(a.get("model"), a.get("config", ""), a.get("component"), a.get("inputs"), a.get("output"));
  std::cout << "wrote " << a.get("output") << "\n";
  return 0;
}

int convert(const ParsedArgs& a) {
  if (!a.has("output")) throw UsageError("'zerostudio model convert' needs -o OUT.safetensors");
  checkpoint::ExportOptions o;
  o.dtype = export_dtype(a.get("dtype", "fp32"));
  o.progress = export_progress("converting");
  const auto r = checkpoint::convert_to_single_file(a.positional()[0], a.get("output"), o);
  std::cout << "wrote " << a.get("output") << " (" << r.tensors << " tensors, " << format_bytes(r.bytes) << ")\n";
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
