// End to end: LoRA and text-encoder training through the Trainer (training.method,
// training.train_text_encoder, the lora section): what trains, what a checkpoint holds and
// refers to, resume (also at another stage), a changed base refused, the pipelines' encoders.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <filesystem>
#include <optional>
#include <set>

#include <nlohmann/json.hpp>

#include "checkpoint/checkpoint.h"
#include "train/checkpoint_export.h"
#include "checkpoint/sharded_state.h"
#include "core/error.h"
#include "io/image.h"
#include "io/safetensors.h"
#include "models/sd/diffusion_model.h"
#include "models/sd/lora_file.h"
#include "models/weights.h"
#include "settings/trainer_config.h"
#include "train/trainer.h"

#include <QTemporaryDir>
#include <QtTest>

#include "model_support.h"
#include "test_support.h"

using namespace zs;
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

/// Parameter names and elements a checkpoint holds, by unit.
struct Held {
  std::set<std::string> units, names;
  std::int64_t numel = 0;
};

Held held(const std::string& checkpoint) {
  const auto info = checkpoint::open_checkpoint(checkpoint);
  Held h;
  for (const auto& unit : info.meta["sharding"]["units"]) {
    h.units.insert(unit["name"].get<std::string>());
    h.numel += unit["numel"].get<std::int64_t>();
    for (const auto& p : unit["params"]) h.names.insert(p["name"].get<std::string>());
  }
  return h;
}

bool is_adapter(const std::string& name) {
  return name.ends_with(".lora_down.weight") || name.ends_with(".lora_up.weight");
}

train::RunSummary train_run(const config::TrainerConfig& cfg, const std::string& run_dir, std::string resume = {}) {
  train::TrainerOptions o;
  o.run_dir = run_dir;
  o.resume = std::move(resume);
  train::TrainerCommands commands;
  return train::Trainer(cfg, o).run(commands);
}

checkpoint::ExportResult export_as(const std::string& ckpt, const std::string& out, const std::string& format,
                                   bool merge = false, std::optional<at::ScalarType> dtype = {}) {
  checkpoint::ExportOptions o;
  o.format = format;
  o.merge = merge;
  o.dtype = dtype;
  return train::export_checkpoint(ckpt, out, o);
}

/// Rows of a fixed random batch through `unet` ([2, C, H, W] samples, timesteps 10 and 700).
at::Tensor unet_output(models::UNet2DConditionModel& unet, std::int64_t channels, std::int64_t size, std::int64_t context) {
  at::Generator gen = at::detail::createCPUGenerator(5);
  const at::Tensor x = at::randn({2, channels, size, size}, gen);
  const at::Tensor ctx = at::randn({2, 4, context}, gen);
  c10::NoGradGuard no_grad;
  unet->eval();
  return unet->forward(x, at::tensor({10, 700}, at::kLong), ctx);
}

}  // namespace

class TestLoraE2E : public QObject {
  Q_OBJECT

 private slots:

  // The quickstart with adapters on the UNet and its text encoder: only adapters train and are
  // saved; the checkpoint names its base (the run's model folder) by hash; samples are drawn.
  void quickstartLoraCheckpointsOnlyAdapters() {
    QTemporaryDir dir;
    const std::string run = dir.path().toStdString() + "/run";
    const auto cfg = zs::test::small_config({"training.method=lora", "training.train_text_encoder=lora", "lora.rank=4",
                                             "training.max_steps=6", "sampling.every_n_steps=6",
                                             "checkpointing.every_n_steps=6", "optimizer.lr=0.01"});
    const auto summary = train_run(cfg, run);
    QCOMPARE(summary.step, std::int64_t{6});
    const auto events = zs::test::read_events(run);
    const auto l = zs::test::losses(events);
    QVERIFY(!l.empty() && std::isfinite(l.back()));
    QVERIFY(fs::exists(run + "/samples/step_6/grid.png"));
    const Held h = held(zs::test::checkpoint_dir(events));
    QCOMPARE(h.units, (std::set<std::string>{"lora_unet", "lora_text_encoder"}));
    bool unet = false, text = false;
    for (const auto& name : h.names) {
      QVERIFY2(is_adapter(name), name.c_str());
      unet |= name.starts_with("unet.");
      text |= name.starts_with("text_encoder.");
    }
    QVERIFY(unet && text);
    // Small: the adapters are a few percent of the UNet the base file holds.
    const io::SafetensorsReader base(run + "/model/unet/diffusion_pytorch_model.safetensors");
    std::int64_t base_numel = 0;
    for (const auto& e : base.entries()) base_numel += c10::multiply_integers(e.shape);
    QVERIFY2(h.numel * 10 < base_numel, qPrintable(QString("%1 adapter vs %2 base elements").arg(h.numel).arg(base_numel)));
    const auto meta = checkpoint::open_checkpoint(zs::test::checkpoint_dir(events)).meta;
    QVERIFY2(meta.contains("base_model") && meta["base_model"]["hash"].get<std::string>().size() >= 8, meta.dump().c_str());
    QCOMPARE(meta["lora"]["rank"].get<int>(), 4);
    QVERIFY(meta["lora"]["unet"].get<bool>() && meta["lora"]["text_encoders"].get<bool>());
    // The log says what was adapted.
    bool said = false;
    for (const auto& e : events)
      if (e["type"] == "log" && e["message"].get<std::string>().starts_with("LoRA: ")) said = true;
    QVERIFY(said);
  }

