// The Z-Image family (models/z_image/) end to end on its tiny preset (configs/quickstart-z-image.yaml):
// the registry finds it, the model predicts ZImagePipeline's velocity (the transformer's output at
// the model's time 1 − σ, negated: pipelines/z_image/pipeline_z_image.py), samples with the
// pipeline's guidance (cond + g·(cond − uncond), on for g > 0), trains and resumes under another ZeRO
// stage to the same losses, exports a diffusers folder that trains again, and a LoRA run exports
// the three LoRA layouts (diffusers/PEFT "transformer.", musubi-tuner's "lora_unet_" with alpha,
// ai-toolkit's "diffusion_model."); and a diffusers Z-Image folder conditions, samples and decodes as
// ZImagePipeline does.
#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <QtTest>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <sstream>

#include <nlohmann/json.hpp>

#include "checkpoint/checkpoint.h"
#include "config/config_loader.h"
#include "core/error.h"
#include "data/latent_cache.h"
#include "data/shapes.h"
#include "io/atomic_file.h"
#include "io/json_file.h"
#include "io/safetensors.h"
#include "models/model_family.h"
#include "models/text_conditioning.h"
#include "models/lora.h"
#include "models/z_image/z_image_family.h"
#include "models/z_image/z_image_model.h"
#include "models/z_image/z_image_single_file.h"
#include "models/autoencoder_kl.h"
#include "models/vae_single_file_names.h"
#include "train/checkpoint_export.h"
#include "train/trainer.h"  // RunSummary
#include "model_support.h"
#include "test_support.h"

using namespace zs;
namespace fs = std::filesystem;

namespace {

config::TrainerConfig z_config(std::vector<std::string> extra) {
  std::vector<std::string> sets = {"data.num_workers=1", "training.batch_size=4",
                                   "data.generate_count=16", "sampling.steps=2", "ema.enabled=false",
                                   "sampling.images_per_prompt=1", "model.prediction_type=epsilon"};
  const bool path = std::any_of(extra.begin(), extra.end(), [](const std::string& e) { return e.starts_with("model.path="); });
  if (!path) sets.push_back("model.preset=z-image-tiny");
  sets.insert(sets.end(), extra.begin(), extra.end());
  return test::small_config(sets);
}

config::TrainerConfig z_quickstart() {
  return config::load_config_file((test::sourceDir() + "/configs/quickstart-z-image.yaml").toStdString()).config;
}

}  // namespace

class TestZImageE2E : public QObject {
  Q_OBJECT

 private slots:
  // The registry finds the preset; ZImagePipeline's sampling defaults (50 steps, guidance 5); the
  // prediction is −transformer(x, 1 − σ); guidance is on for any scale above 0 and combines as the
  // pipeline does.
  void presetPredictsThePipelinesVelocity() {
    const auto cfg = z_quickstart();
    const models::ModelFamily& family = models::family_of(cfg);
    QCOMPARE(QString::fromStdString(family.name()), QString("z-image"));
    QCOMPARE(family.default_sampling_steps(cfg), std::int64_t{50});
    QCOMPARE(family.default_guidance_scale(cfg), 5.0);
    const auto model = family.build(cfg, data::all_shape_captions(), {});
    auto& z = dynamic_cast<models::ZImageModel&>(*model);
    QVERIFY(!model->has_latent_space());
    QCOMPARE(model->pixel_factor(), std::int64_t{2});
    QCOMPARE(model->sample_channels(), std::int64_t{3});
    c10::NoGradGuard no_grad;
    const models::TextConditioning cond = model->condition({"a red circle on a black background", "a green square"}, at::kCPU);
    const at::Tensor x = at::randn({2, 3, 16, 16}), sigma = at::tensor({0.3f, 0.8f});
    const at::Tensor out = model->predict(x, sigma, cond, {});
    QCOMPARE(out.sizes().vec(), x.sizes().vec());
    // The pipeline's (1000 − t) / 1000 of the scheduler's t = σ·1000, in float32.
    const at::Tensor direct =
        z.transformer->forward(x, cond.context, cond.mask, (1000 - (sigma.to(at::kDouble) * 1000).to(at::kFloat)) / 1000);
    QVERIFY(test::max_abs_diff(out, -direct) < 1e-6);
    QVERIFY(!model->guides(0.0) && model->guides(1.0) && model->guides(0.5));
    const at::Tensor u = at::randn({2, 3, 4, 4}, at::kDouble), c = at::randn({2, 3, 4, 4}, at::kDouble);
    QVERIFY(test::max_abs_diff(model->combine_guidance(u, c, 5.0), c + 5.0 * (c - u)) < 1e-12);
  }

