// End to end: a few dozen steps of the quickstart model on generated shapes (loss falls,
// samples, events and checkpoints appear), stop + resume equal to an uninterrupted run,
// and the CLI's Ctrl-C path.
#include <ATen/ATen.h>

#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "checkpoint/checkpoint.h"
#include "train/checkpoint_export.h"
#include "models/sd/sd_export.h"
#include "models/sd/diffusion_model.h"
#include "config/config_loader.h"
#include "core/error.h"
#include "io/atomic_file.h"
#include "io/image.h"
#include "io/json_file.h"
#include "io/safetensors.h"
#include "data/dataset.h"
#include "train/frozen_cache.h"
#include "train/trainer.h"

#include <QDir>
#include <QProcess>
#include <QTemporaryDir>
#include <QtTest>

#include "cuda_support.h"
#include "model_support.h"
#include "test_support.h"

using namespace zs;
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

using zs::test::checkpoint_dir;
using zs::test::losses;
using zs::test::read_events;
using zs::test::small_config;

/// The prediction type in an exported diffusers folder's scheduler config.
std::string exported_prediction(const std::string& folder) {
  return io::read_json_file(folder + "/scheduler/scheduler_config.json", "exported scheduler").value("prediction_type", std::string());
}

}  // namespace

class TestTrainE2E : public QObject {
  Q_OBJECT

 private slots:

  // An SDXL-type pipeline trains: both text encoders' penultimate states as context, the pooled
  // embedding of encoder 2 and each sample's size/crop ids through add_embedding; samples decode.
  void sdxlPipelineTrains() {
    ZS_REQUIRE_SHARED();
    QTemporaryDir dir;
    const std::string model = dir.path().toStdString() + "/tiny-sdxl";
    fs::create_directories(model);
    zs::test::write_tiny_sdxl(model);
    const std::string run = dir.path().toStdString() + "/run";
    config::TrainerConfig cfg = small_config({"model.path=" + model, "model.prediction_type=epsilon", "data.resolution=32",
                                              "training.max_steps=6", "sampling.every_n_steps=6", "ema.enabled=false",
                                              "checkpointing.every_n_steps=6"});
    train::TrainerOptions opts;
    opts.run_dir = run;
    train::TrainerCommands commands;
    const auto summary = train::Trainer(cfg, opts).run(commands);
    QCOMPARE(summary.step, std::int64_t{6});
    const auto events = read_events(run);
    const auto l = losses(events);
    QVERIFY(!l.empty() && std::isfinite(l.back()));
    const auto img = io::read_image(run + "/samples/step_6/000.png");
    QCOMPARE(img.width, 32);
    // Only the UNet is trained (and saved): the frozen encoders and VAE are not in the checkpoint.
    const auto ckpt = checkpoint::open_checkpoint(checkpoint_dir(events));
    for (const auto& unit : ckpt.meta["sharding"]["units"])
      for (const auto& param : unit["params"]) QVERIFY(param["name"].get<std::string>().rfind("unet.", 0) == 0);
  }

  // A single-file checkpoint trains (configs and tokenizer from its companion folder) and exports
  // both ways: the diffusers folder carries its frozen components converted to diffusers' names
  // (they load and equal the file's), the single file carries them under their own names.
  void singleFileModelTrainsAndExports() {
    ZS_REQUIRE_SHARED();
    QTemporaryDir dir;
    const std::string fixture = (zs::test::sharedDir() + "/fixtures/sd15-tiny").toStdString();
    const std::string file = dir.path().toStdString() + "/tiny.safetensors";
    checkpoint::convert_to_single_file(fixture, file, {});
    const std::string run = dir.path().toStdString() + "/run";
    config::TrainerConfig cfg = small_config({"model.path=" + file, "model.config_path=" + fixture,
                                              "model.prediction_type=v_prediction", "data.resolution=32", "training.max_steps=3",
                                              "sampling.every_n_steps=0", "ema.enabled=false",
                                              "checkpointing.every_n_steps=3"});
    train::TrainerOptions opts;
    opts.run_dir = run;
    train::TrainerCommands commands;
    QCOMPARE(train::Trainer(cfg, opts).run(commands).step, std::int64_t{3});
    const std::string ckpt = checkpoint_dir(read_events(run));
    checkpoint::ExportOptions o;
    o.format = "diffusers";
    train::export_checkpoint(ckpt, dir.path().toStdString() + "/diffusers", o);
    const auto exported = models::DiffusionModel::load_pipeline(dir.path().toStdString() + "/diffusers", "epsilon");
    const auto original = models::DiffusionModel::load_pipeline(fixture, "epsilon");
    for (const auto& p : original.vae->named_parameters()) QVERIFY(at::equal(p.value(), exported.vae->named_parameters()[p.key()]));
    for (const auto& p : original.text_encoder->named_parameters())
      QVERIFY(at::equal(p.value(), exported.text_encoder->named_parameters()[p.key()]));
    QCOMPARE(exported.clip_tokenizer->vocab_size(), std::size_t{49408});
    QCOMPARE(exported_prediction(dir.path().toStdString() + "/diffusers"), std::string("v_prediction"));
    o.format = "single-file";
    const std::string single = dir.path().toStdString() + "/single.safetensors";
    train::export_checkpoint(ckpt, single, o);
    const io::SafetensorsReader in(file), out(single);
    QCOMPARE(out.entries().size(), in.entries().size());
    for (const auto& e : in.entries())
      if (e.name.rfind("first_stage_model.", 0) == 0 || e.name.rfind("cond_stage_model.", 0) == 0)
        QVERIFY2(at::equal(in.tensor(e.name), out.tensor(e.name)), e.name.c_str());
    // The trained UNet differs from where it started, under the same names.
    QVERIFY(!at::equal(in.tensor("model.diffusion_model.out.2.weight"), out.tensor("model.diffusion_model.out.2.weight")));
  }