  // The quickstart's LoRA on an NF4 base under ZeRO-3 (issue 53; SD's attention projections have no
  // bias): it trains and samples, the log says what was quantized, and the base written beside the
  // run for its adapter checkpoints is the full-precision one (saved before the optimizer took it).
  void quickstartLoraOnAQuantizedBase() {
    QTemporaryDir dir;
    const std::string run = dir.path().toStdString() + "/run";
    const auto cfg = zs::test::small_config({"training.method=lora", "training.train_text_encoder=lora", "lora.rank=4",
                                             "model.base_precision=nf4", "zero.stage=3", "training.max_steps=4",
                                             "sampling.every_n_steps=4", "checkpointing.every_n_steps=4", "optimizer.lr=0.01"});
    QCOMPARE(train_run(cfg, run).step, std::int64_t{4});
    const auto events = zs::test::read_events(run);
    const auto l = zs::test::losses(events);
    QVERIFY(l.size() == 4 && std::isfinite(l.back()));
    QVERIFY(fs::exists(run + "/samples/step_4/grid.png"));
    bool said = false;
    for (const auto& e : events)
      said |= e["type"] == "log" && e["message"].get<std::string>().starts_with("base: ") &&
              e["message"].get<std::string>().find("quantized to nf4") != std::string::npos;
    QVERIFY(said);
    const io::SafetensorsReader base(run + "/model/unet/diffusion_pytorch_model.safetensors");
    std::size_t linear = 0;
    for (const auto& e : base.entries())
      if (e.name.ends_with("to_q.weight")) {
        QCOMPARE(e.dtype, std::string("F32"));
        QVERIFY(base.tensor(e.name).abs().sum().item<double>() > 0);
        ++linear;
      }
    QVERIFY(linear > 0);
  }

  // Stop and resume equals a straight run; resuming at stage 3 (the base partitioned, gathered by
  // the hooks) carries on from the same adapters; a changed base is refused, naming it.
  void loraResumesAndRefusesAChangedBase() {
    QTemporaryDir dir;
    const auto cfg = zs::test::small_config({"training.method=lora", "lora.rank=4", "training.max_steps=8",
                                             "sampling.every_n_steps=0", "checkpointing.every_n_steps=4",
                                             "optimizer.lr=0.01", "launch.use_cpu=true"});
    const std::string straight = dir.path().toStdString() + "/straight";
    train_run(cfg, straight);
    const auto want = zs::test::losses(zs::test::read_events(straight));
    QCOMPARE(want.size(), std::size_t{8});

    // The same run stopped after step 4 (its checkpoint), resumed at stage 3.
    const std::string resumed = dir.path().toStdString() + "/resumed";
    auto first = cfg;
    first.training.max_steps = 4;
    train_run(first, resumed);
    auto stage3 = cfg;
    stage3.zero.stage = 3;
    train_run(stage3, resumed, "latest");
    const auto got = zs::test::losses(zs::test::read_events(resumed));
    QCOMPARE(got.size(), want.size());
    for (std::size_t i = 0; i < want.size(); ++i)
      QVERIFY2(std::abs(got[i] - want[i]) <= 1e-5 * std::abs(want[i]),
               qPrintable(QString("step %1: %2 vs %3").arg(i + 1).arg(got[i]).arg(want[i])));

    // Another base under the same path: the resume is refused and says which base.
    const std::string base_file = resumed + "/model/unet/diffusion_pytorch_model.safetensors";
    {
      const io::SafetensorsReader reader(base_file);
      std::vector<std::pair<std::string, at::Tensor>> tensors;
      for (const auto& e : reader.entries()) tensors.emplace_back(e.name, reader.tensor(e.name).clone());
      tensors.front().second.add_(1.0);
      io::write_safetensors(base_file, tensors, {{"format", "pt"}});
    }
    auto more = cfg;
    more.training.max_steps = 10;
    try {
      train_run(more, resumed, "latest");
      QFAIL("resumed onto a changed base");
    } catch (const Error& e) {
      const QString what = e.what();
      QVERIFY2(what.contains("base model") && what.contains(QString::fromStdString(resumed + "/model")) &&
                   what.contains("has changed"),
               e.what());
    }
  }

