// engine/checkpoint: sharded state read under another layout, file verification, and export
// (round trips back into the engine, streaming memory) on a checkpoint split into many shards.
#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <filesystem>
#include <fstream>
#include <set>

#include "checkpoint/checkpoint.h"
#include "checkpoint/checkpoint_meta.h"
#include "train/checkpoint_export.h"
#include "checkpoint/sharded_state.h"
#include "models/sd/single_file_names.h"
#include "core/cpu_allocation_counter.h"
#include "core/error.h"
#include "io/atomic_file.h"
#include "io/safetensors.h"
#include "models/sd/diffusion_model.h"
#include "models/sd/unet_2d_condition.h"
#include "models/weights.h"

#include <QTemporaryDir>
#include <QtTest>

#include "model_support.h"
#include "test_support.h"

using namespace zs;
namespace fs = std::filesystem;
using zs::test::max_abs_diff;

namespace {

constexpr int kRanks = 6;  // the checkpoint below is split over six ranks at stage 2

/// A run folder with the quickstart model and a checkpoint "step_7" saved as if by `kRanks`
/// ranks at stage 2: each parameter unit's flat weights (and stand-in moments and EMA) cut into
/// kRanks shards. Returns the checkpoint folder; `model` gets the weights it holds.
std::string make_sharded_checkpoint(const std::string& run, models::DiffusionModel& model) {
  model = models::DiffusionModel::build_tiny({"a red circle", "a blue square"}, "v_prediction", 3);
  model.save_folder(run + "/model");
  // One unit per top-level block of parameters (enough units to exercise the index).
  std::vector<checkpoint::UnitLayout> units;
  std::map<std::string, at::Tensor> flat;
  auto add_unit = [&](const std::string& name, const std::vector<std::pair<std::string, at::Tensor>>& params) {
    checkpoint::UnitLayout u;
    u.name = name;
    std::vector<at::Tensor> parts;
    for (const auto& [pname, p] : params) {
      u.params.push_back({pname, u.numel, p.sizes().vec()});
      u.numel += p.numel();
      parts.push_back(p.detach().reshape({-1}));
    }
    u.padded = (u.numel + kRanks - 1) / kRanks * kRanks;
    at::Tensor f = at::zeros({u.padded});
    f.narrow(0, 0, u.numel).copy_(at::cat(parts));
    flat[name] = f;
    units.push_back(u);
  };
  std::map<std::string, std::vector<std::pair<std::string, at::Tensor>>> groups;
  for (const auto& [name, p] : model.named_parameters()) {
    // unet.down_blocks.0.… -> "unet.down_blocks.0", text_encoder.… -> "text_encoder"
    std::string unit = name.rfind("text_encoder.", 0) == 0 ? "text_encoder" : name.substr(0, name.find('.', 5));
    if (name.rfind("unet.down_blocks", 0) == 0 || name.rfind("unet.up_blocks", 0) == 0)
      unit = name.substr(0, name.find('.', name.find('.', 5) + 1));
    groups[unit].emplace_back(name, p);
  }
  for (const auto& [unit, params] : groups) add_unit(unit, params);
  const std::string root = run + "/checkpoints";
  const std::string staging = checkpoint::staging_dir(root, "step_7");
  fs::create_directories(staging);
  for (int r = 0; r < kRanks; ++r) {
    std::vector<std::pair<std::string, at::Tensor>> mine;
    for (const auto& u : units) {
      const auto [first, count] = checkpoint::saved_range(u, r, kRanks, 2);
      const at::Tensor part = flat[u.name].narrow(0, first, count).clone();
      mine.emplace_back(u.name + "/weights", part);
      mine.emplace_back(u.name + "/exp_avg", part * 0.5);
      mine.emplace_back(u.name + "/exp_avg_sq", part * part);
      mine.emplace_back(u.name + "/ema", part + 1);
    }
    io::write_safetensors(staging + "/" + checkpoint::shard_file_name(r), mine);
  }
  nlohmann::json meta = {{"step", 7}, {"config_hash", "abcd1234"}, {"sharding", checkpoint::sharding_json(units, kRanks, 2)}};
  return checkpoint::finalize_checkpoint(root, "step_7", meta).path;
}

}  // namespace

class TestCheckpoint : public QObject {
  Q_OBJECT

