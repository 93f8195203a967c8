// End to end for Flux.1 (issue 35): a diffusers Flux folder (tests/fixtures/flux-tiny/, written by
// gen/flux_pipeline.py with the pinned diffusers) trains, samples and exports; a LoRA run exports
// its adapters in diffusers' PEFT layout and merged; the flux-tiny preset resumes at another ZeRO
// stage exactly where a straight run goes, and its exported folder trains again.
#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <sstream>

#include <nlohmann/json.hpp>

#include "checkpoint/checkpoint.h"
#include "train/checkpoint_export.h"
#include "checkpoint/sharded_state.h"
#include "config/config_loader.h"
#include "core/error.h"
#include "io/image.h"
#include "io/safetensors.h"
#include "models/flux/flux_single_file.h"
#include "models/flux/flux_transformer.h"
#include "models/model_family.h"
#include "models/sd/single_file_names.h"
#include "train/trainer.h"

#include <QTemporaryDir>
#include <QtTest>

#include "model_support.h"
#include "test_support.h"

using namespace zs;
namespace fs = std::filesystem;

namespace {

using zs::test::checkpoint_dir;
using zs::test::losses;
using zs::test::read_events;

/// A small Flux run: 16 px shapes, batch 4, checkpoints every `steps`.
config::TrainerConfig flux_config(std::vector<std::string> extra) {
  std::vector<std::string> sets = {"model.prediction_type=epsilon", "data.num_workers=1", "training.batch_size=4",
                                   "data.generate_count=16", "sampling.steps=2", "ema.enabled=false",
                                   "sampling.images_per_prompt=1"};
  sets.insert(sets.end(), extra.begin(), extra.end());
  return zs::test::small_config(sets);
}

train::RunSummary run(const config::TrainerConfig& cfg, const std::string& dir, const std::string& resume = "") {
  train::TrainerOptions opts;
  opts.run_dir = dir;
  opts.resume = resume;
  train::TrainerCommands commands;
  return train::Trainer(cfg, opts).run(commands);
}

double max_diff(const at::Tensor& a, const at::Tensor& b) {
  return (a.to(at::kDouble) - b.to(at::kDouble)).abs().max().item<double>();
}

/// A LoRA run on the fixture's folder (rank 4, alpha 2, ZeRO-3, lr 0.01, no sampling) with `extra`.
config::TrainerConfig fixture_lora_config(const std::string& folder, std::vector<std::string> extra) {
  std::vector<std::string> sets = {"model.path=" + folder, "model.max_sequence_length=16", "training.method=lora",
                                   "lora.rank=4", "lora.alpha=2", "zero.stage=3", "optimizer.lr=0.01",
                                   "sampling.every_n_steps=0"};
  sets.insert(sets.end(), extra.begin(), extra.end());
  return flux_config(sets);
}

/// Checks a merged export against the base folder's transformer files: each adapted weight is the
/// base plus the PEFT file's update (trained away from zero), every other tensor the base's.
/// Returns {adapted, unchanged} counts (0, 0 after a failed check).
std::pair<std::size_t, std::size_t> check_merged(const std::string& merged, const io::SafetensorsReader& lora,
                                                 const std::string& folder) {
  const io::SafetensorsReader full(merged);
  std::size_t adapted = 0, unchanged = 0;
  for (const auto& shard : fs::directory_iterator(folder + "/transformer")) {
    if (shard.path().extension() != ".safetensors") continue;
    const io::SafetensorsReader base(shard.path().string());
    for (const auto& e : base.entries()) {
      const at::Tensor want_base = base.tensor(e.name).to(at::kFloat);
      const std::string stem = "transformer." + e.name.substr(0, e.name.size() - 7);
      if (e.name.ends_with(".weight") && lora.contains(stem + ".lora_A.weight")) {
        const at::Tensor delta = at::matmul(lora.tensor(stem + ".lora_B.weight"), lora.tensor(stem + ".lora_A.weight"));
        if (max_diff(full.tensor(e.name), want_base + delta) >= 1e-6 || max_diff(delta, at::zeros_like(delta)) == 0) {
          qWarning("%s: not the base plus its trained update", e.name.c_str());
          return {0, 0};
        }
        ++adapted;
      } else if (!at::equal(full.tensor(e.name), want_base)) {
        qWarning("%s: not the base's", e.name.c_str());
        return {0, 0};
      }
      else ++unchanged;
    }
  }
  return {adapted, unchanged};
}

}  // namespace