  // 2 steps at stage 2, then on to 4 at stage 3: the same losses as 4 straight steps at stage 0
  // (samples drawn on the way); the diffusers export of the straight run trains again.
  void tinyPresetTrainsResumesAndExports() {
    QTemporaryDir dir;
    const std::string base = dir.path().toStdString();
    auto cfg = [](const std::string& stage, int steps) {
      return z_config({"zero.stage=" + stage, "training.max_steps=" + std::to_string(steps), "scheduler.total_steps=4",
                       "sampling.every_n_steps=2", "checkpointing.every_n_steps=2"});
    };
    test::run_training(cfg("0", 4), base + "/straight");
    test::run_training(cfg("2", 2), base + "/resumed");
    test::run_training(cfg("3", 4), base + "/resumed", "latest");
    const auto want = test::losses(test::read_events(base + "/straight")), got = test::losses(test::read_events(base + "/resumed"));
    QCOMPARE(got.size(), want.size());
    QCOMPARE(want.size(), std::size_t{4});
    for (std::size_t i = 0; i < want.size(); ++i) {
      QVERIFY(std::isfinite(want[i]));
      QVERIFY2(std::abs(got[i] / want[i] - 1) < 1e-5, qPrintable(QString("step %1: %2 vs %3").arg(i + 1).arg(got[i]).arg(want[i])));
    }
    bool sampled = false;
    for (const auto& e : fs::recursive_directory_iterator(base + "/straight")) sampled |= e.path().extension() == ".png";
    QVERIFY(sampled);
    checkpoint::ExportOptions o;
    o.format = "diffusers";
    const std::string exported = base + "/exported";
    train::export_checkpoint(test::checkpoint_dir(test::read_events(base + "/straight")), exported, o);
    QVERIFY(fs::exists(exported + "/transformer/config.json") && fs::exists(exported + "/tokenizer/tokenizer.json"));
    const auto again = z_config({"model.path=" + exported, "training.max_steps=1",
                                 "sampling.every_n_steps=0", "checkpointing.every_n_steps=0"});
    QCOMPARE(QString::fromStdString(models::family_of(again).name()), QString("z-image"));
    QCOMPARE(test::run_training(again, base + "/again").step, std::int64_t{1});
  }