 private slots:
  void streamWriterAndSlicesRoundTrip() {
    QTemporaryDir dir;
    const std::string path = (dir.path() + "/s.safetensors").toStdString();
    const at::Tensor a = at::randn({3, 5}), b = at::arange(10, at::kLong);
    {
      io::SafetensorsStreamWriter w(path, {{"a", at::kBFloat16, {3, 5}}, {"b", at::kLong, {10}}}, {{"k", "v"}});
      w.write(a);
      w.write(b);
      w.finish();
    }
    const io::SafetensorsReader r(path);
    QVERIFY(at::equal(r.tensor("a"), a.to(at::kBFloat16)));
    QVERIFY(at::equal(r.slice("b", 3, 4), at::arange(3, 7, at::kLong)));
    QCOMPARE(r.metadata().at("k"), std::string("v"));
    // An unfinished writer leaves nothing behind.
    {
      io::SafetensorsStreamWriter w((dir.path() + "/t.safetensors").toStdString(), {{"a", at::kFloat, {2}}});
    }
    QVERIFY(!fs::exists((dir.path() + "/t.safetensors").toStdString()));
    QCOMPARE(std::distance(fs::directory_iterator(dir.path().toStdString()), fs::directory_iterator{}), 1L);
  }

  // Resuming into units cut differently (a transformer saved as one unit, resumed as one unit
  // per block): each unit's flat range is assembled parameter by parameter, moments and EMA
  // too; a unit laid out as saved reads straight; a parameter the checkpoint lacks is named.
  void shardsReadIntoUnitsCutDifferently() {
    QTemporaryDir dir;
    const std::string run = dir.path().toStdString();
    models::DiffusionModel model;
    const std::string path = make_sharded_checkpoint(run, model);
    const auto meta = nlohmann::json::parse(std::ifstream(path + "/meta.json"));
    const checkpoint::ShardReader reader(path, meta.at("sharding"));
    // Three parameters per unit, padded for four ranks: no boundary falls where a saved one did.
    const auto params = model.named_parameters();
    std::vector<checkpoint::UnitLayout> cut;
    std::vector<at::Tensor> expected;
    for (std::size_t i = 0; i < params.size(); i += 3) {
      checkpoint::UnitLayout u;
      u.name = "piece" + std::to_string(i / 3);
      std::vector<at::Tensor> parts;
      for (std::size_t k = i; k < std::min(i + 3, params.size()); ++k) {
        u.params.push_back({params[k].first, u.numel, params[k].second.sizes().vec()});
        u.numel += params[k].second.numel();
        parts.push_back(params[k].second.detach().reshape({-1}));
      }
      u.padded = (u.numel + 3) / 4 * 4;
      expected.push_back(at::constant_pad_nd(at::cat(parts), {0, u.padded - u.numel}));
      cut.push_back(u);
    }
    for (std::size_t i = 0; i < cut.size(); ++i) {
      const std::int64_t quarter = cut[i].padded / 4;
      for (int rank = 0; rank < 4; ++rank) {
        const at::Tensor want = expected[i].narrow(0, rank * quarter, quarter);
        QVERIFY(at::equal(reader.read_as(cut[i], "weights", rank * quarter, quarter), want));
        QVERIFY(at::equal(reader.read_as(cut[i], "exp_avg", rank * quarter, quarter), want * 0.5));
        const at::Tensor real = at::arange(rank * quarter, (rank + 1) * quarter) < cut[i].numel;  // not padding
        QVERIFY(at::equal(reader.read_as(cut[i], "ema", rank * quarter, quarter), (want + 1) * real));
      }
    }
    const checkpoint::UnitLayout& saved = reader.units().front();
    QVERIFY(at::equal(reader.read_as(saved, "weights", 0, saved.numel), reader.read(saved.name, "weights", 0, saved.numel)));
    checkpoint::UnitLayout other = cut.front();
    other.params.front().name = "unet.no_such_layer.weight";
    try {
      reader.read_as(other, "weights", 0, other.numel);
      QFAIL("a missing parameter must throw");
    } catch (const Error& e) {
      QVERIFY2(std::string(e.what()).find("unet.no_such_layer.weight") != std::string::npos, e.what());
    }
  }

