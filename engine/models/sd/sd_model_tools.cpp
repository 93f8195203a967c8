// The SD family's `zerostudio model info` and `model eval` (ModelFamily::describe, evaluate):
// what a diffusers folder or single file holds, counted from the weight files' headers, and one
// component run on the reference fixtures' inputs.
#include <filesystem>
#include <map>
#include <ostream>

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/text.h"
#include "io/atomic_file.h"
#include "io/json_file.h"
#include "io/safetensors.h"
#include "models/sd/diffusers_pipeline.h"
#include "models/sd/model_source.h"
#include "models/sd/sd_family.h"
#include "models/sd/single_file_model.h"

namespace zs::models {

namespace fs = std::filesystem;

namespace {

void describe_single_file(std::ostream& out, const std::string& path, const std::string& config) {
  const auto file = SingleFileModel::open(path, config);
  const auto& i = file.info();
  const auto counts = file.parameter_counts();
  out << path << ": single-file Stable Diffusion " << (i.family == "sdxl" ? "XL" : "1.x") << " checkpoint, "
      << format_bytes(static_cast<std::int64_t>(fs::file_size(path))) << "\n";
  auto line = [&](const std::string& part, const std::string& what, const nlohmann::json& config) {
    out << "  " << part << "  " << what << "  " << (counts.count(part) ? counts.at(part) : 0) << " parameters  (config "
        << i.config_sources.at(part) << ")\n    " << config.dump() << "\n";
  };
  line("unet", "UNet2DConditionModel", i.unet.to_json());
  line("vae", "AutoencoderKL", i.vae.to_json());
  line("text_encoder", "CLIPTextModel", i.text_encoder.to_json());
  if (i.family == "sdxl") line("text_encoder_2", "CLIPTextModelWithProjection", i.text_encoder_2.to_json());
  if (config.empty()) out << "  tokenizer: none in the file (give --config DIR, as model.config_path)\n";
}

}  // namespace

void SdFamily::describe(std::ostream& out, const std::string& path, const std::string& config_path) const {
  if (is_single_file(path)) {
    describe_single_file(out, path, config_path);
    return;
  }
  const auto p = DiffusersPipeline::open(path);
  fail_unreadable(path, describe_pipeline(out, p, [&](const PipelineComponent& c) {
    const auto t = p.load_tokenizer(c.name);
    return "vocabulary " + std::to_string(t.vocab_size()) + ", " + std::to_string(t.max_length()) + " tokens, padding id " +
           std::to_string(t.pad_id());
  }));
}

void SdFamily::evaluate(const std::string& model, const std::string& config_path, const std::string& component,
                        const std::string& inputs, const std::string& out) const {
  const auto source = open_model_source(model, config_path);
  const ModelSource& p = *source;
  if (component == "tokenizer" || component == "tokenizer-2") {
    const auto tok = p.load_tokenizer(component == "tokenizer" ? "tokenizer" : "tokenizer_2");
    const auto prompts = io::read_json_file(inputs, "prompt list");
    if (!prompts.is_array()) throw Error(ErrorKind::config, inputs + ": expected a JSON list of prompts");
    nlohmann::json ids = nlohmann::json::array();
    for (const auto& prompt : prompts) ids.push_back(tok.frame(prompt.get<std::string>()));
    io::write_file_atomic(out, nlohmann::json{{"ids", ids}}.dump() + "\n");
    return;
  }
  const io::SafetensorsReader in(inputs);
  auto input = [&](const char* name) {
    if (!in.contains(name)) throw Error(ErrorKind::config, inputs + ": no tensor \"" + name + "\" (" + component + " needs it)");
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
    if (!p.has("text_encoder_2")) throw Error(ErrorKind::config, model + ": has no text_encoder_2 (an SDXL folder has)");
    auto te = p.load_text_encoder("text_encoder_2");
    const auto o = te->forward(input("input_ids"));
    outputs.emplace_back("last_hidden_state", o.last_hidden_state);
    outputs.emplace_back("penultimate_hidden_state", o.penultimate_hidden_state);
    if (o.text_embeds.defined()) outputs.emplace_back("text_embeds", o.text_embeds);
  } else {
    throw Error(ErrorKind::config, "--component " + component +
                                       " is not one of unet, vae-encode, vae-decode, text-encoder, text-encoder-2, "
                                       "tokenizer, tokenizer-2");
  }
  io::write_safetensors(out, outputs);
}


}  // namespace zs::models