  // zero3_init_flag: the model built straight into shards trains exactly as the one built whole
  // and then sharded, for the quickstart's model (fresh weights) and a single file (loaded).
  void zero3InitFlagTrainsTheSameRun() {
    ZS_REQUIRE_SHARED();
    QTemporaryDir dir;
    const std::string file = dir.path().toStdString() + "/tiny.safetensors";
    checkpoint::convert_to_single_file((zs::test::sharedDir() + "/fixtures/sd15-tiny").toStdString(), file, {});
    const std::vector<std::vector<std::string>> models = {
        {}, {"model.path=" + file, "model.config_path=" + (zs::test::sharedDir() + "/fixtures/sd15-tiny").toStdString(),
             "model.prediction_type=epsilon", "data.resolution=32"}};
    int n = 0;
    for (const auto& model : models) {
      std::vector<std::vector<double>> runs;
      // "nvme": the flag with the parameters on NVMe, each shard spilled to a file there as it is
      // cut (ShardedInit) and staged in memory only while in flight (ZeroOptimizer::owned_params).
      for (const std::string flag : {"false", "true", "nvme"}) {
        // Bit-equal losses are a CPU property (CUDA kernels add with atomics, in varying order).
        std::vector<std::string> sets = {"zero.stage=3", "zero.stage3_param_persistence_threshold=1000",
                                         "zero.zero3_init_flag=" + std::string(flag == "false" ? "false" : "true"),
                                         "training.max_steps=4", "sampling.every_n_steps=4",
                                         "checkpointing.every_n_steps=0", "launch.use_cpu=true"};
        if (flag == "nvme") {
          sets.push_back("zero.offload_param.device=nvme");
          sets.push_back("zero.offload_param.nvme_path=" + dir.path().toStdString());
        }
        sets.insert(sets.end(), model.begin(), model.end());
        train::TrainerOptions opts;
        opts.run_dir = dir.path().toStdString() + "/run" + std::to_string(n++);
        train::TrainerCommands commands;
        train::Trainer(small_config(sets), opts).run(commands);
        const auto events = read_events(opts.run_dir);
        bool said = false;
        for (const auto& e : events)
          said |= e["type"] == "log" && e["message"].get<std::string>().rfind("zero3_init_flag: ", 0) == 0;
        QCOMPARE(said, flag != "false");
        runs.push_back(losses(events));
      }
      QCOMPARE(runs[0].size(), std::size_t{4});
      QCOMPARE(runs[1], runs[0]);
      QCOMPARE(runs[2], runs[0]);
    }
  }

  // training.attention: the blocked path trains the run the plain one does (losses within fp32
  // rounding), and the log's line after the first step names the path that ran.
  void attentionPathsTrainTheSameRun() {
    QTemporaryDir dir;
    std::vector<std::vector<double>> runs;
    for (const char* mode : {"plain", "blocked"}) {
      train::TrainerOptions opts;
      opts.run_dir = dir.path().toStdString() + "/" + mode;
      train::TrainerCommands commands;
      train::Trainer(small_config({std::string("training.attention=") + mode, "training.max_steps=3",
                                   "sampling.every_n_steps=0", "checkpointing.every_n_steps=0", "launch.use_cpu=true"}),
                     opts)
          .run(commands);
      const auto events = read_events(opts.run_dir);
      std::string line;
      for (const auto& e : events)
        if (e["type"] == "log" && e["message"].get<std::string>().rfind("attention (", 0) == 0) line = e["message"];
      QVERIFY2(line.find(std::string("attention (training.attention: ") + mode + "): " + mode + " (up to ") == 0,
               line.c_str());
      runs.push_back(losses(events));
    }
    QCOMPARE(runs[1].size(), std::size_t{3});
    for (std::size_t i = 0; i < runs[0].size(); ++i)
      QVERIFY2(std::abs(runs[1][i] - runs[0][i]) <= 1e-4 * std::abs(runs[0][i]),
               qPrintable(QString("step %1: blocked %2, plain %3").arg(i + 1).arg(runs[1][i]).arg(runs[0][i])));
  }

  // training.cpu_checkpointing trains the same run bit for bit, and each rank's metrics say where
  // the kept unit inputs waited: on the device without it, in CPU memory with it.
  void cpuCheckpointingTrainsTheSameRun() {
    QTemporaryDir dir;
    std::vector<std::vector<double>> runs;
    std::vector<json> kept;
    for (bool cpu : {false, true}) {
      train::TrainerOptions opts;
      opts.run_dir = dir.path().toStdString() + (cpu ? "/cpu" : "/device");
      train::TrainerCommands commands;
      train::Trainer(small_config({"training.gradient_checkpointing=true",
                                   std::string("training.cpu_checkpointing=") + (cpu ? "true" : "false"),
                                   "training.max_steps=3", "sampling.every_n_steps=0", "checkpointing.every_n_steps=0",
                                   "launch.use_cpu=true"}),
                     opts)
          .run(commands);
      const auto events = read_events(opts.run_dir);
      runs.push_back(losses(events));
      for (const auto& e : events)
        if (e["type"] == "metrics") kept.push_back(e["ranks"][0]["checkpointed_inputs"]);
    }
    QCOMPARE(runs[0].size(), std::size_t{3});
    QCOMPARE(runs[1], runs[0]);
    QCOMPARE(kept.size(), std::size_t{6});
    for (std::size_t i = 0; i < 3; ++i) {
      QVERIFY2(kept[i]["device"].get<std::int64_t>() > 0 && kept[i]["cpu"].get<std::int64_t>() == 0, kept[i].dump().c_str());
      QVERIFY2(kept[3 + i]["device"].get<std::int64_t>() == 0 && kept[3 + i]["cpu"] == kept[i]["device"],
               kept[3 + i].dump().c_str());
    }
  }

  // A run that changed the prediction type exports a pipeline whose scheduler says so; the rest
  // of the pipeline's scheduler config is kept as it was.
  void diffusersExportCarriesTheRunsPredictionType() {
    ZS_REQUIRE_SHARED();
    QTemporaryDir dir;
    const std::string fixture = (zs::test::sharedDir() + "/fixtures/sd15-tiny").toStdString();
    const std::string run = dir.path().toStdString() + "/run";
    train::TrainerOptions opts;
    opts.run_dir = run;
    train::TrainerCommands commands;
    train::Trainer(small_config({"model.path=" + fixture, "model.prediction_type=v_prediction", "data.resolution=32",
                                 "training.max_steps=1", "sampling.every_n_steps=0", "ema.enabled=false",
                                 "checkpointing.every_n_steps=1"}),
                   opts)
        .run(commands);
    checkpoint::ExportOptions o;
    o.format = "diffusers";
    const std::string out = dir.path().toStdString() + "/diffusers";
    train::export_checkpoint(checkpoint_dir(read_events(run)), out, o);
    QCOMPARE(exported_prediction(out), std::string("v_prediction"));
    json want = io::read_json_file(fixture + "/scheduler/scheduler_config.json", "fixture"),
         got = io::read_json_file(out + "/scheduler/scheduler_config.json", "export");
    want["prediction_type"] = "v_prediction";
    QVERIFY2(got == want, got.dump().c_str());
  }