  // A whole diffusers Z-Image folder (tests/fixtures/z-image-tiny/: sharded transformer/ and
  // text_encoder/ with their index files, Qwen3's tokenizer, Flux.1's VAE shape) as a run loads it,
  // against ZImagePipeline (tests/fixtures/gen/z_image_pipeline.py): encode_prompt's per-prompt states
  // for English and Chinese prompts and the negative one, then 3 FlowMatch Euler steps with its
  // guidance (scale 5) from the same latents, arranged as the image logger arranges them, and the
  // VAE's decoding (latents / scaling + shift). Within 1e-5 in float32.
  void pipelineFolderSamplesAsZImagePipeline() {
    const std::string folder = test::peerFixture("z-image-tiny").toStdString();
    if (!fs::exists(folder)) ZS_SKIP_UNLESS_CI("tests/fixtures/z-image-tiny is absent; run tests/fixtures/gen/z_image_pipeline.py");
    const io::SafetensorsReader ref(test::peerFixture("z_image_pipeline.safetensors").toStdString());
    const auto cfg = z_config({"model.path=" + folder});
    const models::ModelFamily& family = models::family_of(cfg);
    QCOMPARE(QString::fromStdString(family.name()), QString("z-image"));
    const auto model = family.build(cfg, {}, {});
    QVERIFY(model->has_latent_space());
    QCOMPARE(model->pixel_factor(), std::int64_t{4});  // the tiny VAE's 2 × the 2×2 patches
    auto close = [](const at::Tensor& a, const at::Tensor& b, const QString& what) {
      QVERIFY2(a.sizes() == b.sizes(), qPrintable(what + ": shape differs"));
      const double scale = std::max(1.0, b.abs().max().item<double>()), d = test::max_abs_diff(a, b);
      QVERIFY2(d <= 1e-5 * scale, qPrintable(QString("%1 differs by %2 (scale %3)").arg(what).arg(d).arg(scale)));
    };
    c10::NoGradGuard no_grad;
    const std::vector<std::string> prompts = {"a red circle on a blue square", "一只红色的猫坐在蓝色的桌子上", "a dog"};
    const std::vector<std::string> negative(prompts.size(), "a bright yellow star over the house");
    const models::TextConditioning cond = model->condition(prompts, at::kCPU), neg = model->condition(negative, at::kCPU);
    for (std::size_t i = 0; i < prompts.size(); ++i) {
      const at::Tensor want = ref.tensor("prompt_embeds." + std::to_string(i));
      const std::int64_t n = want.size(0);
      QCOMPARE(cond.mask.defined() ? cond.mask[static_cast<std::int64_t>(i)].sum().item<std::int64_t>() : cond.context.size(1), n);
      close(cond.context[static_cast<std::int64_t>(i)].narrow(0, 0, n), want, QString("prompt %1's states").arg(i));
      close(neg.context[static_cast<std::int64_t>(i)], ref.tensor("negative_embeds." + std::to_string(i)), "the negative prompt's states");
    }
    const models::TextConditioning both = models::concat_conditioning(neg, cond);
    const at::Tensor start = ref.tensor("start");
    const auto sampler = model->sampler(3, start.sizes());
    at::Tensor x = start;
    const auto n = static_cast<std::int64_t>(prompts.size());
    QVERIFY(model->guides(5.0));
    for (std::size_t i = 0; i < sampler->steps(); ++i) {
      const auto parts = model->predict(at::cat({x, x}), sampler->timestep(i, 2 * n, at::kCPU), both, {}).chunk(2);
      x = sampler->step(i, model->combine_guidance(parts[0], parts[1], 5.0), x);
    }
    close(x, ref.tensor("final"), "the sampled latents");
    close(model->to_images(x), ref.tensor("decoded"), "the decoded images");
  }