  // A LoRA checkpoint exports as kohya's and diffusers' LoRA files and, merged, as full weights:
  // the adapters read back from the file onto the base compute what the merged export computes.
  void loraCheckpointExportsAsFilesAndMerged() {
    QTemporaryDir dir;
    const std::string run = dir.path().toStdString() + "/run";
    const auto cfg = zs::test::small_config({"training.method=lora", "training.train_text_encoder=lora", "lora.rank=4",
                                             "lora.alpha=2", "training.max_steps=4", "sampling.every_n_steps=0",
                                             "checkpointing.every_n_steps=4", "optimizer.lr=0.02"});
    train_run(cfg, run);
    const std::string ckpt = zs::test::checkpoint_dir(zs::test::read_events(run));
    const std::string out = dir.path().toStdString() + "/exports";

    // kohya: three tensors a layer, fp16, sd-scripts' metadata.
    export_as(ckpt, out + "/kohya.safetensors", "lora-kohya");
    const io::SafetensorsReader kohya(out + "/kohya.safetensors");
    std::size_t unet_downs = 0, te_downs = 0;
    for (const auto& e : kohya.entries()) {
      if (!e.name.ends_with(".lora_down.weight")) continue;
      QCOMPARE(e.dtype, std::string("F16"));
      unet_downs += e.name.starts_with("lora_unet_");
      te_downs += e.name.starts_with("lora_te_");
    }
    const Held h = held(ckpt);
    std::size_t unet_adapters = 0, te_adapters = 0;
    for (const auto& n : h.names)
      if (n.ends_with(".lora_down.weight")) (n.starts_with("unet.") ? unet_adapters : te_adapters)++;
    QVERIFY(unet_downs > 0 && te_downs > 0);
    QCOMPARE(unet_downs, unet_adapters);
    QCOMPARE(te_downs, te_adapters);
    QCOMPARE(kohya.entries().size(), 3 * (unet_downs + te_downs));
    QCOMPARE(kohya.metadata().at("ss_network_dim"), std::string("4"));
    QCOMPARE(kohya.metadata().at("ss_network_alpha"), std::string("2.0"));
    QCOMPARE(kohya.metadata().at("ss_base_model_version"), std::string("sd_v1"));

    // diffusers, in fp32 to compare exactly: the base with the file's adapters...
    export_as(ckpt, out + "/pytorch_lora_weights.safetensors", "lora-diffusers", false, at::kFloat);
    auto adapted = models::DiffusionModel::load_folder(run + "/model");
    const std::size_t read = checkpoint::read_lora_file(
        out + "/pytorch_lora_weights.safetensors",
        {{models::LoraPart::unet, adapted.unet.ptr().get()}, {models::LoraPart::text_encoder, adapted.text_encoder.ptr().get()}},
        adapted.unet->config(), false);
    QCOMPARE(read, unet_adapters + te_adapters);
    const auto& uc = adapted.unet->config();
    const at::Tensor want = unet_output(adapted.unet, uc.in_channels, 16, uc.cross_attention_dim);
    models::set_lora_enabled(*adapted.unet, false);  // the adapters matter: the base alone differs
    QVERIFY(zs::test::max_abs_diff(unet_output(adapted.unet, uc.in_channels, 16, uc.cross_attention_dim), want) > 1e-4);

    // ... equals the merged diffusers export.
    export_as(ckpt, out + "/merged", "diffusers", true);
    models::UNet2DConditionModel merged(models::UNetConfig::from_file(out + "/merged/unet/config.json"));
    const auto report = models::load_weights(*merged, io::SafetensorsReader(out + "/merged/unet/diffusion_pytorch_model.safetensors"));
    QVERIFY(report.unexpected.empty());
    const at::Tensor got = unet_output(merged, uc.in_channels, 16, uc.cross_attention_dim);
    const double diff = zs::test::max_abs_diff(got, want), scale = want.abs().max().item<double>();
    QVERIFY2(diff <= 1e-5 * scale, qPrintable(QString("merged export differs by %1 (scale %2)").arg(diff).arg(scale)));
    // The text encoder was merged too: it differs from the base's.
    const io::SafetensorsReader te(out + "/merged/text_encoder/model.safetensors");
    const io::SafetensorsReader te_base(run + "/model/text_encoder/model.safetensors");
    bool changed = false;
    for (const auto& e : te.entries())
      changed |= e.name.ends_with("q_proj.weight") && !at::equal(te.tensor(e.name), te_base.tensor(e.name));
    QVERIFY(changed);

    // Single file, merged: the UNet and the text encoder under the original names.
    export_as(ckpt, out + "/merged.safetensors", "single-file", true);
    const io::SafetensorsReader single(out + "/merged.safetensors");
    std::size_t ldm_unet = 0, ldm_text = 0;
    for (const auto& e : single.entries()) {
      ldm_unet += e.name.starts_with("model.diffusion_model.");
      ldm_text += e.name.starts_with("cond_stage_model.transformer.");
    }
    QCOMPARE(ldm_unet, adapted.unet->named_parameters().size());
    QCOMPARE(ldm_text, te.entries().size());

    // Full-weight formats need --merge; LoRA formats need a LoRA checkpoint.
    try {
      export_as(ckpt, out + "/plain", "diffusers");
      QFAIL("exported adapters as full weights");
    } catch (const Error& e) {
      QVERIFY2(QString(e.what()).contains("lora-kohya") && QString(e.what()).contains("--merge"), e.what());
    }
  }

