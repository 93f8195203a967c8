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

#include "checkpoint/checkpoint.h"
#include "config/config_loader.h"
#include "data/shapes.h"
#include "io/safetensors.h"
#include "models/model_family.h"
#include "models/text_conditioning.h"
#include "models/lora.h"
#include "models/z_image/z_image_family.h"
#include "models/z_image/z_image_model.h"
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
    checkpoint::ExportOptions o;
    o.format = "lora-kohya";
    try {
      train::export_checkpoint(ckpt, base + "/x.safetensors", o);
      QFAIL("lora-kohya accepted for Z-Image");
    } catch (const std::exception& e) {
      QVERIFY2(std::string(e.what()).find("lora-diffusers, lora-musubi, lora-aitoolkit") != std::string::npos, e.what());
    }
  }
};

ZS_TEST_MAIN(TestZImageE2E);
#include "tst_z_image_e2e.moc"
