// The FLUX.2 family (models/flux2/) end to end on its tiny preset (configs/quickstart-flux2.yaml): the
// registry finds it, the model predicts the pipelines' velocity (the transformer's output on the
// packed grid at the pipelines' σ: pipelines/flux2/pipeline_flux2_klein.py), samples with true CFG as
// the klein base checkpoints do (none for distilled klein), trains and resumes under another ZeRO
// stage to the same losses, exports a diffusers folder that trains again, and a LoRA run exports the
// diffusers/PEFT layout that lora.init_from reads back; a diffusers FLUX.2 [klein] folder conditions,
// samples and decodes as Flux2KleinPipeline does; Flux.1 parts are refused naming the file.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
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
#include "data/shapes.h"
#include "io/atomic_file.h"
#include "io/json_file.h"
#include "io/safetensors.h"
#include "models/autoencoder_kl.h"
#include "models/flux2/flux2_family.h"
#include "models/flux2/flux2_model.h"
#include "models/flux2/flux2_single_file.h"
#include "models/lora.h"
#include "models/model_family.h"
#include "models/text_conditioning.h"
#include "train/checkpoint_export.h"
#include "train/trainer.h"  // RunSummary
#include "model_support.h"
#include "test_support.h"

using namespace zs;
namespace fs = std::filesystem;

namespace {

config::TrainerConfig f2_config(std::vector<std::string> extra) {
  std::vector<std::string> sets = {"data.num_workers=1", "training.batch_size=4",
                                   "data.generate_count=16", "sampling.steps=2", "ema.enabled=false",
                                   "sampling.images_per_prompt=1", "model.prediction_type=epsilon"};
  const bool path = std::any_of(extra.begin(), extra.end(), [](const std::string& e) { return e.starts_with("model.path="); });
  if (!path) sets.push_back("model.preset=flux2-tiny");
  sets.insert(sets.end(), extra.begin(), extra.end());
  return test::small_config(sets);
}

config::TrainerConfig f2_quickstart() {
  return config::load_config_file((test::sourceDir() + "/configs/quickstart-flux2.yaml").toStdString()).config;
}

/// A copy of the klein fixture folder to alter.
std::string copy_fixture(const std::string& folder, const std::string& to) {
  fs::copy(folder, to, fs::copy_options::recursive);
  return to;
}

}  // namespace

class TestFlux2E2E : public QObject {
  Q_OBJECT

 private slots:
  // The registry finds the preset (a klein base in shape: 50 steps, CFG 4); the prediction is the
  // transformer on the h·w tokens of the patchified grid at float32(σ·1000)/1000; CFG is on above 1.
  void presetPredictsThePipelinesVelocity() {
    const auto cfg = f2_quickstart();
    const models::ModelFamily& family = models::family_of(cfg);
    QCOMPARE(QString::fromStdString(family.name()), QString("flux2"));
    QCOMPARE(family.default_sampling_steps(cfg), std::int64_t{50});
    QCOMPARE(family.default_guidance_scale(cfg), 4.0);
    const auto model = family.build(cfg, data::all_shape_captions(), {});
    auto& f = dynamic_cast<models::Flux2Model&>(*model);
    QVERIFY(!model->has_latent_space() && !model->embeds_guidance());
    QCOMPARE(model->pixel_factor(), std::int64_t{2});
    QCOMPARE(model->sample_channels(), std::int64_t{12});
    QCOMPARE(model->sample_size(16), std::int64_t{8});
    c10::NoGradGuard no_grad;
    const models::TextConditioning cond = model->condition({"a red circle on a black background", "a green square"}, at::kCPU);
    const at::Tensor x = at::randn({2, 12, 4, 6}), sigma = at::tensor({0.3f, 0.8f});
    const at::Tensor out = model->predict(x, sigma, cond, {});
    QCOMPARE(out.sizes().vec(), x.sizes().vec());
    // _pack_latents, _prepare_latent_ids / _prepare_text_ids, timestep / 1000 of the scheduler's σ·1000.
    const at::Tensor tokens = x.reshape({2, 12, 24}).permute({0, 2, 1});
    const at::Tensor direct = f.transformer->forward(tokens, cond.context, (sigma.to(at::kDouble) * 1000).to(at::kFloat) / 1000,
                                                     models::flux2_image_ids(4, 6, x.options()),
                                                     models::flux2_text_ids(cond.context.size(1), x.options()));
    QVERIFY(test::max_abs_diff(out, direct.permute({0, 2, 1}).reshape({2, 12, 4, 6})) < 1e-6);
    QVERIFY(!model->guides(1.0) && model->guides(1.5));
    // Pixels patchified 2×2 (channel c·4 + dy·2 + dx) and back.
    at::Generator gen = at::detail::createCPUGenerator(1);
    const at::Tensor images = at::rand({1, 3, 4, 4}) * 2 - 1;
    const at::Tensor space = model->to_model_space(images, gen);
    QCOMPARE(space.sizes().vec(), (std::vector<std::int64_t>{1, 12, 2, 2}));
    QCOMPARE(space[0][4 * 1 + 2 * 1 + 0][0][1].item<float>(), images[0][1][1][2].item<float>());
    QVERIFY(test::max_abs_diff(model->to_images(space), images) == 0);
  }