  void exportRoundTripsIntoTheEngine() {
    QTemporaryDir dir;
    const std::string run = (dir.path() + "/run").toStdString();
    models::DiffusionModel model;
    const std::string ckpt = make_sharded_checkpoint(run, model);
    // diffusers, fp32: loads back into a fresh model with identical weights.
    const std::string out = (dir.path() + "/diffusers").toStdString();
    checkpoint::ExportOptions o;
    o.format = "diffusers";
    const auto r = train::export_checkpoint(ckpt, out, o);
    QCOMPARE(r.tensors, model.named_parameters().size());
    auto back = models::DiffusionModel::load_folder(run + "/model");
    models::load_weights(*back.unet, io::SafetensorsReader(out + "/unet/diffusion_pytorch_model.safetensors"));
    models::load_weights(*back.text_encoder, io::SafetensorsReader(out + "/text_encoder/model.safetensors"));
    const auto want = model.named_parameters(), got = back.named_parameters();
    for (std::size_t i = 0; i < want.size(); ++i) QVERIFY2(at::equal(got[i].second, want[i].second), want[i].first.c_str());
    QVERIFY(fs::exists(out + "/unet/config.json") && fs::exists(out + "/scheduler/scheduler_config.json"));
    // safetensors, bf16, EMA: exactly the stored EMA rounded to bf16, with the metadata.
    const std::string file = (dir.path() + "/unet-ema-bf16.safetensors").toStdString();
    o.format = "safetensors";
    o.dtype = at::kBFloat16;
    o.ema = true;
    train::export_checkpoint(ckpt, file, o);
    const io::SafetensorsReader st(file);
    QCOMPARE(st.metadata().at("step"), std::string("7"));
    QCOMPARE(st.metadata().at("config_hash"), std::string("abcd1234"));
    QCOMPARE(st.metadata().at("weights"), std::string("ema"));
    std::size_t checked = 0;
    for (const auto& [name, p] : model.named_parameters()) {
      if (name.rfind("unet.", 0) != 0) continue;
      QVERIFY2(at::equal(st.tensor(name.substr(5)), (p.detach() + 1).to(at::kBFloat16)), name.c_str());
      ++checked;
    }
    QCOMPARE(st.entries().size(), checked);
    // A full run's checkpoint: --merge and the LoRA formats are refused, naming it and what to use
    // (checkpoint::CheckpointExport, the checks every family's export shares).
    o.ema = false;
    auto refusal = [&] {
      try {
        train::export_checkpoint(ckpt, file, o);
      } catch (const Error& e) {
        return std::string(e.what());
      }
      return std::string("(accepted)");
    };
    o.merge = true;
    QCOMPARE(refusal(), ckpt + ": holds no LoRA adapters to merge; drop --merge");
    o.merge = false;
    o.format = "lora-kohya";
    QCOMPARE(refusal(), ckpt + ": holds no LoRA adapters (the run trained the full model); export --format diffusers, "
                               "single-file or safetensors");
  }

  // Streaming: the export's peak CPU memory stays near the largest tensor, far below the model.
  void exportStreamsTensorByTensor() {
    QTemporaryDir dir;
    const std::string run = (dir.path() + "/run").toStdString();
    models::DiffusionModel model;
    const std::string ckpt = make_sharded_checkpoint(run, model);
    std::int64_t total = 0, largest = 0;
    for (const auto& [name, p] : model.named_parameters()) {
      total += p.numel() * 4;
      largest = std::max<std::int64_t>(largest, p.numel() * 4);
    }
    model = models::DiffusionModel();  // nothing of the model stays in memory during the export
    checkpoint::ExportOptions o;
    o.format = "safetensors";
    std::int64_t peak = 0;
    {
      CpuAllocationCounter counter;
      train::export_checkpoint(ckpt, (dir.path() + "/unet.safetensors").toStdString(), o);
      peak = counter.peak();
    }
    qInfo("export of a %d-shard checkpoint: peak %lld bytes; largest tensor %lld, model %lld bytes", kRanks,
          static_cast<long long>(peak), static_cast<long long>(largest), static_cast<long long>(total));
    QVERIFY2(peak <= 3 * largest + (1 << 20), "more than the largest tensor (read, converted) plus 1 MiB");
    QVERIFY(peak < total / 4);
  }