  // The latent and text-embedding caches: a cold run stores every posterior and caption it
  // encodes, a warm one reads them all, and both train exactly as a run without the caches (the
  // sample is drawn with the same numbers).
  void latentCacheIsExactAndReused() {
    ZS_REQUIRE_SHARED();
    QTemporaryDir dir;
    const std::string model = (zs::test::sharedDir() + "/fixtures/sd15-tiny").toStdString();
    const std::string cache = dir.path().toStdString() + "/cache";
    auto config_for = [&](bool cached) {
      return small_config({"model.path=" + model, "model.prediction_type=epsilon",
                           "data.resolution=32", "training.max_steps=4", "sampling.every_n_steps=4",  // the last step
                           "ema.enabled=false", "checkpointing.every_n_steps=0",
                           std::string("data.cache_latents=") + (cached ? "true" : "false"),
                           std::string("data.cache_text_embeddings=") + (cached ? "true" : "false"),
                           "data.latent_cache_dir=" + cache,
                           "launch.use_cpu=true"});  // bit-equal losses: on the CPU
    };
    auto run = [&](const std::string& name, bool cached) {
      const config::TrainerConfig cfg = config_for(cached);
      train::TrainerOptions opts;
      opts.run_dir = dir.path().toStdString() + "/" + name;
      train::TrainerCommands commands;
      train::Trainer(cfg, opts).run(commands);
      return read_events(opts.run_dir);
    };
    auto cache_line = [](const std::vector<json>& events, const std::string& which = "latent cache: ") {
      for (const auto& e : events)
        if (e["type"] == "log" && e["message"].get<std::string>().rfind(which, 0) == 0 &&
            e["message"].get<std::string>().find(" read, ") != std::string::npos)
          return e["message"].get<std::string>();
      return std::string();
    };
    const auto plain = run("plain", false), cold = run("cold", true);
    // The cold run saw half the dataset; filling the rest as `zerostudio cache` does (its own
    // process, the frozen parts alone) completes the caches.
    {
      const config::TrainerConfig cfg = config_for(true);
      models::DiffusionModel frozen = models::DiffusionModel::load_frozen(model);
      frozen.train(false);
      const train::Caches caches = train::open_caches(cfg, frozen);
      data::LoaderOptions lo = train::loader_options(cfg);
      lo.num_workers = 0;
      lo.content_keys = true;
      data::DataLoader loader(data::scan_dataset(dir.path().toStdString() + "/cold/data"), lo);
      const train::CacheNeeds needs = train::cache_needs(loader, true, 0, 1, {}, train::sampling_prompts(cfg));
      const auto before = train::cache_missing(needs, caches.latents.get(), caches.texts.get());
      QVERIFY(before.images > 0 && before.captions > 0);
      std::int64_t last = -1;
      const std::int64_t stored = train::fill_caches(frozen, loader, needs, caches.latents.get(), caches.texts.get(), at::kCPU,
                                                     [&](std::int64_t done, std::int64_t) { last = done; });
      QCOMPARE(stored, before.total() + static_cast<std::int64_t>(needs.extras.size()));  // the sample prompts too
      QCOMPARE(last, stored);
      QCOMPARE(train::cache_missing(needs, caches.latents.get(), caches.texts.get()).total(), std::int64_t{0});
    }
    const auto warm = run("warm", true);
    QCOMPARE(losses(cold), losses(plain));
    QCOMPARE(losses(warm), losses(plain));
    std::size_t files = 0, captions = 0;
    for (const auto& e : fs::recursive_directory_iterator(cache))
      (e.path().parent_path().filename() == "text" ? captions : files) += e.is_regular_file();
    QVERIFY(captions > 0);
    const std::string text_cold = cache_line(cold, "text-embedding cache: "), text_warm = cache_line(warm, "text-embedding cache: ");
    // Captions repeat: the cold run encodes each distinct caption once (one file each) and reads
    // the repeats.
    int read = -1, encoded = -1;
    QVERIFY(std::sscanf(text_cold.c_str(), "text-embedding cache: %d read, %d encoded", &read, &encoded) == 2);
    QVERIFY2(encoded > 0 && read + encoded == 4 * 8, text_cold.c_str());
    QVERIFY2(text_warm.find(" 0 encoded") != std::string::npos, text_warm.c_str());
    QVERIFY(files > 0);
    QVERIFY2(cache_line(cold).find("0 read, 32 encoded") != std::string::npos, cache_line(cold).c_str());
    QVERIFY2(cache_line(warm).find(" 0 encoded") != std::string::npos, cache_line(warm).c_str());
    QVERIFY(cache_line(plain).empty());
    // The cold run found the caches incomplete and kept the frozen parts; the warm one found
    // them complete, so the VAE and text encoders left (released: this is a CPU run) and came
    // back once, to decode the final samples, which equal the plain run's byte for byte.
    auto logged = [](const std::vector<json>& events, const std::string& start) {
      for (const auto& e : events)
        if (e["type"] == "log" && e["message"].get<std::string>().rfind(start, 0) == 0) return true;
      return false;
    };
    QVERIFY(logged(cold, "frozen parts stay on the device: the caches lack"));
    QVERIFY(logged(warm, "frozen parts off the device"));
    QVERIFY(logged(warm, "frozen parts came back 1 time"));
    QVERIFY(!logged(plain, "frozen parts"));
    auto sample_bytes = [](const std::vector<json>& events) {
      std::map<std::string, std::string> out;
      for (const auto& e : events)
        if (e["type"] == "samples")
          for (const auto& f : fs::directory_iterator(e["dir"].get<std::string>())) {
            std::ifstream in(f.path(), std::ios::binary);
            out[f.path().filename().string()] = std::string(std::istreambuf_iterator<char>(in), {});
          }
      return out;
    };
    const auto plain_samples = sample_bytes(plain);
    QVERIFY(!plain_samples.empty());
    QVERIFY(sample_bytes(warm) == plain_samples);
  }

