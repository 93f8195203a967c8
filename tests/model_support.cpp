#include "model_support.h"

#include <algorithm>
#include <filesystem>
#include <fstream>

#include <ATen/ATen.h>
#include <torch/nn/module.h>
#include <nlohmann/json.hpp>

#include "config/config_loader.h"
#include "io/atomic_file.h"
#include "io/safetensors.h"
#include "models/autoencoder_kl.h"
#include "models/clip_text_model.h"
#include "models/sd/unet_2d_condition.h"
#include "models/weights.h"
#include "train/trainer.h"
#include "test_support.h"

namespace zs::test {

namespace fs = std::filesystem;
using nlohmann::json;

std::string fixture_path(const std::string& rel) { return fixture(QString::fromStdString(rel)); }

train::RunSummary run_training(const config::TrainerConfig& cfg, const std::string& run_dir, const std::string& resume) {
  train::TrainerOptions o;
  o.run_dir = run_dir;
  o.resume = resume;
  train::TrainerCommands commands;
  return train::Trainer(cfg, o).run(commands);
}

at::Tensor RecordingHooks::before(std::size_t unit, const at::Tensor& x) {
  calls.push_back("before " + std::to_string(unit) + " " + std::to_string(x.size(1)));
  return x;
}

at::Tensor RecordingHooks::after(std::size_t unit, const at::Tensor& y) {
  calls.push_back("after " + std::to_string(unit));
  return y;
}

std::string gradients_differ(const torch::nn::Module& module, const io::SafetensorsReader& golden,
                             const std::string& prefix, double tolerance, std::size_t& checked) {
  checked = 0;
  for (const auto& p : module.named_parameters()) {
    const at::Tensor want = golden.tensor(prefix + p.key());
    at::Tensor got = p.value().grad().defined() ? p.value().grad() : at::zeros_like(p.value());
    if (want.dim() > 0 && got.dim() == want.dim() && want.size(0) < got.size(0)) got = got.narrow(0, 0, want.size(0));
    const double scale = std::max(1.0, want.abs().max().item<double>()), d = max_abs_diff(got, want);
    if (!(d <= tolerance * scale)) return p.key() + ": gradient differs by " + std::to_string(d);
    ++checked;
  }
  return "";
}

double max_abs_diff(const at::Tensor& a, const at::Tensor& b) {
  return (a.to(at::kDouble) - b.to(at::kDouble)).abs().max().item<double>();
}

std::shared_ptr<models::UNet2DConditionModelImpl> load_fixture_unet() {
  models::UNet2DConditionModel unet(models::UNetConfig::from_file(fixture_path("sd15-tiny/unet/config.json")));
  const io::SafetensorsReader reader(fixture_path("sd15-tiny/unet/diffusion_pytorch_model.safetensors"));
  const models::LoadReport report = models::load_weights(*unet, reader);
  if (!report.unexpected.empty()) throw std::runtime_error("unexpected tensor " + report.unexpected.front());
  return unet.ptr();
}

models::ClipTextConfig open_clip_config(std::int64_t hidden, std::int64_t layers, std::int64_t projection) {
  models::ClipTextConfig c;
  c.hidden_size = hidden;
  c.intermediate_size = 4 * hidden;
  c.num_attention_heads = hidden / 64;
  c.num_hidden_layers = layers;
  c.hidden_act = "gelu";
  c.with_projection = true;
  c.projection_dim = projection;
  return c;
}

void write_tiny_sdxl(const std::string& dir) {
  const std::string fx = (sharedDir() + "/fixtures/sd15-tiny/").toStdString();
  fs::create_directories(dir);
  for (const char* part : {"tokenizer", "scheduler"}) fs::copy(fx + part, dir + "/" + part, fs::copy_options::recursive);
  fs::copy(fx + "tokenizer", dir + "/tokenizer_2", fs::copy_options::recursive);
  io::write_file_atomic(dir + "/tokenizer_2/special_tokens_map.json", "{\"pad_token\": \"!\"}");
  at::manual_seed(3);
  auto component = [&](const std::string& name, const torch::nn::Module& m, const json& config, const std::string& file) {
    fs::create_directories(dir + "/" + name);
    io::write_file_atomic(dir + "/" + name + "/config.json", config.dump(2));
    models::save_weights(m, dir + "/" + name + "/" + file);
  };
  models::ClipTextConfig t1;
  t1.hidden_size = 64;
  t1.intermediate_size = 128;
  t1.num_attention_heads = 1;
  t1.num_hidden_layers = 2;
  models::ClipTextModel te1(t1);
  component("text_encoder", *te1, t1.to_json(), "model.safetensors");
  const models::ClipTextConfig t2 = open_clip_config(128, 3, 32);
  models::ClipTextModel te2(t2);
  component("text_encoder_2", *te2, t2.to_json(), "model.safetensors");
  models::AutoencoderKLConfig vc;
  vc.block_out_channels = {32, 64};
  vc.layers_per_block = 1;
  vc.sample_size = 1024;  // nominal, as SDXL's (a single file infers it)
  vc.scaling_factor = 0.13025;
  models::AutoencoderKL vae(vc);
  component("vae", *vae, vc.to_json(), "diffusion_pytorch_model.safetensors");
  const json unet = {{"block_out_channels", {64, 128}}, {"down_block_types", {"DownBlock2D", "CrossAttnDownBlock2D"}},
                     {"up_block_types", {"CrossAttnUpBlock2D", "UpBlock2D"}}, {"attention_head_dim", {1, 2}},
                     {"transformer_layers_per_block", {1, 2}}, {"cross_attention_dim", 64 + 128},
                     {"use_linear_projection", true}, {"layers_per_block", 2},
                     {"in_channels", 4}, {"out_channels", 4}, {"sample_size", 128},
                     {"addition_embed_type", "text_time"}, {"addition_time_embed_dim", 8},
                     {"projection_class_embeddings_input_dim", 32 + 6 * 8}};
  models::UNet2DConditionModel u(models::UNetConfig::from_json(unet, "tiny-sdxl"));
  component("unet", *u, u->config().to_json(), "diffusion_pytorch_model.safetensors");
  const json index = {{"_class_name", "StableDiffusionXLPipeline"}, {"unet", {"diffusers", "UNet2DConditionModel"}},
                      {"vae", {"diffusers", "AutoencoderKL"}}, {"text_encoder", {"transformers", "CLIPTextModel"}},
                      {"text_encoder_2", {"transformers", "CLIPTextModelWithProjection"}},
                      {"tokenizer", {"transformers", "CLIPTokenizer"}}, {"tokenizer_2", {"transformers", "CLIPTokenizer"}},
                      {"scheduler", {"diffusers", "EulerDiscreteScheduler"}}};
  io::write_file_atomic(dir + "/model_index.json", index.dump(2));
}

config::TrainerConfig small_config(std::vector<std::string> extra) {
  std::vector<std::string> sets = {
      "data.generate=shapes",        "data.generate_count=64",      "data.resolution=16",
      "data.num_workers=1",          "training.batch_size=8",       "training.max_steps=30",
      "optimizer.lr=0.002",          "scheduler.type=cosine",       "scheduler.warmup_steps=5",
      "sampling.every_n_steps=15",   "sampling.steps=5",       "sampling.guidance_scale=2",
      "sampling.images_per_prompt=2", "checkpointing.every_n_steps=15", "logging.every_n_steps=1",
      "ema.enabled=true",            "ema.decay=0.9",               "model.prediction_type=v_prediction"};
  sets.insert(sets.end(), extra.begin(), extra.end());
  auto loaded = config::load_config_string("", "e2e", sets);
  loaded.config.sampling.prompts = {"a red circle on a blue background", "a green square on a black background"};
  return loaded.config;
}

std::vector<json> read_events(const std::string& run_dir) {
  std::ifstream in(run_dir + "/events.jsonl");
  std::vector<json> out;
  for (std::string line; std::getline(in, line);) out.push_back(json::parse(line));
  return out;
}

std::string checkpoint_dir(const std::vector<json>& events) {
  std::string out;
  for (const auto& e : events)
    if (e["type"] == "checkpoint") out = e["path"].get<std::string>();
  return out;
}

std::vector<double> losses(const std::vector<json>& events) {
  std::vector<double> out;
  for (const auto& e : events)
    if (e["type"] == "metrics") out.push_back(e["loss"].get<double>());
  return out;
}

}  // namespace zs::test