  // The single-file names: one LDM name per diffusers name, none twice, for the SD 1.5 layout
  // (two resnets per block, the well-known keys) and the quickstart's (one per block).
  void singleFileNamesAreBijective() {
    models::UNetConfig sd15;
    sd15.block_out_channels = {32, 64, 64, 64};
    sd15.down_block_types = {"CrossAttnDownBlock2D", "CrossAttnDownBlock2D", "CrossAttnDownBlock2D", "DownBlock2D"};
    sd15.up_block_types = {"UpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D"};
    sd15.layers_per_block = 2;
    sd15.num_attention_heads = {2, 2, 2, 2};
    sd15.transformer_layers_per_block = {1, 1, 1, 1};
    sd15.cross_attention_dim = 32;
    sd15.norm_num_groups = 8;
    models::UNet2DConditionModel unet(sd15);
    std::vector<std::string> names;
    for (const auto& p : unet->named_parameters()) names.push_back(p.key());
    const auto pairs = models::single_file_unet_names(names, 2);
    std::map<std::string, std::string> to_ldm;
    std::set<std::string> ldm_names;
    for (const auto& [d, l] : pairs) {
      to_ldm[d] = l;
      QVERIFY2(ldm_names.insert(l).second, l.c_str());
    }
    QCOMPARE(ldm_names.size(), names.size());
    const std::vector<std::pair<std::string, std::string>> known = {
        {"conv_in.weight", "input_blocks.0.0.weight"},
        {"time_embedding.linear_2.bias", "time_embed.2.bias"},
        {"down_blocks.0.resnets.1.norm1.weight", "input_blocks.2.0.in_layers.0.weight"},
        {"down_blocks.1.attentions.1.proj_in.weight", "input_blocks.5.1.proj_in.weight"},
        {"down_blocks.2.downsamplers.0.conv.weight", "input_blocks.9.0.op.weight"},
        {"down_blocks.3.resnets.1.conv2.bias", "input_blocks.11.0.out_layers.3.bias"},
        {"down_blocks.1.resnets.0.conv_shortcut.weight", "input_blocks.4.0.skip_connection.weight"},
        {"mid_block.attentions.0.transformer_blocks.0.attn2.to_k.weight", "middle_block.1.transformer_blocks.0.attn2.to_k.weight"},
        {"mid_block.resnets.1.time_emb_proj.weight", "middle_block.2.emb_layers.1.weight"},
        {"up_blocks.0.resnets.2.conv1.weight", "output_blocks.2.0.in_layers.2.weight"},
        {"up_blocks.0.upsamplers.0.conv.weight", "output_blocks.2.1.conv.weight"},
        {"up_blocks.1.upsamplers.0.conv.bias", "output_blocks.5.2.conv.bias"},
        {"up_blocks.3.attentions.2.proj_out.weight", "output_blocks.11.1.proj_out.weight"},
        {"conv_norm_out.weight", "out.0.weight"},
        {"conv_out.bias", "out.2.bias"}};
    for (const auto& [d, l] : known) QCOMPARE(to_ldm.at(d), l);
    // The quickstart's UNet: one resnet per block.
    models::DiffusionModel tiny = models::DiffusionModel::build_tiny({"a red circle"}, "v_prediction", 0);
    names.clear();
    for (const auto& p : tiny.unet->named_parameters()) names.push_back(p.key());
    std::set<std::string> tiny_ldm;
    for (const auto& [d, l] : models::single_file_unet_names(names, 1)) QVERIFY2(tiny_ldm.insert(l).second, l.c_str());
    QCOMPARE(tiny_ldm.size(), names.size());
    QVERIFY(tiny_ldm.count("input_blocks.2.0.op.weight") && tiny_ldm.count("output_blocks.1.2.conv.weight"));
  }

  void singleFileExportRoundTrips() {
    QTemporaryDir dir;
    const std::string run = (dir.path() + "/run").toStdString();
    models::DiffusionModel model;
    const std::string ckpt = make_sharded_checkpoint(run, model);
    const std::string file = (dir.path() + "/model.safetensors").toStdString();
    checkpoint::ExportOptions o;
    o.format = "single-file";
    train::export_checkpoint(ckpt, file, o);
    const io::SafetensorsReader st(file);
    std::vector<std::string> unet_names;
    for (const auto& p : model.unet->named_parameters()) unet_names.push_back(p.key());
    std::size_t checked = 0;
    for (const auto& [d, l] : models::single_file_unet_names(unet_names, 1)) {
      QVERIFY2(at::equal(st.tensor(std::string(models::kSingleFileUNet) + l), model.unet->named_parameters()[d]), l.c_str());
      ++checked;
    }
    for (const auto& p : model.text_encoder->named_parameters()) {
      QVERIFY(at::equal(st.tensor(std::string(models::kSingleFileTextEncoder) + p.key()), p.value()));
      ++checked;
    }
    QCOMPARE(st.entries().size(), checked);
  }