  void trainsAndWritesTheRunDirectory() {
    QTemporaryDir dir;
    train::TrainerOptions opt;
    opt.run_dir = (dir.path() + "/run").toStdString();
    train::Trainer trainer(small_config(), opt);
    train::TrainerCommands commands;
    const auto summary = trainer.run(commands);
    QCOMPARE(summary.step, std::int64_t{30});
    QCOMPARE(summary.reason, std::string("finished"));

    const auto events = read_events(opt.run_dir);
    QCOMPARE(events.front()["type"].get<std::string>(), std::string("log"));  // dataset generation
    QCOMPARE(events.back()["type"].get<std::string>(), std::string("run_end"));
    const auto l = losses(events);
    QCOMPARE(l.size(), std::size_t{30});
    const double first = (l[0] + l[1] + l[2] + l[3] + l[4]) / 5, last = (l[25] + l[26] + l[27] + l[28] + l[29]) / 5;
    QVERIFY2(last < 0.8 * first, qPrintable(QString("loss %1 -> %2").arg(first).arg(last)));
    for (const auto& e : events) {
      QVERIFY(e.contains("time") && e.contains("step") && e.contains("type"));
      if (e["type"] != "metrics") continue;
      for (const char* k : {"loss", "lr", "grad_norm", "samples_per_s", "s_per_step", "epoch", "ranks"}) QVERIFY2(e.contains(k), k);
      const auto& r = e["ranks"][0];
      QCOMPARE(r["rank"].get<int>(), 0);
      QVERIFY(r["rss_bytes"].get<std::int64_t>() > 0);
      QVERIFY(r["model_state"]["parameters"].get<std::int64_t>() > 0);
      QCOMPARE(r["model_state"]["optimizer_states"].get<std::int64_t>(), 2 * r["model_state"]["parameters"].get<std::int64_t>());
    }
    int samples = 0, checkpoints = 0;
    for (const auto& e : events) {
      if (e["type"] == "samples") {
        ++samples;
        QCOMPARE(e["count"].get<int>(), 4);
        QVERIFY(fs::exists(e["dir"].get<std::string>() + "/grid.png"));
      }
      if (e["type"] == "checkpoint") {
        ++checkpoints;
        QVERIFY(e["bytes"].get<std::int64_t>() > 0);
        // One shard per rank (here one), every file listed with its size and checksum, the EMA
        // inside the shard, and the layout index that lets another world size read it.
        const std::string path = e["path"].get<std::string>();
        const auto info = checkpoint::open_checkpoint(path);
        QVERIFY(fs::exists(path + "/rank0.safetensors"));
        QVERIFY(info.meta["files"].contains("rank0.safetensors"));
        QVERIFY(checkpoint::verify_checkpoint(info).empty());
        QVERIFY(info.meta.contains("sharding") && info.meta.contains("config_hash") && info.meta.contains("samples_seen"));
        const io::SafetensorsReader shard(path + "/rank0.safetensors");
        QVERIFY(shard.contains("io/ema") && shard.contains("text_encoder/exp_avg"));
      }
    }
    QCOMPARE(samples, 2);
    QCOMPARE(checkpoints, 2);
    const std::string s30 = opt.run_dir + "/samples/step_30";
    const auto listing = json::parse(io::read_file(s30 + "/prompts.json"));
    QCOMPARE(listing.size(), std::size_t{4});
    QCOMPARE(listing[1]["file"].get<std::string>(), std::string("001.png"));
    QCOMPARE(listing[1]["prompt"].get<std::string>(), std::string("a red circle on a blue background"));
    QCOMPARE(listing[2]["prompt"].get<std::string>(), std::string("a green square on a black background"));
    QCOMPARE(listing[3]["seed"].get<int>(), 3);
    QCOMPARE(io::read_image(s30 + "/003.png").width, 16);
    for (const char* f : {"config.yaml", "model/unet/config.json", "model/tokenizer/tokenizer.json", "logs/rank0.log"})
      QVERIFY2(fs::exists(opt.run_dir + "/" + f), f);
    // A second fresh run into the same folder is refused.
    QVERIFY_THROWS_EXCEPTION(Error, train::Trainer(small_config(), opt).run(commands));
  }


  // Mixed precision, offload and activation checkpointing in a real training run: losses stay
  // finite and fall, the metrics say where the model state is, NVMe files exist while training
  // and are gone afterwards, and checkpoints keep fp32 master weights.
  void precisionAndOffloadTrain_data() {
    QTest::addColumn<QStringList>("sets");
    QTest::newRow("bf16") << QStringList{"precision=bf16"};
    QTest::newRow("fp32, stage 1, optimizer to cpu") << QStringList{"zero.stage=1", "zero.offload_optimizer.device=cpu"};
    QTest::newRow("bf16, stage 2, optimizer to nvme, gradient checkpointing")
        << QStringList{"precision=bf16", "zero.stage=2", "zero.offload_optimizer.device=nvme",
                       "zero.offload_optimizer.nvme_path=@", "zero.sub_group_size=200000",
                       "training.gradient_checkpointing=true"};
    QTest::newRow("fp32, stage 3, parameters and optimizer to nvme")
        << QStringList{"zero.stage=3", "zero.offload_optimizer.device=nvme", "zero.offload_optimizer.nvme_path=@",
                       "zero.offload_param.device=nvme", "zero.offload_param.nvme_path=@"};
  }

  void precisionAndOffloadTrain() {
    ZS_SPLIT_ROWS();
    QFETCH(QStringList, sets);
    QTemporaryDir dir, nvme;
    std::vector<std::string> extra = {"training.max_steps=12", "sampling.every_n_steps=0", "checkpointing.every_n_steps=0"};
    for (QString set : sets) extra.push_back(set.replace("@", nvme.path()).toStdString());
    const bool uses_nvme = sets.join(' ').contains("nvme");
    train::TrainerOptions opt;
    opt.run_dir = (dir.path() + "/run").toStdString();
    long files_during = -1;
    opt.on_step = [&](std::int64_t step, std::int64_t, double, double) {
      if (step != 3) return;
      files_during = 0;
      for (const auto& e : fs::recursive_directory_iterator(nvme.path().toStdString())) files_during += e.is_regular_file();
    };
    train::TrainerCommands commands;
    const auto summary = train::Trainer(small_config(extra), opt).run(commands);
    QCOMPARE(summary.step, std::int64_t{12});
    const auto events = read_events(opt.run_dir);
    const auto l = losses(events);
    QCOMPARE(l.size(), std::size_t{12});
    for (double x : l) QVERIFY(std::isfinite(x));
    QVERIFY2(l[9] + l[10] + l[11] < l[0] + l[1] + l[2], "the loss should fall over 12 steps");
    json last;
    for (const auto& e : events)
      if (e["type"] == "metrics") last = e["ranks"][0];
    const bool offloading = sets.join(' ').contains("offload");
    if (offloading) QCOMPARE(last["model_state"]["optimizer_states"].get<std::int64_t>(), std::int64_t{0});
    const auto& off = last["offloaded"];
    QVERIFY2(off.contains("nvme_bytes") && off.contains("optimizer_states") && off.contains("parameters"), off.dump().c_str());
    if (uses_nvme) {
      QVERIFY(off["nvme_bytes"].get<std::int64_t>() > 0);
      QVERIFY2(files_during >= 3, qPrintable(QString::number(files_during)));
      QVERIFY2(QDir(nvme.path()).isEmpty(), "NVMe files left behind after the run");
    } else if (offloading) {
      QVERIFY(off["optimizer_states"].get<std::int64_t>() > 0);
    }
    // Checkpoints keep the fp32 masters, also when the model computes in bf16.
    const auto ckpt = checkpoint_dir(events);
    const io::SafetensorsReader weights(ckpt + "/rank0.safetensors");
    for (const auto& e : weights.entries())
      if (e.name.ends_with("/weights")) QCOMPARE(e.dtype, std::string("F32"));
  }