class TestFluxE2E : public QObject {
  Q_OBJECT

 private slots:
  // The fixture's Flux folder fine-tunes in full: only the transformer is trained (and saved), the
  // samples are written, and the diffusers export is the pipeline with the trained transformer,
  // which trains again as model.path.
  void pipelineTrainsSamplesAndExports() {
    QTemporaryDir dir;
    const std::string folder = test::peerFixture("flux-tiny").toStdString();
    const std::string run_dir = dir.path().toStdString() + "/run";
    const config::TrainerConfig cfg =
        flux_config({"model.path=" + folder, "model.max_sequence_length=16", "training.max_steps=3",
                     "sampling.every_n_steps=3", "checkpointing.every_n_steps=3"});
    QCOMPARE(run(cfg, run_dir).step, std::int64_t{3});
    const auto events = read_events(run_dir);
    const auto l = losses(events);
    QCOMPARE(l.size(), std::size_t{3});
    for (double x : l) QVERIFY(std::isfinite(x));
    QCOMPARE(io::read_image(run_dir + "/samples/step_3/000.png").width, 16);
    const auto ckpt = checkpoint::open_checkpoint(checkpoint_dir(events));
    for (const auto& unit : ckpt.meta["sharding"]["units"])
      for (const auto& param : unit["params"]) QVERIFY(param["name"].get<std::string>().rfind("transformer.", 0) == 0);

    const std::string exported = dir.path().toStdString() + "/exported";
    checkpoint::ExportOptions o;
    o.format = "diffusers";
    const auto r = train::export_checkpoint(ckpt.path, exported, o);
    QCOMPARE(r.files.size(), std::size_t{1});
    for (const char* part : {"model_index.json", "vae/config.json", "text_encoder_2/model.safetensors.index.json",
                             "tokenizer_2/spiece.model", "transformer/config.json"})
      QVERIFY2(fs::exists(fs::path(exported) / part), part);
    // The exported transformer is the checkpoint's.
    const checkpoint::ShardReader shards(ckpt.path, ckpt.meta["sharding"]);
    const io::SafetensorsReader file(exported + "/transformer/diffusion_pytorch_model.safetensors");
    std::size_t compared = 0;
    for (const auto& name : shards.parameter_names()) {
      QVERIFY(at::equal(file.tensor(name.substr(12)), shards.parameter(name, "weights").to(at::kFloat)));
      ++compared;
    }
    QCOMPARE(compared, file.entries().size());
    // And trains again.
    const config::TrainerConfig again = flux_config({"model.path=" + exported, "model.max_sequence_length=16",
                                                     "training.max_steps=1", "sampling.every_n_steps=0",
                                                     "checkpointing.every_n_steps=0"});
    QCOMPARE(run(again, dir.path().toStdString() + "/again").step, std::int64_t{1});
    // Black Forest Labs' layout: read back through the loader's mapping (flux_single_file.h), every
    // diffusers tensor is the exported one.
    o.format = "single-file";
    const std::string bfl = dir.path().toStdString() + "/flux1-tiny.safetensors";
    train::export_checkpoint(ckpt.path, bfl, o);
    const io::SafetensorsReader single(bfl);
    QVERIFY(single.contains("double_blocks.0.img_attn.qkv.weight") && single.contains("single_blocks.0.linear1.weight") &&
            single.contains("final_layer.adaLN_modulation.1.weight") && single.contains("guidance_in.in_layer.weight"));
    const models::FluxConfig fc = models::FluxConfig::from_file(exported + "/transformer/config.json");
    std::size_t read_back = 0;
    for (const auto& e : file.entries()) {
      const at::Tensor t = models::bfl_flux_tensor(e.name, [&](const std::string& k) { return single.tensor(k); }, fc, "");
      QVERIFY2(t.defined() && at::equal(t, file.tensor(e.name)), e.name.c_str());
      ++read_back;
    }
    QCOMPARE(read_back, file.entries().size());
    // The BFL file trains as model.path with a diffusers Flux folder as model.config_path for the
    // rest: the same first loss as the exported diffusers folder (the same weights, the same draws);
    // a LoRA run on it merges into the file's weights.
    const config::TrainerConfig from_bfl = flux_config({"model.path=" + bfl, "model.config_path=" + folder,
                                                        "model.max_sequence_length=16", "training.max_steps=1",
                                                        "sampling.every_n_steps=0", "checkpointing.every_n_steps=1"});
    QCOMPARE(run(from_bfl, dir.path().toStdString() + "/from-bfl").step, std::int64_t{1});
    // `model info FILE --config DIR` reads the file as that run did (one reading for both; it
    // refused this tiny file's heads before: issue 59 item 12).
    {
      std::ostringstream listing;
      models::family_of(from_bfl).describe(listing, bfl, folder);
      QVERIFY2(listing.str().find("single-file Flux.1 transformer") != std::string::npos &&
                   listing.str().find(models::BflFile(bfl).config(folder).to_json().dump()) != std::string::npos,
               listing.str().c_str());
      QVERIFY_THROWS_EXCEPTION(zs::Error, models::BflFile(bfl).config());  // its shapes alone: not Flux.1's heads
    }
    QCOMPARE(losses(read_events(dir.path().toStdString() + "/from-bfl")),
             losses(read_events(dir.path().toStdString() + "/again")));
    // ComfyUI's files: the same run from BFL's transformer, ae.safetensors (BFL's autoencoder names),
    // clip_l and t5xxl as one file each, with a folder holding only configs and tokenizers.
    {
      const fs::path bare = dir.path().toStdString() + "/configs-only";
      fs::copy(folder, bare, fs::copy_options::recursive);
      for (const char* c : {"transformer", "vae", "text_encoder", "text_encoder_2"})
        for (const auto& f : fs::directory_iterator(bare / c))
          if (f.path().extension() == ".safetensors" || f.path().string().ends_with(".index.json")) fs::remove(f.path());
      const io::SafetensorsReader vae(folder + "/vae/diffusion_pytorch_model.safetensors");
      std::vector<std::string> names;
      for (const auto& e : vae.entries()) names.push_back(e.name);
      std::vector<std::pair<std::string, at::Tensor>> ae;
      for (const auto& [d, l] : models::single_file_vae_names(names, 2)) {
        at::Tensor t = vae.tensor(d);
        if (models::single_file_vae_is_conv(l) && t.dim() == 2) t = t.reshape({t.size(0), t.size(1), 1, 1});
        ae.emplace_back(l, t);
      }
      QCOMPARE(ae.size(), names.size());
      const std::string ae_file = dir.path().toStdString() + "/ae.safetensors";
      io::write_safetensors(ae_file, ae);
      std::vector<std::pair<std::string, at::Tensor>> t5;
      for (const auto& f : fs::directory_iterator(fs::path(folder) / "text_encoder_2"))
        if (f.path().extension() == ".safetensors") {
          const io::SafetensorsReader shard(f.path().string());
          for (const auto& e : shard.entries()) t5.emplace_back(e.name, shard.tensor(e.name));
        }
      const std::string t5_file = dir.path().toStdString() + "/t5xxl.safetensors";
      io::write_safetensors(t5_file, t5);
      const config::TrainerConfig comfy = flux_config(
          {"model.path=" + bfl, "model.config_path=" + bare.string(), "model.vae_path=" + ae_file,
           "model.text_encoder_path=" + folder + "/text_encoder/model.safetensors", "model.text_encoder_2_path=" + t5_file,
           "model.max_sequence_length=16", "training.max_steps=1", "sampling.every_n_steps=0",
           "checkpointing.every_n_steps=0"});
      QCOMPARE(run(comfy, dir.path().toStdString() + "/comfy").step, std::int64_t{1});
      QCOMPARE(losses(read_events(dir.path().toStdString() + "/comfy")),
               losses(read_events(dir.path().toStdString() + "/again")));
    }
    auto lora_cfg = from_bfl;
    lora_cfg.training.method = "lora";
    QCOMPARE(run(lora_cfg, dir.path().toStdString() + "/lora-bfl").step, std::int64_t{1});
    checkpoint::ExportOptions merge;
    merge.format = "safetensors";
    merge.merge = true;
    const std::string merged = dir.path().toStdString() + "/merged-bfl.safetensors";
    train::export_checkpoint(checkpoint_dir(read_events(dir.path().toStdString() + "/lora-bfl")), merged, merge);
    QVERIFY(at::equal(io::SafetensorsReader(merged).tensor("x_embedder.weight"), file.tensor("x_embedder.weight")));
    // Without model.config_path the BFL file is refused, naming the key.
    try {
      flux_config({"model.path=" + bfl});
      QFAIL("a BFL file without model.config_path validated");
    } catch (const config::ConfigError& e) {
      QVERIFY2(QString(e.what()).contains("model.config_path"), e.what());
    }
    // A full fine-tune has no adapters to write as a LoRA file; the refusal says what to use.
    o.format = "lora-kohya";
    try {
      train::export_checkpoint(ckpt.path, dir.path().toStdString() + "/x.safetensors", o);
      QFAIL("a LoRA export of a full fine-tune accepted");
    } catch (const Error& e) {
      QVERIFY2(QString(e.what()).contains("--format diffusers, single-file or safetensors"), e.what());
    }
  }