  // 2 steps at stage 2, then on to 4 at stage 3: the same losses as 4 straight steps at stage 0
  // (samples drawn on the way); the diffusers export of the straight run trains again.
  void tinyPresetTrainsResumesAndExports() {
    QTemporaryDir dir;
    const std::string base = dir.path().toStdString();
    auto cfg = [](const std::string& stage, int steps) {
      return f2_config({"zero.stage=" + stage, "training.max_steps=" + std::to_string(steps), "scheduler.total_steps=4",
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
    QCOMPARE(io::json_class_name(exported + "/transformer/config.json"), std::string("Flux2Transformer2DModel"));
    const auto again = f2_config({"model.path=" + exported, "training.max_steps=1",
                                  "sampling.every_n_steps=0", "checkpointing.every_n_steps=0"});
    QCOMPARE(QString::fromStdString(models::family_of(again).name()), QString("flux2"));
    QCOMPARE(test::run_training(again, base + "/again").step, std::int64_t{1});
  }

  // tests/fixtures/flux2-klein-tiny/ (a klein base: sharded transformer/ and text_encoder/, Qwen3's
  // tokenizer, AutoencoderKLFlux2 with BatchNorm statistics) as a run loads it, against
  // Flux2KleinPipeline (tests/fixtures/gen/flux2_pipeline.py): encode_prompt's states at
  // max_sequence_length 24 for English and Chinese prompts and the empty negative one, then 3 FlowMatch
  // Euler steps at compute_empirical_mu's sigmas with true CFG 4 from the same latents, arranged as the
  // image logger arranges them, the latents the pipeline returns (denormalized, unpatchified) and the
  // VAE's decoding. Within 1e-5 in float32.
  void pipelineFolderSamplesAsFlux2KleinPipeline() {
    const std::string folder = test::peerFixture("flux2-klein-tiny").toStdString();
    if (!fs::exists(folder)) ZS_SKIP_UNLESS_CI("tests/fixtures/flux2-klein-tiny is absent; run tests/fixtures/gen/flux2_pipeline.py");
    const io::SafetensorsReader ref(test::peerFixture("flux2_pipeline.safetensors").toStdString());
    const auto cfg = f2_config({"model.path=" + folder, "model.max_sequence_length=24"});
    const models::ModelFamily& family = models::family_of(cfg);
    QCOMPARE(QString::fromStdString(family.name()), QString("flux2"));
    QCOMPARE(family.default_sampling_steps(cfg), std::int64_t{50});  // a klein base
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
    const auto n = static_cast<std::int64_t>(prompts.size());
    const models::TextConditioning cond = model->condition(prompts, at::kCPU);
    const models::TextConditioning neg = model->condition(std::vector<std::string>(prompts.size(), ""), at::kCPU);
    close(cond.context, ref.tensor("prompt_embeds"), "the prompts' states");
    for (std::int64_t i = 0; i < n; ++i) close(neg.context[i], ref.tensor("negative_embeds"), "the negative prompt's states");
    const models::TextConditioning both = models::concat_conditioning(neg, cond);
    const at::Tensor start = ref.tensor("start");
    const auto sampler = model->sampler(3, start.sizes());
    at::Tensor x = start;
    QVERIFY(model->guides(4.0));
    for (std::size_t i = 0; i < sampler->steps(); ++i) {
      const auto parts = model->predict(at::cat({x, x}), sampler->timestep(i, 2 * n, at::kCPU), both, {}).chunk(2);
      x = sampler->step(i, model->combine_guidance(parts[0], parts[1], 4.0), x);
    }
    auto& f = dynamic_cast<models::Flux2Model&>(*model);
    const at::Tensor raw = f.vae_model().denormalize_patched(x);
    close(raw, ref.tensor("final"), "the sampled latents");
    close(model->to_images(x), ref.tensor("decoded"), "the decoded images");
  }

  // A distilled klein (model_index.json's is_distilled) samples in 4 steps without guidance; a Flux.1
  // VAE in a FLUX.2 folder is refused naming vae/config.json; the family tells FLUX.2 from Flux.1 by
  // the transformer's class.
  void distilledKleinSamplesWithoutGuidanceAndAFlux1VaeIsRefused() {
    const std::string folder = test::peerFixture("flux2-klein-tiny").toStdString();
    if (!fs::exists(folder)) ZS_SKIP_UNLESS_CI("tests/fixtures/flux2-klein-tiny is absent; run tests/fixtures/gen/flux2_pipeline.py");
    QTemporaryDir dir;
    const std::string distilled = copy_fixture(folder, dir.filePath("distilled").toStdString());
    auto index = io::read_json_file(distilled + "/model_index.json", "index");
    index["is_distilled"] = true;
    io::write_file_atomic(distilled + "/model_index.json", index.dump(2));
    const auto cfg = f2_config({"model.path=" + distilled, "model.max_sequence_length=24"});
    QCOMPARE(models::family_of(cfg).default_sampling_steps(cfg), std::int64_t{4});
    QCOMPARE(models::family_of(cfg).default_guidance_scale(cfg), 1.0);
    const auto model = models::family_of(cfg).build(cfg, {}, {});
    QVERIFY(!model->guides(4.0));

    const std::string flux1_vae = copy_fixture(folder, dir.filePath("flux1-vae").toStdString());
    nlohmann::json vae = io::read_json_file(flux1_vae + "/vae/config.json", "vae");
    vae["_class_name"] = "AutoencoderKL";
    vae.erase("batch_norm_eps");
    vae.erase("batch_norm_momentum");
    vae.erase("patch_size");
    io::write_file_atomic(flux1_vae + "/vae/config.json", vae.dump(2));
    try {
      const auto bad = f2_config({"model.path=" + flux1_vae});
      models::family_of(bad).build(bad, {}, {});
      QFAIL("a Flux.1 VAE was taken for FLUX.2's");
    } catch (const Error& e) {
      QVERIFY2(std::string(e.what()).find("vae/config.json") != std::string::npos &&
                   std::string(e.what()).find("AutoencoderKLFlux2") != std::string::npos,
               e.what());
    }
    const std::string flux1_tiny = test::peerFixture("flux-tiny").toStdString();
    if (fs::exists(flux1_tiny)) {
      QVERIFY(!models::is_flux2_model(flux1_tiny));
      QVERIFY(models::is_flux2_model(folder));
      QCOMPARE(QString::fromStdString(models::family_of(f2_config({"model.path=" + flux1_tiny})).name()), QString("flux"));
    }
  }

  // BFL's single-file layout (models/flux2/flux2_single_file.h, the layout diffusers' single_file_utils.py
  // convert_flux2_transformer_checkpoint_to_diffusers reads; that diffusers reads our file is
  // tests/peers/test_flux2_lora.py's): a run on the fixture folder exports it, every diffusers tensor
  // reads back from it, it trains as model.path with the folder as model.config_path to the exported
  // folder's first loss, a LoRA run on it merges into its weights, and a file cut short or without
  // model.config_path is refused before anything is written.
  void singleFileTrainsAsTheExportedFolder() {
    const std::string folder = test::peerFixture("flux2-klein-tiny").toStdString();
    if (!fs::exists(folder)) ZS_SKIP_UNLESS_CI("tests/fixtures/flux2-klein-tiny is absent; run tests/fixtures/gen/flux2_pipeline.py");
    QTemporaryDir dir;
    const std::string base = dir.path().toStdString();
    auto one_step = [&](std::vector<std::string> extra) {
      for (const char* s : {"training.max_steps=1", "sampling.every_n_steps=0", "checkpointing.every_n_steps=1",
                            "model.max_sequence_length=24"})
        extra.push_back(s);
      return f2_config(extra);
    };
    test::run_training(one_step({"model.path=" + folder}), base + "/first");
    const std::string ckpt = test::checkpoint_dir(test::read_events(base + "/first"));
    checkpoint::ExportOptions o;
    o.format = "diffusers";
    const std::string exported = base + "/exported";
    train::export_checkpoint(ckpt, exported, o);
    o.format = "single-file";
    const std::string single = base + "/flux-2-klein-tiny.safetensors";
    train::export_checkpoint(ckpt, single, o);
    const io::SafetensorsReader file(single);
    QVERIFY(file.contains("img_in.weight") && file.contains("double_blocks.0.img_attn.qkv.weight") &&
            file.contains("double_blocks.0.txt_attn.norm.key_norm.scale") && file.contains("single_blocks.1.linear1.weight") &&
            file.contains("final_layer.adaLN_modulation.1.weight") && file.contains("double_stream_modulation_img.lin.weight") &&
            !file.contains("x_embedder.weight") && !file.contains("transformer_blocks.0.attn.to_q.weight"));
    QVERIFY(models::is_flux2_model(single));
    const io::SafetensorsReader diffusers(exported + "/transformer/diffusion_pytorch_model.safetensors");
    const models::Flux2File reader(single);
    const models::Flux2Config c = reader.config(folder);
    QCOMPARE(file.tensor("double_blocks.0.img_attn.qkv.weight").size(0), 3 * c.inner_dim());
    // BFL's final modulation is (shift, scale), diffusers' (scale, shift).
    const at::Tensor norm_out = diffusers.tensor("norm_out.linear.weight");
    QVERIFY(at::equal(file.tensor("final_layer.adaLN_modulation.1.weight").narrow(0, 0, c.inner_dim()),
                      norm_out.narrow(0, c.inner_dim(), c.inner_dim())));
    for (const auto& e : diffusers.entries()) {
      const at::Tensor t = reader.tensor(e.name, c);
      QVERIFY2(t.defined() && at::equal(t, diffusers.tensor(e.name)), e.name.c_str());
    }
    {
      std::ostringstream listing;
      models::flux2_family().describe(listing, single, folder);
      QVERIFY2(listing.str().find("single-file layout") != std::string::npos, listing.str().c_str());
    }
    test::run_training(one_step({"model.path=" + exported}), base + "/again");
    const auto want = test::losses(test::read_events(base + "/again"));
    const auto from_file = one_step({"model.path=" + single, "model.config_path=" + folder});
    QCOMPARE(QString::fromStdString(models::family_of(from_file).name()), QString("flux2"));
    test::run_training(from_file, base + "/from-file");
    QCOMPARE(test::losses(test::read_events(base + "/from-file")), want);
    // A LoRA run on the file: --merge starts from the file's tensors (a layer without adapters is
    // the file's own).
    test::run_training(one_step({"model.path=" + single, "model.config_path=" + folder, "training.method=lora"}),
                       base + "/lora");
    checkpoint::ExportOptions merge;
    merge.format = "safetensors";
    merge.merge = true;
    train::export_checkpoint(test::checkpoint_dir(test::read_events(base + "/lora")), base + "/merged.safetensors", merge);
    const io::SafetensorsReader merged(base + "/merged.safetensors");
    QVERIFY(at::equal(merged.tensor("x_embedder.weight"), diffusers.tensor("x_embedder.weight")));
    QVERIFY(at::equal(merged.tensor("norm_out.linear.weight"), norm_out));
    // Refusals, before a run folder exists.
    {
      std::vector<std::pair<std::string, at::Tensor>> cut;
      for (const auto& e : file.entries())
        if (!e.name.starts_with("single_blocks.1.")) cut.emplace_back(e.name, file.tensor(e.name));
      io::write_safetensors(base + "/cut.safetensors", cut);
      try {
        f2_config({"model.path=" + base + "/cut.safetensors", "model.config_path=" + folder});
        QFAIL("a single file without its last single block validated");
      } catch (const config::ConfigError& e) {
        QVERIFY2(QString(e.what()).contains("cut.safetensors") && QString(e.what()).contains("single_blocks.1."), e.what());
      }
      try {
        f2_config({"model.path=" + single});
        QFAIL("a single file without model.config_path validated");
      } catch (const config::ConfigError& e) {
        QVERIFY2(QString(e.what()).contains("model.config_path"), e.what());
      }
    }
  }

  // Flux.1 and FLUX.2 parts look alike; each is told apart by its names and refused naming file and
  // key: a FLUX.2 transformer in BFL's single-file layout (double_blocks… as Flux.1's, but one shared
  // modulation) is FLUX.2's (here without the folder it needs), Flux.1's BFL file stays Flux.1's, a FLUX.2 VAE is
  // refused by a Flux.1 run, and a Flux.1 LoRA by FLUX.2 (names it has not, shapes it has not).
  void flux1AndFlux2PartsAreToldApart() {
    QTemporaryDir dir;
    const std::string file = dir.filePath("flux2-klein-4b.safetensors").toStdString();
    io::write_safetensors(file, {{"double_blocks.0.img_attn.qkv.weight", at::zeros({24, 8})},
                                 {"double_stream_modulation_img.lin.weight", at::zeros({48, 8})},
                                 {"single_blocks.0.linear1.weight", at::zeros({40, 8})}});
    QVERIFY(models::is_flux2_model(file));
    try {
      test::small_config({"model.path=" + file});
      QFAIL("a FLUX.2 single file was accepted");
    } catch (const config::ConfigError& e) {
      QVERIFY2(QString(e.what()).contains("model.config_path") && QString(e.what()).contains("single-file FLUX.2 transformer"),
               e.what());
    }
    const std::string flux1 = test::peerFixture("flux_bfl.safetensors").toStdString();
    if (fs::exists(flux1)) QVERIFY(!models::is_flux2_model(flux1));
    const std::string flux2_vae = test::peerFixture("flux2-klein-tiny/vae/diffusion_pytorch_model.safetensors").toStdString();
    if (!fs::exists(flux2_vae)) ZS_SKIP_UNLESS_CI("tests/fixtures/flux2-klein-tiny is absent; run tests/fixtures/gen/flux2_pipeline.py");
    try {
      models::load_vae_file(models::AutoencoderKLConfig::flux1(), flux2_vae);
      QFAIL("a FLUX.2 VAE was read as Flux.1's");
    } catch (const Error& e) {
      QVERIFY2(std::string(e.what()).find(flux2_vae) != std::string::npos &&
                   std::string(e.what()).find("a FLUX.2 VAE") != std::string::npos,
               e.what());
    }
    const auto cfg = f2_config({"training.method=lora"});
    auto model = models::family_of(cfg).build(cfg, data::all_shape_captions(), {});
    models::LoraOptions lo;
    lo.rank = 4;
    model->attach_denoiser_lora(models::flux2_family().default_lora_targets(), lo, 3);
    for (const auto& [key, shape] : std::vector<std::pair<std::string, std::vector<std::int64_t>>>{
             {"transformer.single_transformer_blocks.0.proj_mlp.lora_A.weight", {4, 64}},  // Flux.1's single block
             {"transformer.transformer_blocks.0.attn.to_q.lora_A.weight", {4, 3072}}}) {   // Flux.1 [dev]'s width
      const std::string lora = dir.filePath("flux1.safetensors").toStdString();
      std::vector<std::int64_t> up = {shape[1], shape[0]};
      const std::string up_key = key.substr(0, key.size() - std::string("lora_A.weight").size()) + "lora_B.weight";
      io::write_safetensors(lora, {{key, at::zeros(shape)}, {up_key, at::zeros(up)}});
      try {
        model->load_lora_file(lora);
        QFAIL(("a Flux.1 LoRA was read into FLUX.2: " + key).c_str());
      } catch (const std::exception& e) {
        QVERIFY2(std::string(e.what()).find("flux1.safetensors") != std::string::npos, e.what());
      }
    }
  }

  // A LoRA run on the preset exports the diffusers/PEFT layout (double-stream attention and the single
  // blocks' fused projections) and ai-toolkit's on BFL's names, lora.init_from reads the first back
  // as the trained update, and a Z-Image LoRA is refused naming the file.
  void loraExportsAndReadsBack() {
    QTemporaryDir dir;
    const std::string base = dir.path().toStdString();
    const auto cfg = f2_config({"training.method=lora", "lora.rank=4", "lora.alpha=2", "training.max_steps=2",
                                "sampling.every_n_steps=0", "checkpointing.every_n_steps=2"});
    test::run_training(cfg, base + "/run");
    const std::string ckpt = test::checkpoint_dir(test::read_events(base + "/run"));
    checkpoint::ExportOptions o;
    o.format = "lora-diffusers";
    o.dtype = at::kFloat;
    const std::string file = base + "/lora.safetensors";
    train::export_checkpoint(ckpt, file, o);
    {
      const io::SafetensorsReader f(file);
      for (const char* name : {"transformer.transformer_blocks.0.attn.to_q.lora_A.weight",
                               "transformer.transformer_blocks.0.attn.to_out.0.lora_B.weight",
                               "transformer.single_transformer_blocks.0.attn.to_qkv_mlp_proj.lora_A.weight",
                               "transformer.single_transformer_blocks.3.attn.to_out.lora_B.weight"})
        QVERIFY2(f.contains(name), name);
    }
    // ai-toolkit's layout on BFL's module names (what ComfyUI loads): q, k and v in one fused module,
    // its down the three stacked and its up block-diagonal, every module padded to that rank.
    o.format = "lora-aitoolkit";
    const std::string bfl = base + "/lora-aitoolkit.safetensors";
    train::export_checkpoint(ckpt, bfl, o);
    {
      const io::SafetensorsReader f(bfl);
      const at::Tensor down = f.tensor("diffusion_model.double_blocks.0.img_attn.qkv.lora_A.weight");
      const at::Tensor up = f.tensor("diffusion_model.double_blocks.0.img_attn.qkv.lora_B.weight");
      QCOMPARE(down.sizes().vec(), (std::vector<std::int64_t>{12, 64}));
      QCOMPARE(up.sizes().vec(), (std::vector<std::int64_t>{192, 12}));
      QVERIFY(up.narrow(0, 0, 64).narrow(1, 4, 8).abs().max().item<double>() == 0);  // q's rows see only q's down
      const io::SafetensorsReader peft(file);
      QVERIFY(at::equal(down.narrow(0, 4, 4), peft.tensor("transformer.transformer_blocks.0.attn.to_k.lora_A.weight")));
      QCOMPARE(f.tensor("diffusion_model.single_blocks.0.linear1.lora_A.weight").size(0), std::int64_t{12});
      QVERIFY(f.contains("diffusion_model.single_blocks.3.linear2.lora_B.weight"));
      QVERIFY(!f.contains("diffusion_model.double_blocks.1.txt_attn.qkv.lora_A.weight"));  // the text stream is not a target
    }
    auto trained = [&](const std::string& path, double alpha) {
      auto m = models::family_of(cfg).build(cfg, data::all_shape_captions(), {});
      models::LoraOptions lo;
      lo.rank = 4;
      lo.alpha = alpha;
      m->attach_denoiser_lora(models::flux2_family().default_lora_targets(), lo, 3);
      if (!path.empty() && m->load_lora_file(path) == 0) throw std::runtime_error(path + ": no adapter read");
      std::vector<at::Tensor> deltas;
      for (const models::LoraLayer& l : models::lora_layers(*dynamic_cast<models::Flux2Model&>(*m).transformer))
        deltas.push_back(models::lora_delta(l));
      return deltas;
    };
    double largest = 0;
    for (const auto& d : trained(file, 8.0)) largest = std::max(largest, d.abs().max().item<double>());
    QVERIFY(largest > 0);  // the trained adapters, not fresh ones (whose up is zero)
    const std::string z_lora = base + "/z.safetensors";
    io::write_safetensors(z_lora, {{"transformer.layers.0.attention.to_q.lora_A.weight", at::zeros({4, 64})},
                                   {"transformer.layers.0.attention.to_q.lora_B.weight", at::zeros({64, 4})}});
    try {
      trained(z_lora, 2.0);
      QFAIL("a Z-Image LoRA was read into FLUX.2");
    } catch (const std::exception& e) {
      QVERIFY2(std::string(e.what()).find("names no layer of this FLUX.2 transformer") != std::string::npos &&
                   std::string(e.what()).find("z.safetensors") != std::string::npos,
               e.what());
    }
  }
};

ZS_TEST_MAIN(TestFlux2E2E);
#include "tst_flux2_e2e.moc"