  // A quickstart checkpoint exported as a diffusers folder is a model.path to train on (here
  // LoRA): the run starts from its weights and tokenizer, not a fresh tiny model.
  void exportedQuickstartModelIsABase() {
    QTemporaryDir dir;
    const std::string first = dir.path().toStdString() + "/first", base = dir.path().toStdString() + "/base";
    train_run(zs::test::small_config({"training.max_steps=3", "sampling.every_n_steps=0", "checkpointing.every_n_steps=3",
                                      "ema.enabled=false"}),
              first);
    export_as(zs::test::checkpoint_dir(zs::test::read_events(first)), base, "diffusers");
    QVERIFY(models::DiffusionModel::is_preset_folder(base));
    const std::string second = dir.path().toStdString() + "/second";
    train_run(zs::test::small_config({"model.path=" + base, "training.method=lora", "training.train_text_encoder=lora",
                                      "training.max_steps=2", "sampling.every_n_steps=2", "checkpointing.every_n_steps=2",
                                      "ema.enabled=false"}),
              second);
    // The run's base is the exported model, bit for bit.
    for (const std::string part : {"unet/diffusion_pytorch_model.safetensors", "text_encoder/model.safetensors"}) {
      const io::SafetensorsReader got(second + "/model/" + part), want(base + "/" + part);
      QCOMPARE(got.entries().size(), want.entries().size());
      for (const auto& e : want.entries()) QVERIFY2(at::equal(got.tensor(e.name), want.tensor(e.name)), e.name.c_str());
    }
    QVERIFY(fs::exists(second + "/samples/step_2/grid.png"));
  }