  // LoRA on the fixture's transformer (the family's default targets) under ZeRO-3: the adapters
  // export as diffusers' PEFT file (lora_A = down, lora_B = up · alpha/rank) and merged into the
  // base (W + alpha/rank · up·down), every other tensor the base's.
  void loraExportsPeftAndMerged() {
    QTemporaryDir dir;
    const std::string folder = test::peerFixture("flux-tiny").toStdString();
    const std::string run_dir = dir.path().toStdString() + "/run";
    const config::TrainerConfig cfg =
        fixture_lora_config(folder, {"training.max_steps=2", "checkpointing.every_n_steps=2"});
    QCOMPARE(run(cfg, run_dir).step, std::int64_t{2});
    const auto ckpt = checkpoint::open_checkpoint(checkpoint_dir(read_events(run_dir)));
    checkpoint::ExportOptions o;
    o.format = "lora-diffusers";
    o.dtype = at::kFloat;
    const std::string peft = dir.path().toStdString() + "/lora.safetensors";
    train::export_checkpoint(ckpt.path, peft, o);
    const io::SafetensorsReader lora(peft);
    const std::string layer = "transformer.transformer_blocks.0.attn.to_q";
    QVERIFY(lora.contains(layer + ".lora_A.weight") && lora.contains(layer + ".lora_B.weight"));
    QVERIFY(lora.contains("transformer.single_transformer_blocks.0.attn.to_k.lora_A.weight"));
    for (const auto& e : lora.entries())
      QVERIFY2(e.name.rfind("transformer.", 0) == 0 && (e.name.ends_with(".lora_A.weight") || e.name.ends_with(".lora_B.weight")),
               e.name.c_str());
    // kohya's layout (sd-scripts networks/lora_flux.py names on BFL's fused layers): a double
    // block's qkv adapter carries the three parts' ranks, and its update's q rows are to_q's.
    o.format = "lora-kohya";
    const std::string kohya_file = dir.path().toStdString() + "/lora_kohya.safetensors";
    train::export_checkpoint(ckpt.path, kohya_file, o);
    const io::SafetensorsReader kohya(kohya_file);
    QCOMPARE(QString::fromStdString(kohya.metadata().at("ss_network_module")), QString("networks.lora_flux"));
    const std::string qkv = "lora_unet_double_blocks_0_img_attn_qkv";
    const at::Tensor down = kohya.tensor(qkv + ".lora_down.weight"), up = kohya.tensor(qkv + ".lora_up.weight");
    QCOMPARE(down.size(0), std::int64_t{12});  // 3 × rank 4
    const double scale = kohya.tensor(qkv + ".alpha").item<double>() / static_cast<double>(down.size(0));
    const at::Tensor fused = at::matmul(up, down) * scale;
    const at::Tensor to_q = at::matmul(lora.tensor(layer + ".lora_B.weight"), lora.tensor(layer + ".lora_A.weight"));
    QVERIFY(max_diff(fused.narrow(0, 0, to_q.size(0)), to_q) < 1e-6);
    QVERIFY(kohya.contains("lora_unet_single_blocks_0_linear1.lora_down.weight"));
    // Merged: the base plus the update, in float32.
    o.format = "safetensors";
    o.merge = true;
    const std::string merged = dir.path().toStdString() + "/merged.safetensors";
    train::export_checkpoint(ckpt.path, merged, o);
    const auto [adapted, unchanged] = check_merged(merged, lora, folder);
    QVERIFY(adapted > 0 && unchanged > 0);
  }