  void nvmeFilesGoAfterAFailure() {
    QTemporaryDir dir, nvme;
    train::TrainerOptions opt;
    opt.run_dir = (dir.path() + "/run").toStdString();
    opt.after_backward = [](std::int64_t step, int, const auto&) {
      if (step == 3) throw Error(ErrorKind::data, "injected failure");
    };
    train::TrainerCommands commands;
    const auto cfg = small_config({"training.max_steps=6", "zero.stage=2", "zero.offload_optimizer.device=nvme",
                                   "zero.offload_optimizer.nvme_path=" + nvme.path().toStdString(),
                                   "checkpointing.on_exception=false"});
    QVERIFY_THROWS_EXCEPTION(Error, train::Trainer(cfg, opt).run(commands));
    QVERIFY2(QDir(nvme.path()).isEmpty(), "NVMe files left behind after a failed run");
  }

  void fp16WithoutCudaSaysUseBf16() {
    if (at::hasCUDA()) QSKIP("this machine has CUDA: fp16 is allowed");
    QTemporaryDir dir;
    train::TrainerOptions opt;
    opt.run_dir = (dir.path() + "/run").toStdString();
    train::TrainerCommands commands;
    try {
      train::Trainer(small_config({"precision=fp16"}), opt).run(commands);
      QFAIL("fp16 started without CUDA");
    } catch (const Error& e) {
      QVERIFY2(std::string(e.what()).find("precision: fp16 needs a CUDA GPU") != std::string::npos, e.what());
      QVERIFY2(std::string(e.what()).find("bf16") != std::string::npos, e.what());
    }
  }

  // fp16 on CUDA with dynamic loss scaling trains the quickstart model (stage 0, and stage 2
  // with the optimizer on the CPU): the loss scale is reported, losses stay finite and fall,
  // and the metrics carry the caching allocator's figures.
  void fp16TrainsOnCudaWithLossScaling_data() {
    QTest::addColumn<QStringList>("sets");
    QTest::newRow("stage 0") << QStringList{};
    QTest::newRow("stage 2, optimizer on the cpu") << QStringList{"zero.stage=2", "zero.offload_optimizer.device=cpu"};
  }

  void fp16TrainsOnCudaWithLossScaling() {
    ZS_REQUIRE_CUDA();
    QFETCH(QStringList, sets);
    QTemporaryDir dir;
    train::TrainerOptions opt;
    opt.run_dir = (dir.path() + "/run").toStdString();
    std::vector<std::string> extra = {"precision=fp16", "launch.use_cpu=false", "training.max_steps=40",
                                      "sampling.every_n_steps=0", "checkpointing.every_n_steps=0"};
    for (const auto& s : sets) extra.push_back(s.toStdString());
    train::TrainerCommands commands;
    const auto summary = train::Trainer(small_config(extra), opt).run(commands);
    QCOMPARE(summary.step, std::int64_t{40});
    const auto events = read_events(opt.run_dir);
    for (const auto& e : events)
      if (e["type"] == "run_start") QCOMPARE(e["device"].get<std::string>(), std::string("cuda:0"));
    const auto l = losses(events);
    QCOMPARE(l.size(), std::size_t{40});
    for (double x : l) QVERIFY(std::isfinite(x));
    const double first = (l[0] + l[1] + l[2] + l[3] + l[4]) / 5, last = (l[35] + l[36] + l[37] + l[38] + l[39]) / 5;
    QVERIFY2(last < 0.8 * first, qPrintable(QString("loss %1 -> %2").arg(first).arg(last)));
    int with_scale = 0;
    for (const auto& e : events) {
      if (e["type"] != "metrics") continue;
      with_scale += e.contains("loss_scale") && e["loss_scale"].get<double>() >= 1;
      const auto& r = e["ranks"][0];
      QVERIFY(r["gpu_allocated_bytes"].get<std::int64_t>() > 0);
      QVERIFY(r["gpu_reserved_bytes"].get<std::int64_t>() >= r["gpu_allocated_bytes"].get<std::int64_t>());
      QVERIFY(r["gpu_peak_bytes"].get<std::int64_t>() >= r["gpu_allocated_bytes"].get<std::int64_t>());
    }
    QCOMPARE(with_scale, 40);
  }

  // Dynamic loss scaling on the CPU (forced on for fp32): an injected inf skips the step, the
  // scale halves (hysteresis 1), an event says so, the scale grows again after the window.
  void overflowSkipsTheStepAndTheScaleRecovers_data() {
    QTest::addColumn<QString>("precision");
    QTest::addColumn<double>("bad");
    QTest::newRow("fp32, inf") << "fp32" << std::numeric_limits<double>::infinity();
    QTest::newRow("bf16, NaN") << "bf16" << std::numeric_limits<double>::quiet_NaN();
  }

  void overflowSkipsTheStepAndTheScaleRecovers() {
    QFETCH(QString, precision);
    QFETCH(double, bad);
    QTemporaryDir dir;
    train::TrainerOptions opt;
    opt.run_dir = (dir.path() + "/run").toStdString();
    opt.loss_scaling = true;
    opt.after_backward = [bad](std::int64_t step, int, const std::vector<std::pair<std::string, at::Tensor>>& params) {
      if (step == 4) params.front().second.mutable_grad().view({-1})[0] = bad;
    };
    train::TrainerCommands commands;
    const auto cfg = small_config({"training.max_steps=10", "loss_scaling.initial_scale_power=4",
                                   "loss_scaling.hysteresis=1", "loss_scaling.loss_scale_window=3",
                                   "sampling.every_n_steps=0", "checkpointing.every_n_steps=0",
                                   "precision=" + precision.toStdString()});
    const auto summary = train::Trainer(cfg, opt).run(commands);
    QCOMPARE(summary.step, std::int64_t{10});
    const auto events = read_events(opt.run_dir);
    std::vector<double> scale;  // after each step
    int overflows = 0;
    for (const auto& e : events) {
      if (e["type"] == "metrics") scale.push_back(e["loss_scale"].get<double>());
      if (e["type"] == "overflow") {
        ++overflows;
        QCOMPARE(e["step"].get<std::int64_t>(), std::int64_t{3});  // written before the step counter moves
        QCOMPARE(e["next_loss_scale"].get<double>(), e["loss_scale"].get<double>() / 2);
      }
    }
    QCOMPARE(overflows, 1);
    QCOMPARE(scale.size(), std::size_t{10});
    // DeepSpeed's rule with window 3: doubles after steps 3 (16 -> 32), halves at the overflow
    // on step 4 (-> 16), doubles again 3 clean steps later (step 7, -> 32) and at step 10.
    const std::vector<double> want = {16, 16, 32, 16, 16, 16, 32, 32, 32, 64};
    for (std::size_t i = 0; i < want.size(); ++i)
      QVERIFY2(scale[i] == want[i], qPrintable(QString("step %1: scale %2, want %3").arg(i + 1).arg(scale[i]).arg(want[i])));
    QCOMPARE(events.back()["type"].get<std::string>(), std::string("run_end"));
  }