  // A LoRA run on the preset exports its adapters in the three layouts under their readers' names,
  // and lora.init_from reads each back.
  void loraExportsEveryLayout() {
    QTemporaryDir dir;
    const std::string base = dir.path().toStdString();
    const auto cfg = z_config({"training.method=lora", "lora.rank=4", "lora.alpha=2", "training.max_steps=2",
                               "sampling.every_n_steps=0", "checkpointing.every_n_steps=2"});
    test::run_training(cfg, base + "/run");
    const std::string ckpt = test::checkpoint_dir(test::read_events(base + "/run"));
    const std::vector<std::pair<std::string, std::pair<std::string, std::string>>> layouts = {
        {"lora-diffusers", {"transformer.layers.0.attention.to_q.lora_A.weight", "transformer.layers.0.attention.to_q.lora_B.weight"}},
        {"lora-musubi", {"lora_unet_layers_0_attention_to_q.lora_down.weight", "lora_unet_layers_0_attention_to_q.alpha"}},
        {"lora-aitoolkit", {"diffusion_model.layers.0.attention.to_q.lora_A.weight",
                            "diffusion_model.noise_refiner.0.feed_forward.w2.lora_B.weight"}}};
    for (const auto& [format, names] : layouts) {
      checkpoint::ExportOptions o;
      o.format = format;
      o.dtype = at::kFloat;
      const std::string out = base + "/" + format + ".safetensors";
      train::export_checkpoint(ckpt, out, o);
      const io::SafetensorsReader f(out);
      QVERIFY2(f.contains(names.first) && f.contains(names.second), (format + ": " + names.first).c_str());
    }
    // lora.init_from reads each layout back: a new run's adapters start as the trained ones (the
    // update scale·up·down of every layer), whatever its own alpha; a Qwen-Image LoRA is refused.
    auto trained = [&](const std::string& file, double alpha) -> std::vector<at::Tensor> {
      auto m = models::family_of(cfg).build(cfg, data::all_shape_captions(), {});
      models::LoraOptions lo;
      lo.rank = 4;
      lo.alpha = alpha;
      m->attach_denoiser_lora(models::z_image_family().default_lora_targets(), lo, 3);
      if (!file.empty() && m->load_lora_file(file) == 0) throw std::runtime_error(file + ": no adapter read");
      std::vector<at::Tensor> deltas;
      for (const models::LoraLayer& l : models::lora_layers(*dynamic_cast<models::ZImageModel&>(*m).transformer))
        deltas.push_back(models::lora_delta(l));
      return deltas;
    };
    const auto want = trained("", 2.0);  // the run's own layers (untrained: up is zero)
    for (const auto& [format, names] : layouts) {
      const auto got = trained(base + "/" + format + ".safetensors", 8.0);
      QCOMPARE(got.size(), want.size());
      double largest = 0;
      for (const auto& d : got) largest = std::max(largest, d.abs().max().item<double>());
      QVERIFY2(largest > 0, format.c_str());  // trained adapters, not the fresh ones
      if (format != layouts.front().first) {
        const auto first = trained(base + "/" + layouts.front().first + ".safetensors", 8.0);
        for (std::size_t i = 0; i < got.size(); ++i)
          QVERIFY2(test::max_abs_diff(got[i], first[i]) < 1e-3 * std::max(1.0, first[i].abs().max().item<double>()),
                   format.c_str());  // fp16 files: the same update within their rounding
      }
    }
    {
      QTemporaryDir other;
      const std::string file = other.filePath("qwen.safetensors").toStdString();
      io::write_safetensors(file, {{"transformer.transformer_blocks.0.attn.to_q.lora_A.weight", at::zeros({4, 64})},
                                   {"transformer.transformer_blocks.0.attn.to_q.lora_B.weight", at::zeros({64, 4})}});
      try {
        trained(file, 2.0);
        QFAIL("a Qwen-Image LoRA was read into Z-Image");
      } catch (const std::exception& e) {
        QVERIFY2(std::string(e.what()).find("names no layer of this Z-Image transformer") != std::string::npos, e.what());
      }
    }
    // And the reverse: Qwen-Image's reader refuses a Z-Image LoRA naming its first key; Flux.1 takes
    // no lora.init_from at all (its validation names the key).
    {
      const auto qwen_cfg = test::small_config({"model.preset=qwen-image-tiny", "model.prediction_type=epsilon", "training.method=lora"});
      auto qwen = models::family_of(qwen_cfg).build(qwen_cfg, data::all_shape_captions(), {});
      models::LoraOptions lo;
      lo.rank = 4;
      qwen->attach_denoiser_lora(models::family_of(qwen_cfg).default_lora_targets(), lo, 3);
      const std::string file = base + "/lora-diffusers.safetensors";
      try {
        qwen->load_lora_file(file);
        QFAIL("a Z-Image LoRA was read into Qwen-Image");
      } catch (const std::exception& e) {
        QVERIFY2(std::string(e.what()).find("names no layer of this Qwen-Image transformer") != std::string::npos &&
                     std::string(e.what()).find("lora-diffusers.safetensors") != std::string::npos,
                 e.what());
      }
      try {
        test::small_config({"model.preset=flux-tiny", "model.prediction_type=epsilon", "training.method=lora", "lora.init_from=" + file});
        QFAIL("lora.init_from validated for Flux.1");
      } catch (const config::ConfigError& e) {
        QVERIFY2(QString(e.what()).contains("lora.init_from"), e.what());
      }
    }
    checkpoint::ExportOptions o;
    o.format = "lora-kohya";
    try {
      train::export_checkpoint(ckpt, base + "/x.safetensors", o);
      QFAIL("lora-kohya accepted for Z-Image");
    } catch (const std::exception& e) {
      QVERIFY2(std::string(e.what()).find("lora-diffusers, lora-musubi, lora-aitoolkit") != std::string::npos, e.what());
    }
  }
  // ComfyUI's single-file transformer (models/z_image/z_image_single_file.h, the layout diffusers'
  // single_file_utils.py convert_z_image_transformer_checkpoint_to_diffusers reads; that diffusers
  // reads our file is tests/peers/test_z_image_lora.py's): a run on the fixture folder exports it,
  // every diffusers tensor reads back from it, it trains as model.path with the folder as
  // model.config_path to the exported folder's first loss, also with the VAE and Qwen3 as single
  // files beside a folder of configs; a LoRA run on it merges into its weights; a file without its
  // refiner blocks, or without model.config_path, is refused before anything is written.
  void singleFileTrainsAsTheExportedFolder() {
    const std::string folder = test::peerFixture("z-image-tiny").toStdString();
    if (!fs::exists(folder)) ZS_SKIP_UNLESS_CI("tests/fixtures/z-image-tiny is absent; run tests/fixtures/gen/z_image_pipeline.py");
    QTemporaryDir dir;
    const std::string base = dir.path().toStdString();
    auto one_step = [&](std::vector<std::string> extra) {
      for (const char* s : {"training.max_steps=1", "sampling.every_n_steps=0", "checkpointing.every_n_steps=1"})
        extra.push_back(s);
      return z_config(extra);
    };
    test::run_training(one_step({"model.path=" + folder}), base + "/first");
    const std::string ckpt = test::checkpoint_dir(test::read_events(base + "/first"));
    checkpoint::ExportOptions o;
    o.format = "diffusers";
    const std::string exported = base + "/exported";
    train::export_checkpoint(ckpt, exported, o);
    o.format = "single-file";
    const std::string single = base + "/z_image_tiny.safetensors";
    train::export_checkpoint(ckpt, single, o);
    const io::SafetensorsReader file(single);
    QVERIFY(file.contains("x_embedder.weight") && file.contains("final_layer.linear.weight") &&
            file.contains("noise_refiner.0.attention.qkv.weight") && file.contains("layers.1.attention.out.weight") &&
            file.contains("layers.0.attention.q_norm.weight") && file.contains("norm_final.weight") &&
            !file.contains("all_x_embedder.2-1.weight") && !file.contains("layers.0.attention.to_q.weight"));
    const io::SafetensorsReader diffusers(exported + "/transformer/diffusion_pytorch_model.safetensors");
    const models::ZImageFile reader(single);
    const models::ZImageConfig c = reader.config(folder);
    QCOMPARE(file.tensor("layers.0.attention.qkv.weight").size(0), 3 * c.dim);
    for (const auto& e : diffusers.entries()) {
      const at::Tensor t = reader.tensor(e.name, c);
      QVERIFY2(t.defined() && at::equal(t, diffusers.tensor(e.name)), e.name.c_str());
    }
    {
      std::ostringstream listing;
      models::z_image_family().describe(listing, single, folder);
      QVERIFY2(listing.str().find("single-file layout") != std::string::npos, listing.str().c_str());
    }
    test::run_training(one_step({"model.path=" + exported}), base + "/again");
    const auto want = test::losses(test::read_events(base + "/again"));
    const auto from_file = one_step({"model.path=" + single, "model.config_path=" + folder});
    QCOMPARE(QString::fromStdString(models::family_of(from_file).name()), QString("z-image"));
    test::run_training(from_file, base + "/from-file");
    QCOMPARE(test::losses(test::read_events(base + "/from-file")), want);
    // ComfyUI's other files: the VAE in the LDM names (ae.safetensors) and Qwen3 as one file, with a
    // folder holding only configs, tokenizer and scheduler.
    {
      const fs::path bare = base + "/configs-only";
      fs::copy(folder, bare, fs::copy_options::recursive);
      for (const char* part : {"transformer", "vae", "text_encoder"})
        for (const auto& f : fs::directory_iterator(bare / part))
          if (f.path().extension() == ".safetensors" || f.path().string().ends_with(".index.json")) fs::remove(f.path());
      const io::SafetensorsReader vae(folder + "/vae/diffusion_pytorch_model.safetensors");
      std::vector<std::string> names;
      for (const auto& e : vae.entries()) names.push_back(e.name);
      std::vector<std::pair<std::string, at::Tensor>> ae;
      for (const auto& [d, l] : models::single_file_vae_names(names, static_cast<int>(
                                    models::AutoencoderKLConfig::from_file(folder + "/vae/config.json").block_out_channels.size()))) {
        at::Tensor t = vae.tensor(d);
        if (models::single_file_vae_is_conv(l) && t.dim() == 2) t = t.reshape({t.size(0), t.size(1), 1, 1});
        ae.emplace_back(l, t);
      }
      QCOMPARE(ae.size(), names.size());
      io::write_safetensors(base + "/ae.safetensors", ae);
      std::vector<std::pair<std::string, at::Tensor>> qwen;
      for (const auto& f : fs::directory_iterator(fs::path(folder) / "text_encoder"))
        if (f.path().extension() == ".safetensors") {
          const io::SafetensorsReader shard(f.path().string());
          for (const auto& e : shard.entries()) qwen.emplace_back(e.name, shard.tensor(e.name));
        }
      io::write_safetensors(base + "/qwen_3_tiny.safetensors", qwen);
      test::run_training(one_step({"model.path=" + single, "model.config_path=" + bare.string(),
                                   "model.vae_path=" + base + "/ae.safetensors",
                                   "model.text_encoder_path=" + base + "/qwen_3_tiny.safetensors"}),
                         base + "/comfy");
      QCOMPARE(test::losses(test::read_events(base + "/comfy")), want);
    }
    // A LoRA run on the file: --merge starts from the file's tensors (a layer without adapters is
    // the file's own).
    test::run_training(one_step({"model.path=" + single, "model.config_path=" + folder, "training.method=lora"}),
                       base + "/lora");
    checkpoint::ExportOptions merge;
    merge.format = "safetensors";
    merge.merge = true;
    train::export_checkpoint(test::checkpoint_dir(test::read_events(base + "/lora")), base + "/merged.safetensors", merge);
    const io::SafetensorsReader merged(base + "/merged.safetensors");
    QVERIFY(at::equal(merged.tensor("all_x_embedder.2-1.weight"), diffusers.tensor("all_x_embedder.2-1.weight")));
    // Refusals, before a run folder exists: a file without its refiner blocks names the first
    // missing key; a file without model.config_path names that key.
    {
      std::vector<std::pair<std::string, at::Tensor>> cut;
      for (const auto& e : file.entries())
        if (!e.name.starts_with("noise_refiner.")) cut.emplace_back(e.name, file.tensor(e.name));
      io::write_safetensors(base + "/cut.safetensors", cut);
      try {
        z_config({"model.path=" + base + "/cut.safetensors", "model.config_path=" + folder});
        QFAIL("a single file without its noise refiner validated");
      } catch (const config::ConfigError& e) {
        QVERIFY2(QString(e.what()).contains("cut.safetensors") && QString(e.what()).contains("noise_refiner.0."), e.what());
      }
      try {
        z_config({"model.path=" + single});
        QFAIL("a single file without model.config_path validated");
      } catch (const config::ConfigError& e) {
        QVERIFY2(QString(e.what()).contains("model.config_path"), e.what());
      }
    }
  }