  // model.base_precision / text_encoder_precision (issue 53) on the fixture's files under ZeRO-3: the
  // blocks' Linear weights are quantized as each unit is read and CLIP-L's and T5's once loaded (the
  // log says how many and the bytes), the run trains (finite losses that move), and the merged
  // export is the full-precision base from the files plus the adapters' update — never the
  // dequantized copy the run computed with. A full fine-tune on a quantized base is refused first.
  void quantizedBaseTrainsAndMergesIntoTheFullPrecisionBase() {
    QTemporaryDir dir;
    const std::string folder = test::peerFixture("flux-tiny").toStdString();
    const std::string run_dir = dir.path().toStdString() + "/run";
    const config::TrainerConfig cfg = fixture_lora_config(
        folder, {"model.base_precision=nf4", "model.text_encoder_precision=fp8", "training.train_text_encoder=none",
                 "training.max_steps=3", "checkpointing.every_n_steps=3", "data.latent_cache_dir=" + dir.path().toStdString() + "/cache"});
    QCOMPARE(run(cfg, run_dir).step, std::int64_t{3});
    const auto events = read_events(run_dir);
    bool base_said = false, text_said = false;
    for (const auto& e : events) {
      if (e["type"] != "log") continue;
      const std::string m = e["message"];
      base_said |= m.starts_with("base: ") && m.find("quantized to nf4 while loading") != std::string::npos;
      text_said |= m.starts_with("text encoders: ") && m.find("kept as fp8") != std::string::npos;
    }
    QVERIFY(base_said && text_said);
    const std::vector<double> l = losses(events);
    QCOMPARE(l.size(), std::size_t{3});
    for (double v : l) QVERIFY(std::isfinite(v));
    const auto ckpt = checkpoint::open_checkpoint(checkpoint_dir(events));
    checkpoint::ExportOptions o;
    o.format = "lora-diffusers";
    o.dtype = at::kFloat;
    const std::string peft = dir.path().toStdString() + "/lora.safetensors";
    train::export_checkpoint(ckpt.path, peft, o);
    const io::SafetensorsReader lora(peft);
    o.format = "safetensors";
    o.merge = true;
    const std::string merged = dir.path().toStdString() + "/merged.safetensors";
    train::export_checkpoint(ckpt.path, merged, o);
    const auto [adapted, unchanged] = check_merged(merged, lora, folder);
    QVERIFY(adapted > 0 && unchanged > 0);
    try {
      flux_config({"model.path=" + folder, "training.method=full", "model.base_precision=fp8"});
      QFAIL("a full fine-tune on an fp8 base was accepted");
    } catch (const config::ConfigError& e) {
      bool named = false;
      for (const auto& p : e.problems()) named |= p.key == "model.base_precision" && p.message.find("training.method") != std::string::npos;
      QVERIFY2(named, e.what());
    }
  }