  // A damaged newest checkpoint: `checkpoints --verify` names it, `--resume latest` falls back
  // to the newest intact one and says so, and `export` turns a checkpoint into diffusers files.
  void damagedCheckpointsAreFoundAndSkipped() {
    QTemporaryDir dir;
    train::TrainerOptions opt;
    opt.run_dir = (dir.path() + "/run").toStdString();
    train::TrainerCommands commands;
    train::Trainer(small_config({"training.max_steps=6", "checkpointing.every_n_steps=2", "sampling.every_n_steps=0"}), opt)
        .run(commands);
    const std::string bad = opt.run_dir + "/checkpoints/step_6/rank0.safetensors";
    fs::resize_file(bad, fs::file_size(bad) - 64);
    QProcess p;
    p.start(zs::test::cliPath(), {"checkpoints", QString::fromStdString(opt.run_dir), "--verify", "--json"});
    QVERIFY(p.waitForFinished(60000));
    QCOMPARE(p.exitCode(), 1);
    const json listing = json::parse(p.readAllStandardOutput().toStdString());
    QCOMPARE(listing["checkpoints"].size(), std::size_t{3});
    QCOMPARE(listing["checkpoints"][1]["ok"].get<bool>(), true);
    QCOMPARE(listing["checkpoints"][2]["ok"].get<bool>(), false);
    QVERIFY(listing["checkpoints"][2]["problems"][0].get<std::string>().find(bad) == 0);
    // Resume: step_6 is skipped, step_4 continues to step 8.
    train::TrainerOptions again = opt;
    again.resume = "latest";
    const auto summary = train::Trainer(small_config({"training.max_steps=8", "checkpointing.every_n_steps=2",
                                                      "sampling.every_n_steps=0"}), again).run(commands);
    QCOMPARE(summary.step, std::int64_t{8});
    bool warned = false;
    std::int64_t resumed_at = -1;
    for (const auto& e : read_events(opt.run_dir)) {
      if (e["type"] == "warning" && e["message"].get<std::string>().find("checkpoint step_6 (" + bad) == 0 &&
          e["message"].get<std::string>().find("is damaged; resuming from step_4 instead") != std::string::npos)
        warned = true;
      if (e["type"] == "run_start" && !e["resumed_from"].is_null()) resumed_at = e["step"].get<std::int64_t>();
    }
    QVERIFY(warned);
    QCOMPARE(resumed_at, std::int64_t{4});
    // Export of the last checkpoint for diffusers, in fp16.
    const QString out = dir.path() + "/export";
    p.start(zs::test::cliPath(), {"export", QString::fromStdString(opt.run_dir + "/checkpoints/step_8"), "--format", "diffusers",
                          "--dtype", "fp16", "-o", out});
    QVERIFY(p.waitForFinished(60000));
    QVERIFY2(p.exitCode() == 0, p.readAllStandardError().constData());
    const io::SafetensorsReader unet((out + "/unet/diffusion_pytorch_model.safetensors").toStdString());
    QVERIFY(unet.contains("conv_in.weight"));
    QCOMPARE(unet.entries().front().dtype, std::string("F16"));
    QVERIFY(QFile::exists(out + "/unet/config.json"));
  }

  // Policies together: periodic every 4 pruned to the last one, an overwritten checkpoint every 2
  // steps, a timed one, and the final one.
  void checkpointPoliciesCombine() {
    QTemporaryDir dir;
    train::TrainerOptions opt;
    opt.run_dir = (dir.path() + "/run").toStdString();
    std::vector<std::pair<std::int64_t, std::string>> saves;  // (step, reason)
    opt.on_event = [&](const json& e) {
      if (e["type"] == "checkpoint") saves.emplace_back(e["step"].get<std::int64_t>(), e["reason"].get<std::string>());
    };
    train::TrainerCommands commands;
    train::Trainer(small_config({"training.max_steps=10", "checkpointing.every_n_steps=4", "checkpointing.keep_last=1",
                                 "checkpointing.overwrite_every_n_steps=2", "sampling.every_n_steps=0"}),
                   opt)
        .run(commands);
    const std::vector<std::pair<std::int64_t, std::string>> want = {
        {2, "overwrite"}, {4, "periodic"}, {6, "overwrite"}, {8, "periodic"}, {10, "final"}};
    QCOMPARE(saves, want);
    std::vector<std::string> tags;
    for (const auto& c : checkpoint::list_checkpoints(opt.run_dir + "/checkpoints")) tags.push_back(c.tag);
    QCOMPARE(tags, (std::vector<std::string>{"overwrite", "step_8", "step_10"}));
    QCOMPARE(checkpoint::open_checkpoint(opt.run_dir + "/checkpoints/overwrite").step, std::int64_t{6});
    // every_n_minutes: a tiny interval saves after every step.
    train::TrainerOptions timed;
    timed.run_dir = (dir.path() + "/timed").toStdString();
    std::vector<std::int64_t> timed_steps;
    timed.on_event = [&](const json& e) {
      if (e["type"] == "checkpoint" && e["reason"] == "timed") timed_steps.push_back(e["step"].get<std::int64_t>());
    };
    train::Trainer(small_config({"training.max_steps=3", "checkpointing.every_n_steps=0",
                                 "checkpointing.every_n_minutes=0.00001", "sampling.every_n_steps=0"}),
                   timed)
        .run(commands);
    // The interval is checked when a step starts: step 1 or step 2 saves (a save at step 1 restarts
    // the clock, so step 2 may not, under load); never step 3, whose final save follows.
    QVERIFY(!timed_steps.empty() && timed_steps.size() <= 2 && timed_steps.back() < 3);
  }