  // A pipeline folder with a Qwen3 tokenizer that lacks the chat tokens, or a text encoder config of
  // another size than its weights, is refused by the check train, launch and cache make before they
  // create anything (models::model_files_problem) and by the loader, naming the file and the key;
  // Qwen3's weights are read only when a caption needs them, so their headers are checked against
  // the config at once.
  void badPipelineFilesAreRefusedNamingFileAndKey() {
    const std::string folder = test::peerFixture("z-image-tiny").toStdString();
    if (!fs::exists(folder)) ZS_SKIP_UNLESS_CI("tests/fixtures/z-image-tiny is absent; run tests/fixtures/gen/z_image_pipeline.py");
    QTemporaryDir dir;
    auto copy = [&](const std::string& name) {
      const fs::path to = dir.path().toStdString() + "/" + name;
      fs::copy(folder, to, fs::copy_options::recursive);
      return to;
    };
    auto refused = [&](const fs::path& path, const std::vector<QString>& words) {
      const auto cfg = z_config({"model.path=" + path.string()});
      // What train, launch and cache ask before they create anything (config/trainability.h).
      const QString problem = QString::fromStdString(models::model_files_problem(cfg));
      for (const auto& w : words) QVERIFY2(problem.contains(w), qPrintable("model_files_problem: " + problem));
      try {
        models::family_of(cfg).build(cfg, {}, {});
        QFAIL(qPrintable("built from " + QString::fromStdString(path.string())));
      } catch (const Error& e) {
        for (const auto& w : words) QVERIFY2(QString(e.what()).contains(w), e.what());
      }
    };
    {
      const fs::path no_chat = copy("no-chat-tokens");
      for (const char* f : {"tokenizer_config.json", "tokenizer.json"}) {
        const fs::path file = no_chat / "tokenizer" / f;
        nlohmann::json j = io::read_json_file(file.string(), "test");
        if (j.contains("added_tokens_decoder"))
          for (auto it = j["added_tokens_decoder"].begin(); it != j["added_tokens_decoder"].end();)
            it = (*it)["content"] == "<|im_start|>" ? j["added_tokens_decoder"].erase(it) : std::next(it);
        if (j.contains("added_tokens")) {
          nlohmann::json kept = nlohmann::json::array();
          for (const auto& t : j["added_tokens"])
            if (t["content"] != "<|im_start|>") kept.push_back(t);
          j["added_tokens"] = kept;
        }
        io::write_file_atomic(file.string(), j.dump());
      }
      refused(no_chat, {"tokenizer", "<|im_start|>"});
    }
    {
      const fs::path wider = copy("wider-config");
      const fs::path file = wider / "text_encoder" / "config.json";
      nlohmann::json j = io::read_json_file(file.string(), "test");
      j["intermediate_size"] = j["intermediate_size"].get<int>() + 8;
      io::write_file_atomic(file.string(), j.dump());
      refused(wider, {"text_encoder", "config.json", "mlp.", "different sizes"});
    }
  }