  // The quantized base's copy in the cache folder (data.cache_quantized_base, issue 53): the first
  // run writes one file per block; a damaged file is read from the model files again; the next
  // run reads the copy (the same losses; tst_base_quant shows the model files' block weights are
  // then left unread), and so does a resumed run; a copy that does not fit the layers is refused
  // naming its file.
  void quantizedBaseCopyIsReadInsteadOfTheModelFiles() {
    QTemporaryDir dir;
    const std::string base = dir.path().toStdString();
    const std::string folder = base + "/flux-tiny";
    fs::copy(test::peerFixture("flux-tiny").toStdString(), folder, fs::copy_options::recursive);
    const std::string cache = base + "/cache";
    auto cfg = [&](int steps) {
      return fixture_lora_config(folder, {"model.base_precision=fp8", "data.latent_cache_dir=" + cache,
                                          "training.max_steps=" + std::to_string(steps), "scheduler.total_steps=4",
                                          "checkpointing.every_n_steps=2"});
    };
    auto base_line = [](const std::string& run_dir) {
      std::string line;
      for (const auto& e : read_events(run_dir))
        if (e["type"] == "log" && e["message"].get<std::string>().starts_with("base: ")) line = e["message"];
      return line;
    };
    auto same_losses = [](const std::vector<double>& a, const std::vector<double>& b, std::size_t n, double tol) {
      if (a.size() < n || b.size() < n) return false;
      for (std::size_t i = 0; i < n; ++i)
        if (!std::isfinite(a[i]) || std::abs(a[i] / b[i] - 1) > tol) return false;
      return true;
    };
    run(cfg(2), base + "/first");
    const std::string first_line = base_line(base + "/first");
    QVERIFY2(first_line.find("quantized to fp8 while loading") != std::string::npos &&
                 first_line.find("kept in") != std::string::npos && first_line.find("from the cache") == std::string::npos,
             first_line.c_str());
    std::vector<fs::path> copies;
    for (const auto& e : fs::recursive_directory_iterator(cache))
      if (e.path().parent_path().filename().string().starts_with("base-") && e.path().extension() == ".safetensors")
        copies.push_back(e.path());
    std::sort(copies.begin(), copies.end());
    const models::FluxConfig fc = models::FluxConfig::from_file(folder + "/transformer/config.json");
    QCOMPARE(static_cast<std::int64_t>(copies.size()), fc.num_layers + fc.num_single_layers);
    QVERIFY2(copies.front().parent_path().filename().string().ends_with("-fp8-v1"), copies.front().c_str());
    const std::vector<double> want = losses(read_events(base + "/first"));

    // A damaged copy of one unit: that unit is read from the files and written again.
    fs::resize_file(copies.front(), 100);
    run(cfg(2), base + "/damaged");
    const std::string damaged_line = base_line(base + "/damaged");
    QVERIFY2(damaged_line.find("from the cache") != std::string::npos &&
                 damaged_line.find("quantized to fp8 while loading") != std::string::npos,
             damaged_line.c_str());
    QVERIFY(fs::file_size(copies.front()) > 100);
    QVERIFY(same_losses(losses(read_events(base + "/damaged")), want, 2, 1e-9));

    run(cfg(4), base + "/second");
    const std::string second_line = base_line(base + "/second");
    QVERIFY2(second_line.find("read as fp8 from the cache") != std::string::npos &&
                 second_line.find("quantized to") == std::string::npos,
             second_line.c_str());
    const std::vector<double> second = losses(read_events(base + "/second"));
    QVERIFY(same_losses(second, want, 2, 1e-9));  // the same codes: the same computation
    QCOMPARE(second.size(), std::size_t{4});

    // Resuming the first run reads the copy as well: on to step 4, the second run's losses.
    run(cfg(4), base + "/first", "latest");
    QVERIFY(base_line(base + "/first").find("read as fp8 from the cache") != std::string::npos);
    QVERIFY(same_losses(losses(read_events(base + "/first")), second, 4, 1e-5));

    // A copy whose codes do not fit the layers (another model's, say): refused, naming the file.
    {
      std::vector<std::pair<std::string, at::Tensor>> wrong;
      {
        const io::SafetensorsReader r(copies.back().string());
        for (const auto& e : r.entries())
          wrong.emplace_back(e.name, e.name.ends_with(":codes") ? r.tensor(e.name).narrow(0, 0, 1).clone() : r.tensor(e.name));
      }
      io::write_safetensors(copies.back().string(), wrong);
    }
    try {
      run(cfg(2), base + "/wrong");
      QFAIL("a copy whose codes do not fit the layers was used");
    } catch (const Error& e) {
      QVERIFY2(std::string(e.what()).find(copies.back().string()) != std::string::npos &&
                   std::string(e.what()).find("delete the folder") != std::string::npos,
               e.what());
    }
  }