  void stopAndResumeEqualsAnUninterruptedRun() {
    QTemporaryDir dir;
    train::TrainerCommands commands;
    train::TrainerOptions straight;
    straight.run_dir = (dir.path() + "/straight").toStdString();
    // Equal to 1e-5 is a CPU property: CUDA kernels add with atomics in varying order, and the
    // 12 steps after the resume drift further apart than that (1.4e-5 on an H100).
    const auto cfg = small_config({"sampling.every_n_steps=0", "checkpointing.every_n_steps=0", "training.max_steps=20",
                                   "launch.use_cpu=true"});
    train::Trainer(cfg, straight).run(commands);
    const auto want = losses(read_events(straight.run_dir));

    train::TrainerOptions first;
    first.run_dir = (dir.path() + "/resumed").toStdString();
    train::TrainerCommands stop_at_8;
    first.on_step = [&](std::int64_t step, std::int64_t, double, double) {
      if (step == 8) stop_at_8.request_stop();
    };
    const auto part = train::Trainer(cfg, first).run(stop_at_8);
    QCOMPARE(part.reason, std::string("stopped"));
    QCOMPARE(part.step, std::int64_t{8});
    QVERIFY(fs::exists(first.run_dir + "/checkpoints/step_8/meta.json"));

    // Changing a key that defines the run is refused, naming it.
    train::TrainerOptions bad = first;
    bad.on_step = {};
    bad.resume = "latest";
    auto changed = cfg;
    changed.training.seed = 7;
    try {
      train::Trainer(changed, bad).run(commands);
      QFAIL("resumed with another seed");
    } catch (const Error& e) {
      QVERIFY2(QString(e.what()).contains("training.seed: checkpoint 42, config 7"), e.what());
    }

    // Resuming from the checkpoint folder alone finds its run directory.
    train::TrainerOptions by_path;
    by_path.resume = first.run_dir + "/checkpoints/step_8";
    train::Trainer by_path_trainer(cfg, by_path);
    QCOMPARE(QString::fromStdString(by_path_trainer.run_dir()), QString::fromStdString(first.run_dir));
    by_path_trainer.run(commands);
    const auto got = losses(read_events(first.run_dir));
    QCOMPARE(got.size(), want.size());
    for (std::size_t i = 0; i < want.size(); ++i)
      QVERIFY2(std::abs(got[i] - want[i]) <= 1e-5 * std::abs(want[i]),
               qPrintable(QString("step %1: %2 vs %3").arg(i + 1).arg(got[i]).arg(want[i])));
  }

  // The lean optimizers (issue 37) through the trainer: a run stopped at step 4 and resumed from
  // its checkpoint (8-bit moments with their blocks' absmax; Adafactor's statistics per parameter)
  // follows the uninterrupted run's losses, and trains otherwise than AdamW.
  void leanOptimizersResumeExactly_data() {
    QTest::addColumn<QString>("settings");
    QTest::newRow("AdamW8bit") << "optimizer.type=AdamW8bit";
    QTest::newRow("Adafactor with beta1 and scale_parameter")
        << "optimizer.type=Adafactor,optimizer.adafactor.beta1=0.9,optimizer.adafactor.scale_parameter=true";
    // bf16 weights without masters: the resumed run's stochastic rounding draws what the
    // uninterrupted run drew (seeded by unit and step), so every loss is the same bit for bit.
    QTest::newRow("bf16 without master weights") << "precision=bf16,optimizer.master_weights=none";
    QTest::newRow("Adafactor, bf16 without master weights")
        << "optimizer.type=Adafactor,precision=bf16,optimizer.master_weights=none";
    // Built straight into shards (zero3_init_flag): 8-bit AdamW's shards cut on its blocks, and bf16
    // shards without masters (no fp32 copy while loading).
    QTest::newRow("AdamW8bit, stage 3 built into shards") << "optimizer.type=AdamW8bit,zero.stage=3,zero.zero3_init_flag=true";
    QTest::newRow("bf16 without master weights, stage 3 built into shards")
        << "precision=bf16,optimizer.master_weights=none,zero.stage=3,zero.zero3_init_flag=true";
    // The issue's memory-lean combination: units stepped during backward, with accumulation 2 and
    // clipping by the previous step's norm.
    QTest::newRow("Adafactor, bf16 without master weights, fused backward, accumulation, clipping")
        << "optimizer.type=Adafactor,precision=bf16,optimizer.master_weights=none,optimizer.fused_backward=true,"
           "training.gradient_accumulation_steps=2,training.gradient_clipping=0.5";
  }

  void leanOptimizersResumeExactly() {
    ZS_SPLIT_ROWS();
    QFETCH(QString, settings);
    QTemporaryDir dir;
    // bf16 rows: 6 steps of batch 4, stopped at 3. Debian's LibTorch computes bf16 on CPUs without
    // AVX-512 BF16 10-20x slower than float32 (convolutions with their gradients 22x, matrix
    // products 22x on an AMD EPYC), and 10 steps of 8 took up to 186 s there.
    const bool bf16 = settings.contains("precision=bf16");
    const int steps = bf16 ? 6 : 10, stop = bf16 ? 3 : 4;
    std::vector<std::string> keys = {"sampling.every_n_steps=0", "checkpointing.every_n_steps=0",
                                     "training.max_steps=" + std::to_string(steps), "launch.use_cpu=true", "zero.stage=2"};
    if (bf16) keys.push_back("training.batch_size=4");
    auto adamw = small_config(keys);
    if (settings.contains("precision=bf16")) adamw.precision = "bf16";
    for (const QString& k : settings.split(',')) keys.push_back(k.toStdString());
    const auto cfg = small_config(keys);
    train::TrainerCommands commands;
    auto run = [&](const config::TrainerConfig& c, const std::string& name) {
      train::TrainerOptions o;
      o.run_dir = (dir.path() + "/").toStdString() + name;
      train::Trainer(c, o).run(commands);
      return losses(read_events(o.run_dir));
    };
    const auto want = run(cfg, "straight");
    const auto plain = run(adamw, "adamw");
    QVERIFY2(std::abs(want.back() - plain.back()) > 1e-6 * std::abs(plain.back()), "the same losses as AdamW");
    train::TrainerOptions first;
    first.run_dir = (dir.path() + "/resumed").toStdString();
    train::TrainerCommands stop_early;
    first.on_step = [&](std::int64_t step, std::int64_t, double, double) {
      if (step == stop) stop_early.request_stop();
    };
    QCOMPARE(train::Trainer(cfg, first).run(stop_early).step, std::int64_t{stop});
    train::TrainerOptions again;
    again.run_dir = first.run_dir;
    again.resume = "latest";
    train::Trainer(cfg, again).run(commands);
    const auto got = losses(read_events(first.run_dir));
    QCOMPARE(got.size(), want.size());
    const double tolerance = settings.contains("master_weights=none") ? 0.0 : 1e-5;
    for (std::size_t i = 0; i < want.size(); ++i)
      QVERIFY2(std::abs(got[i] - want[i]) <= tolerance * std::abs(want[i]),
               qPrintable(QString("step %1: %2 vs %3").arg(i + 1).arg(got[i], 0, 'g', 17).arg(want[i], 0, 'g', 17)));
  }