  // A meta.json whose values are not what ZeroStudio writes is refused naming the key: a float
  // for an integer was cast by nlohmann (1e56: undefined behaviour), a number for a string was
  // "unexpected failure".
  void damagedMetaIsNamed_data() {
    QTest::addColumn<QString>("meta");
    QTest::addColumn<QString>("expected");
    const QString f = R"("format": "zerostudio-checkpoint")";
    QTest::newRow("step 1e56") << "{" + f + R"(, "version": 2, "step": 1e56})"
                               << "meta.json: step: expected an integer from 0 to 9223372036854775807, found 1e+56";
    QTest::newRow("version 2.5") << "{" + f + R"(, "version": 2.5})" << "meta.json: checkpoint version 2.5 is not supported";
    QTest::newRow("format a number") << R"({"format": 7, "version": 2})" << "meta.json: not a ZeroStudio checkpoint";
    QTest::newRow("tag a number") << "{" + f + R"(, "version": 2, "tag": 5})" << "meta.json: tag: expected a string, found 5";
  }
  void damagedMetaIsNamed() {
    QFETCH(QString, meta);
    QFETCH(QString, expected);
    QTemporaryDir dir;
    io::write_file_atomic((dir.path() + "/meta.json").toStdString(), meta.toStdString());
    try {
      checkpoint::open_checkpoint(dir.path().toStdString());
      QFAIL("a damaged meta.json was read");
    } catch (const Error& e) {
      QVERIFY2(QString(e.what()).startsWith(dir.path() + "/" + expected), e.what());
    }
  }
  void damagedMetaKeysAreNamed() {
    // At open: every key is typed, so `checkpoint list` and the browser never meet a string loss.
    QTemporaryDir dir;
    io::write_file_atomic((dir.path() + "/meta.json").toStdString(),
                          R"({"format": "zerostudio-checkpoint", "version": 2, "step": 4, "loss": "low"})");
    try {
      checkpoint::open_checkpoint(dir.path().toStdString());
      QFAIL("a string loss was read");
    } catch (const Error& e) {
      QVERIFY2(QString(e.what()).startsWith(dir.path() + ": meta.json key 'loss' is not what ZeroStudio wrote"), e.what());
    }
    try {
      checkpoint::CheckpointMeta::from_json(nlohmann::json::parse(R"({"step": 3, "batches_consumed": 1e56})"), "C");
      QFAIL("1e56 batches were read");
    } catch (const Error& e) {
      QVERIFY2(QString(e.what()).startsWith("C: meta.json key 'batches_consumed' is not what ZeroStudio wrote (expected an "
                                            "integer, found 1e+56)"), e.what());
    }
  }

  void verifyNamesDamagedFiles() {
    QTemporaryDir dir;
    const std::string run = (dir.path() + "/run").toStdString();
    models::DiffusionModel model;
    const std::string ckpt = make_sharded_checkpoint(run, model);
    const auto info = checkpoint::open_checkpoint(ckpt);
    QVERIFY(checkpoint::verify_checkpoint(info).empty());
    QCOMPARE(io::read_file(run + "/checkpoints/latest"), std::string("step_7\n"));
    // A flipped byte, a truncated file, a missing rank file: each named.
    const std::string r1 = ckpt + "/rank1.safetensors", r2 = ckpt + "/rank2.safetensors", r3 = ckpt + "/rank3.safetensors";
    {
      std::fstream f(r1, std::ios::in | std::ios::out | std::ios::binary);
      f.seekp(-5, std::ios::end);
      f.put('\x7f');
    }
    fs::resize_file(r2, fs::file_size(r2) - 100);
    fs::remove(r3);
    const auto problems = checkpoint::verify_checkpoint(info);
    QCOMPARE(problems.size(), std::size_t{3});
    QString all;
    for (const auto& p : problems) all += QString::fromStdString(p) + "\n";
    QVERIFY2(all.contains(QString::fromStdString(r1 + ": checksum mismatch (corrupt)")), qPrintable(all));
    QVERIFY2(all.contains(QString::fromStdString(r2)) && all.contains("(truncated?)"), qPrintable(all));
    QVERIFY2(all.contains(QString::fromStdString(r3 + ": missing")), qPrintable(all));
    // Reading names the first bad file: the truncated one, then (once it is gone too) a missing one.
    for (const std::string& want : {r2 + ": not a valid safetensors file", r2 + ": missing (the checkpoint was saved by 6 ranks"}) {
      try {
        checkpoint::ShardReader(ckpt, info.meta["sharding"]);
        QFAIL("a damaged checkpoint was read");
      } catch (const Error& e) {
        QVERIFY2(std::string(e.what()).find(want) != std::string::npos, e.what());
      }
      fs::remove(r2);
    }
  }
};

ZS_TEST_MAIN(TestCheckpoint);
#include "tst_checkpoint.moc"