  // training.train_text_encoder: lora puts adapters on CLIP-L (T5 never trains; full is refused):
  // they train, and both LoRA files carry them under their formats' names.
  void clipTakesLoraAndT5NeverTrains() {
    QTemporaryDir dir;
    const std::string folder = test::peerFixture("flux-tiny").toStdString();
    const std::string run_dir = dir.path().toStdString() + "/run";
    const config::TrainerConfig cfg =
        flux_config({"model.path=" + folder, "model.max_sequence_length=16", "training.method=lora",
                     "training.train_text_encoder=lora", "optimizer.lr=0.01", "training.max_steps=2",
                     "sampling.every_n_steps=0", "checkpointing.every_n_steps=2"});
    QCOMPARE(run(cfg, run_dir).step, std::int64_t{2});
    const auto ckpt = checkpoint::open_checkpoint(checkpoint_dir(read_events(run_dir)));
    checkpoint::ExportOptions o;
    o.dtype = at::kFloat;
    for (const std::string format : {"lora-diffusers", "lora-kohya"}) {
      o.format = format;
      const std::string out = dir.path().toStdString() + "/" + format + ".safetensors";
      train::export_checkpoint(ckpt.path, out, o);
      const io::SafetensorsReader f(out);
      const std::string prefix = format == "lora-kohya" ? "lora_te1_text_model_encoder_layers_0_self_attn_q_proj"
                                                        : "text_encoder.text_model.encoder.layers.0.self_attn.q_proj";
      const std::string up = prefix + (format == "lora-kohya" ? ".lora_up.weight" : ".lora_B.weight");
      QVERIFY2(f.contains(up), (format + ": no " + up).c_str());
      QVERIFY(f.tensor(up).abs().max().item<double>() > 0);  // trained away from zero
      for (const auto& e : f.entries()) QVERIFY2(e.name.find("text_encoder_2") == std::string::npos, e.name.c_str());
    }
    // Merged into CLIP-L's weights (the fixture's file has transformers 5's names, without "text_model.").
    o.format = "diffusers";
    o.merge = true;
    const auto merged = train::export_checkpoint(ckpt.path, dir.path().toStdString() + "/merged", o);
    QCOMPARE(merged.files.size(), std::size_t{2});  // the transformer and CLIP-L
    const io::SafetensorsReader clip_merged(dir.path().toStdString() + "/merged/text_encoder/model.safetensors");
    const io::SafetensorsReader clip_base(folder + "/text_encoder/model.safetensors");
    const std::string q = "encoder.layers.0.self_attn.q_proj.weight";
    QVERIFY(!at::equal(clip_merged.tensor(q), clip_base.tensor(q)));
    QVERIFY(at::equal(clip_merged.tensor("encoder.layers.0.mlp.fc1.weight"), clip_base.tensor("encoder.layers.0.mlp.fc1.weight")));
    try {
      flux_config({"model.path=" + folder, "training.train_text_encoder=full"});
      QFAIL("train_text_encoder: full accepted for Flux");
    } catch (const config::ConfigError& e) {
      QVERIFY2(QString(e.what()).contains("T5-XXL"), e.what());
    }
  }