  void divergenceWritesAnOnExceptionCheckpoint() {
    QTemporaryDir dir;
    train::TrainerOptions opt;
    opt.run_dir = (dir.path() + "/run").toStdString();
    // An absurd learning rate makes the second step's loss non-finite.
    const auto cfg = small_config({"optimizer.lr=1e12", "scheduler.type=constant", "scheduler.warmup_steps=0",
                                   "sampling.every_n_steps=0", "checkpointing.every_n_steps=0",
                                   "training.gradient_accumulation_steps=2"});
    train::TrainerCommands commands;
    try {
      train::Trainer(cfg, opt).run(commands);
      QFAIL("trained through a diverged loss");
    } catch (const Error& e) {
      QVERIFY2(QString(e.what()).contains("lower optimizer.lr"), e.what());
    }
    const auto events = read_events(opt.run_dir);
    bool error = false, saved = false;
    for (const auto& ev : events) {
      error |= ev["type"] == "error";
      saved |= ev["type"] == "checkpoint" && ev["reason"] == "on_exception";
    }
    QVERIFY(error);
    QVERIFY(saved);
    QCOMPARE(events.back()["reason"].get<std::string>(), std::string("error"));
  }

  void pauseHoldsTheStep() {
    QTemporaryDir dir;
    train::TrainerOptions opt;
    opt.run_dir = (dir.path() + "/run").toStdString();
    train::TrainerCommands commands;
    std::atomic<std::int64_t> seen{0};
    opt.on_step = [&](std::int64_t step, std::int64_t, double, double) {
      seen = step;
      if (step == 3) commands.set_paused(true);
    };
    const auto cfg = small_config({"sampling.every_n_steps=0", "checkpointing.every_n_steps=0", "training.max_steps=6"});
    std::thread runner([&] { train::Trainer(cfg, opt).run(commands); });
    QTRY_COMPARE_WITH_TIMEOUT(seen.load(), std::int64_t{3}, 30000);
    QTest::qWait(500);
    QCOMPARE(seen.load(), std::int64_t{3});  // paused: no further step
    commands.set_paused(false);
    runner.join();
    QCOMPARE(seen.load(), std::int64_t{6});
  }

  void resumeIntoAnotherRunDirectory() {
    QTemporaryDir dir;
    train::TrainerCommands commands;
    train::TrainerOptions first;
    first.run_dir = (dir.path() + "/a").toStdString();
    const auto cfg = small_config({"sampling.every_n_steps=0", "checkpointing.every_n_steps=4", "training.max_steps=4"});
    train::Trainer(cfg, first).run(commands);
    train::TrainerOptions second;
    second.run_dir = (dir.path() + "/b").toStdString();
    second.resume = first.run_dir + "/checkpoints/step_4";
    auto longer = cfg;
    longer.training.max_steps = 6;  // run length may change on resume
    const auto summary = train::Trainer(longer, second).run(commands);
    QCOMPARE(summary.step, std::int64_t{6});
    QVERIFY(fs::exists(second.run_dir + "/model/tokenizer/tokenizer.json"));
    QVERIFY_THROWS_EXCEPTION(Error, train::Trainer(cfg, train::TrainerOptions{"", "x", "latest", {}, {}}));
  }

  void missingDatasetFailsBeforeTraining() {
    QTemporaryDir dir;
    train::TrainerOptions opt;
    opt.run_dir = (dir.path() + "/run").toStdString();
    auto cfg = small_config({"data.generate=none"});
    cfg.data.path = (dir.path() + "/no-such-data").toStdString();
    train::TrainerCommands commands;
    try {
      train::Trainer(cfg, opt).run(commands);
      QFAIL("trained without data");
    } catch (const Error& e) {
      QVERIFY2(QString(e.what()).contains("no-such-data: dataset folder does not exist"), e.what());
    }
    const auto events = read_events(opt.run_dir);
    QCOMPARE(events.back()["reason"].get<std::string>(), std::string("error"));
  }

  void cliStopsCleanlyOnSigint() {
    QTemporaryDir dir;
    const QString run = dir.path() + "/cli";
    zs::test::FailureReport report(run);
    QProcess p;
    p.setProcessChannelMode(QProcess::MergedChannels);
    p.start(zs::test::cliPath(), {"train", zs::test::quickstart(), "--run-dir", run,
                          "--set", "data.generate_count=64", "--set", "data.resolution=16", "--set", "training.batch_size=4",
                          "--set", "training.max_steps=100000", "--set", "sampling.every_n_steps=0",
                          "--set", "logging.every_n_steps=1"});
    QVERIFY(p.waitForStarted());
    auto trained_a_step = [&] {
      QFile f(run + "/events.jsonl");
      return f.open(QIODevice::ReadOnly) && f.readAll().contains("\"metrics\"");
    };
    QTRY_VERIFY_WITH_TIMEOUT(trained_a_step(), 60000);
    ::kill(static_cast<pid_t>(p.processId()), SIGINT);
    const bool ended = p.waitForFinished(60000);
    const QByteArray out = p.readAll();
    report.setOutput("zerostudio train", QString::fromUtf8(out));
    QVERIFY(ended);
    QCOMPARE(p.exitStatus(), QProcess::NormalExit);
    QCOMPARE(p.exitCode(), 0);
    QVERIFY2(out.contains("stopped at step"), "no stop message");
    const auto events = read_events(run.toStdString());
    QCOMPARE(events.back()["reason"].get<std::string>(), std::string("stopped"));
    bool saved = false;
    for (const auto& e : events) saved |= e["type"] == "checkpoint" && e["reason"] == "stopped";
    QVERIFY(saved);
  }
};

ZS_TEST_MAIN(TestTrainE2E);
#include "tst_train_e2e.moc"