  // Qwen3 loads on first use: a model whose text cache holds every caption never reads it (a run
  // after `zerostudio cache`); the cached rows equal fresh ones.
  void qwen3LoadsOnlyWhenACaptionIsNotCached() {
    const std::string folder = test::peerFixture("z-image-tiny").toStdString();
    if (!fs::exists(folder)) ZS_SKIP_UNLESS_CI("tests/fixtures/z-image-tiny is absent; run tests/fixtures/gen/z_image_pipeline.py");
    QTemporaryDir dir;
    data::LatentCache cache(dir.path().toStdString(), "z-image", std::string("text"));
    const std::vector<std::string> prompts = {"a red circle", "一只猫", "a blue square on a green field"};
    const auto cfg = z_config({"model.path=" + folder});
    c10::NoGradGuard no_grad;
    {
      auto filler = models::ZImageModel::load_pipeline(folder, {}, /*with_transformer=*/false);
      filler.configure(cfg);
      QVERIFY(!filler.text_encoder);
      const models::TextConditioning fresh = filler.condition(prompts, at::kCPU, &cache);
      QVERIFY(filler.text_encoder);
      const models::TextConditioning direct = filler.condition(prompts, at::kCPU);
      QVERIFY(at::equal(fresh.context, direct.context) && at::equal(fresh.mask, direct.mask));
    }
    auto trainer = models::ZImageModel::load_pipeline(folder, {}, /*with_transformer=*/false);
    trainer.configure(cfg);
    const models::TextConditioning cached = trainer.condition({prompts[2], prompts[0]}, at::kCPU, &cache);
    QVERIFY2(!trainer.text_encoder, "Qwen3 was loaded although every caption was cached");
    QCOMPARE(cached.context.size(0), std::int64_t{2});
  }