  // A pipeline: LoRA on the UNet with its text encoder trained in full (its own learning rate);
  // the trained encoder's outputs are not cached.
  void pipelineLoraWithAFullTextEncoder() {
    ZS_REQUIRE_SHARED();
    QTemporaryDir dir;
    const std::string run = dir.path().toStdString() + "/run";
    const auto cfg = zs::test::small_config(
        {"model.path=" + zs::test::fixture_path("sd15-tiny"), "model.prediction_type=epsilon", "data.resolution=32",
         "training.method=lora", "training.train_text_encoder=full", "optimizer.text_encoder_lr=0.0005",
         "training.max_steps=3", "sampling.every_n_steps=3", "checkpointing.every_n_steps=3", "ema.enabled=false",
         "data.cache_text_embeddings=true", "data.latent_cache_dir=" + dir.path().toStdString() + "/cache"});
    train_run(cfg, run);
    const auto events = zs::test::read_events(run);
    const Held h = held(zs::test::checkpoint_dir(events));
    QCOMPARE(h.units, (std::set<std::string>{"lora_unet", "text_encoder"}));
    QVERIFY(h.names.contains("text_encoder.text_model.final_layer_norm.weight"));
    for (const auto& name : h.names)
      if (name.starts_with("unet.")) QVERIFY2(is_adapter(name), name.c_str());
    for (const auto& e : events)
      if (e["type"] == "log")
        QVERIFY2(!e["message"].get<std::string>().starts_with("text-embedding cache"), e.dump().c_str());
    QVERIFY(fs::exists(run + "/samples/step_3/grid.png"));
    // Its LoRA file leaves the fully trained encoder out and says so; a merged export writes it.
    const std::string ckpt = zs::test::checkpoint_dir(events);
    const auto lora_file = export_as(ckpt, dir.path().toStdString() + "/lora.safetensors", "lora-kohya");
    QVERIFY(!lora_file.notes.empty() && lora_file.notes[0].find("text_encoder was trained in full") != std::string::npos);
    const std::string merged = dir.path().toStdString() + "/merged";
    export_as(ckpt, merged, "diffusers", true);
    const io::SafetensorsReader te(merged + "/text_encoder/model.safetensors");
    const auto info = checkpoint::open_checkpoint(ckpt);
    const checkpoint::ShardReader shards(ckpt, info.meta["sharding"]);
    const std::string name = "text_model.final_layer_norm.weight";
    QVERIFY(at::equal(te.tensor(name), shards.parameter("text_encoder." + name, "weights").to(at::kFloat)));
    QVERIFY(fs::exists(merged + "/text_encoder/config.json") && fs::exists(merged + "/vae/config.json"));
  }

  // SDXL: text-encoder LoRA adapts both encoders (their own units) beside a fully trained UNet.
  void sdxlTextEncoderLoraAdaptsBoth() {
    ZS_REQUIRE_SHARED();
    QTemporaryDir dir;
    const std::string model = dir.path().toStdString() + "/tiny-sdxl";
    fs::create_directories(model);
    zs::test::write_tiny_sdxl(model);
    const std::string run = dir.path().toStdString() + "/run";
    const auto cfg = zs::test::small_config({"model.path=" + model, "model.prediction_type=epsilon", "data.resolution=32",
                                             "training.train_text_encoder=lora", "lora.rank=2", "training.max_steps=2",
                                             "sampling.every_n_steps=0", "checkpointing.every_n_steps=2",
                                             "ema.enabled=false"});
    train_run(cfg, run);
    const Held h = held(zs::test::checkpoint_dir(zs::test::read_events(run)));
    QVERIFY(h.units.contains("lora_text_encoder") && h.units.contains("lora_text_encoder_2"));
    bool unet = false, one = false, two = false;
    for (const auto& name : h.names) {
      if (name.starts_with("unet.")) unet |= !is_adapter(name);
      one |= name.starts_with("text_encoder.") && is_adapter(name);
      two |= name.starts_with("text_encoder_2.") && is_adapter(name);
    }
    QVERIFY(unet && one && two);
    // Merged exports: both encoders with their adapters folded in; the single file's second
    // encoder in OpenCLIP's layout.
    const std::string ckpt = zs::test::checkpoint_dir(zs::test::read_events(run));
    export_as(ckpt, dir.path().toStdString() + "/merged", "diffusers", true);
    for (const std::string c : {"text_encoder", "text_encoder_2"}) {
      const io::SafetensorsReader got(dir.path().toStdString() + "/merged/" + c + "/model.safetensors");
      const io::SafetensorsReader was(model + "/" + c + "/model.safetensors");
      QCOMPARE(got.entries().size(), was.entries().size());
      const std::string q = "text_model.encoder.layers.0.self_attn.q_proj.weight";
      QVERIFY2(!at::equal(got.tensor(q), was.tensor(q).to(at::kFloat)), c.c_str());
    }
    export_as(ckpt, dir.path().toStdString() + "/merged.safetensors", "single-file", true);
    const io::SafetensorsReader single(dir.path().toStdString() + "/merged.safetensors");
    std::size_t in_proj = 0, first = 0;
    for (const auto& e : single.entries()) {
      in_proj += e.name.starts_with("conditioner.embedders.1.") && e.name.ends_with("attn.in_proj_weight");
      first += e.name.starts_with("conditioner.embedders.0.");
    }
    QVERIFY(in_proj > 0 && first > 0);
  }
};

ZS_TEST_MAIN(TestLoraE2E);
#include "tst_lora_e2e.moc"