  // quickstart-flux's model resumes under another stage: 2 steps at stage 2, then on to 4 at
  // stage 3, the same losses as 4 straight steps at stage 0; its diffusers export trains again.
  void tinyPresetResumesAtAnotherStageAndItsExportTrains() {
    QTemporaryDir dir;
    const std::string base = dir.path().toStdString();
    auto cfg = [](const std::string& stage, int steps) {
      return flux_config({"model.preset=flux-tiny", "zero.stage=" + stage, "training.max_steps=" + std::to_string(steps),
                          "scheduler.total_steps=4", "sampling.every_n_steps=0", "checkpointing.every_n_steps=2"});
    };
    run(cfg("0", 4), base + "/straight");
    run(cfg("2", 2), base + "/resumed");
    run(cfg("3", 4), base + "/resumed", "latest");
    const auto want = losses(read_events(base + "/straight")), got = losses(read_events(base + "/resumed"));
    QCOMPARE(got.size(), want.size());
    for (std::size_t i = 0; i < want.size(); ++i)
      QVERIFY2(std::abs(got[i] / want[i] - 1) < 1e-5, qPrintable(QString("step %1: %2 vs %3").arg(i + 1).arg(got[i]).arg(want[i])));
    checkpoint::ExportOptions o;
    o.format = "diffusers";
    const std::string exported = base + "/exported";
    train::export_checkpoint(checkpoint_dir(read_events(base + "/straight")), exported, o);
    QVERIFY(fs::exists(exported + "/tokenizer/tokenizer.json") && fs::exists(exported + "/text_encoder/model.safetensors"));
    const auto again = flux_config({"model.path=" + exported, "training.max_steps=1", "sampling.every_n_steps=0",
                                    "checkpointing.every_n_steps=0"});
    QCOMPARE(run(again, base + "/again").step, std::int64_t{1});
  }
};

ZS_TEST_MAIN(TestFluxE2E);
#include "tst_flux_e2e.moc"