  // z-image-turbo: the distilled model samples as its card says (8 forwards, no guidance) and a
  // training config is warned that training Turbo itself wears the distillation off; a Turbo folder
  // or ComfyUI file is known by its name.
  void turboPresetSamplesInEightStepsWithoutGuidance() {
    const auto turbo = test::small_config({"model.preset=z-image-turbo", "model.prediction_type=epsilon"});
    const models::ModelFamily& family = models::family_of(turbo);
    QCOMPARE(QString::fromStdString(family.name()), QString("z-image"));
    QCOMPARE(family.default_sampling_steps(turbo), std::int64_t{8});
    QCOMPARE(family.default_guidance_scale(turbo), 0.0);
    bool warned = false;
    for (const auto& f : family.check(turbo)) warned |= f.warning && f.message.find("de-distillation") != std::string::npos;
    QVERIFY(warned);
    const auto base_model = test::small_config({"model.preset=z-image", "model.prediction_type=epsilon"});
    QCOMPARE(family.default_sampling_steps(base_model), std::int64_t{50});
    QCOMPARE(family.default_guidance_scale(base_model), 5.0);
    auto named = base_model;
    named.model.path = "/models/Tongyi-MAI/Z-Image-Turbo/";
    QCOMPARE(family.default_sampling_steps(named), std::int64_t{8});
  }
};

ZS_TEST_MAIN(TestZImageE2E);
#include "tst_z_image_e2e.moc"
