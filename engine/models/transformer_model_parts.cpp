#include "models/transformer_model_parts.h"

#include <filesystem>
#include <map>

#include <c10/core/GradMode.h>

#include "core/error.h"
#include "io/atomic_file.h"
#include "io/json_file.h"
#include "io/safetensors.h"

namespace zs::models {

namespace fs = std::filesystem;

ClipTextModel tiny_text_encoder(const WordTokenizer& tokenizer) {
  ClipTextConfig t;
  t.vocab_size = tokenizer.vocab_size();
  t.hidden_size = 64;
  t.intermediate_size = 128;
  t.num_attention_heads = 4;
  t.num_hidden_layers = 2;
  t.max_position_embeddings = tokenizer.max_length();
  t.eos_token_id = tokenizer.eos_id();
  return ClipTextModel(t);
}

void load_tiny_text(const std::string& dir, WordTokenizer& tokenizer, ClipTextModel& encoder) {
  tokenizer = WordTokenizer::load(dir + "/tokenizer/tokenizer.json");
  const ClipTextConfig t = ClipTextConfig::from_file(dir + "/text_encoder/config.json");
  if (t.vocab_size != tokenizer.vocab_size())
    throw Error(ErrorKind::checkpoint, dir + ": text_encoder/config.json vocab_size " + std::to_string(t.vocab_size) +
                                           " does not match the tokenizer's " + std::to_string(tokenizer.vocab_size()));
  encoder = ClipTextModel(t);
  const std::string text_file = dir + "/text_encoder/model.safetensors";
  if (fs::exists(text_file)) load_weights(*encoder, io::SafetensorsReader(text_file));
}

void save_transformer_folder(const std::string& dir, nlohmann::json transformer_config, const char* class_name,
                             const diffusion::FlowScheduleConfig& schedule) {
  for (const char* sub : {"transformer", "scheduler"}) fs::create_directories(fs::path(dir) / sub);
  transformer_config["_class_name"] = class_name;
  io::write_file_atomic(dir + "/transformer/config.json", transformer_config.dump(2) + "\n");
  nlohmann::json s = schedule.to_json();
  s["_class_name"] = "FlowMatchEulerDiscreteScheduler";
  io::write_file_atomic(dir + "/scheduler/scheduler_config.json", s.dump(2) + "\n");
}

diffusion::FlowScheduleConfig read_folder_schedule(const std::string& dir) {
  const std::string file = dir + "/scheduler/scheduler_config.json";
  return diffusion::FlowScheduleConfig::from_json(io::read_json_file(file, "scheduler config"), file);
}

void save_tiny_text(const std::string& dir, const WordTokenizer& tokenizer, const ClipTextModel& encoder) {
  for (const char* sub : {"text_encoder", "tokenizer"}) fs::create_directories(fs::path(dir) / sub);
  io::write_file_atomic(dir + "/text_encoder/config.json", encoder->config().to_json().dump(2) + "\n");
  tokenizer.save(dir + "/tokenizer/tokenizer.json");
}

void save_tiny_base(const std::string& dir, const torch::nn::Module& transformer, const torch::nn::Module& encoder) {
  for (const char* sub : {"transformer", "text_encoder"}) fs::create_directories(fs::path(dir) / sub);
  const std::map<std::string, std::string> meta = {{"format", "pt"}, {"producer", "zerostudio"}};
  save_weights(transformer, dir + "/transformer/diffusion_pytorch_model.safetensors", "", meta);
  save_weights(encoder, dir + "/text_encoder/model.safetensors", "", meta);
}

std::string pipeline_reference(const std::string& dir) {
  const std::string ref_file = dir + "/pipeline.json";
  if (!fs::exists(ref_file)) return {};
  const std::string path = io::read_json_file(ref_file, "pipeline reference").value("path", std::string());
  if (!fs::exists(fs::path(path) / "model_index.json"))
    throw Error(ErrorKind::checkpoint, ref_file + ": the run was trained from " + path +
                                           ", which is gone; put the pipeline folder back there to resume or export");
  return path;
}

void freeze(torch::nn::Module& m) {
  for (auto& p : m.parameters()) p.set_requires_grad(false);
}

std::vector<ParamUnit> prefixed_units(std::vector<ParamUnit> units, const std::string& prefix) {
  for (auto& u : units)
    for (auto& [name, p] : u.parameters) name = prefix + name;
  return units;
}

std::int64_t parameter_bytes(const std::vector<torch::nn::Module*>& parts) {
  std::int64_t n = 0;
  for (const auto* m : parts)
    for (const auto& p : m->parameters()) n += p.numel() * static_cast<std::int64_t>(p.element_size());
  return n;
}

FrozenVisit::FrozenVisit(FrozenParking& parking, std::vector<torch::nn::Module*> parts, const torch::nn::Module* streamed)
    : parts_(std::move(parts)) {
  active_ = parking.parked() && !parking.device().is_cpu();
  if (!active_) return;
  c10::NoGradGuard no_grad;
  std::erase(parts_, streamed);  // it streams itself
  for (auto* part : parts_) part->to(parking.device());
  parking.count_visit();
}

FrozenVisit::~FrozenVisit() {
  if (!active_) return;
  c10::NoGradGuard no_grad;
  for (auto* part : parts_) part->to(at::kCPU);
}

std::vector<std::pair<std::string, at::Tensor>> transformer_model_parameters(const torch::nn::Module& transformer,
                                                                             const ClipTextModel& tiny_text,
                                                                             TextEncoderTraining text) {
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (const auto& p : transformer.named_parameters()) out.emplace_back("transformer." + p.key(), p.value());
  if (text == TextEncoderTraining::full && tiny_text)
    for (const auto& p : tiny_text->named_parameters()) out.emplace_back("text_encoder." + p.key(), p.value());
  return out;
}

std::vector<std::pair<std::string, std::shared_ptr<torch::nn::Module>>> tiny_text_modules(const ClipTextModel& tiny_text) {
  std::vector<std::pair<std::string, std::shared_ptr<torch::nn::Module>>> out;
  if (tiny_text) out.emplace_back("text_encoder", tiny_text.ptr());
  return out;
}

void set_tiny_text_training(TextEncoderTraining t, bool pipeline, const std::string& encoder, const std::string& preset,
                            const ClipTextModel& tiny_text) {
  if (t != TextEncoderTraining::frozen && pipeline)
    throw Error(ErrorKind::config, "training.train_text_encoder: " + encoder + " does not train here; set it to none");
  if (t == TextEncoderTraining::lora)
    throw Error(ErrorKind::config, "training.train_text_encoder: lora is not offered for " + preset +
                                       " (its encoder trains in full or not at all)");
  if (tiny_text)
    for (auto& p : tiny_text->parameters()) p.set_requires_grad(t == TextEncoderTraining::full);
}

bool is_tiny_transformer_folder(const std::string& dir, const std::string& transformer_class) {
  std::error_code ec;
  const std::filesystem::path d(dir);
  return std::filesystem::is_regular_file(d / "tokenizer" / "tokenizer.json", ec) &&
         io::json_class_name(d / "transformer" / "config.json") == transformer_class &&
         !std::filesystem::exists(d / "model_index.json", ec);
}

bool is_transformer_pipeline(const std::string& path, const std::string& pipeline_class,
                             const std::string& transformer_class) {
  std::error_code ec;
  if (path.empty() || !std::filesystem::is_directory(path, ec)) return false;
  const std::filesystem::path dir(path);
  return io::json_class_name(dir / "model_index.json") == pipeline_class ||
         io::json_class_name(dir / "transformer" / "config.json") == transformer_class;
}

}  // namespace zs::models
