// The frozen-base storage formats (engine/quant/base_quant.h, issue 53) against the pinned peers:
// tests/fixtures/base_quant.safetensors, written by tests/fixtures/gen/base_quant.py with PyTorch's
// float8_e4m3fn cast (c10/util/Float8_e4m3fn.h), musubi-tuner's block-wise --fp8_scaled recipe
// (modules/fp8_optimization_utils.py quantize_weight) with bfloat16 scales, the same blocks for int8,
// and bitsandbytes' quantize_4bit/dequantize_4bit(nf4) on its CPU backend (backends/default/ops.py).
// Codes and scales must be equal, bit for bit; dequantized values equal too. fp8_weights.safetensors
// is a published fp8 file as safetensors' torch writer stores it (F8_E4M3, F8_E5M2).
#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>

#include "core/error.h"
#include "io/safetensors.h"
#include "models/flux/flux_transformer.h"
#include "models/lora.h"
#include "models/quantized_base.h"
#include "models/weights.h"
#include "quant/base_quant.h"
#include "train/base_cache.h"

#include <QFile>
#include <QTemporaryDir>
#include <QtTest>

#include "test_support.h"

namespace {

using zs::quant::BaseFormat;

/// A safetensors file written byte by byte (LibTorch 1.13 cannot hold float8 tensors to write).
struct RawTensor {
  std::string name, dtype;
  std::vector<std::int64_t> shape;
  std::string bytes;
};
void write_raw_safetensors(const std::string& path, const std::vector<RawTensor>& tensors, const std::string& metadata_json = "") {
  std::string header = "{";
  std::size_t offset = 0;
  for (const auto& t : tensors) {
    std::string shape;
    for (const auto d : t.shape) shape += (shape.empty() ? "" : ",") + std::to_string(d);
    header += (header.size() > 1 ? "," : "") + std::string("\"") + t.name + "\":{\"dtype\":\"" + t.dtype + "\",\"shape\":[" +
              shape + "],\"data_offsets\":[" + std::to_string(offset) + "," + std::to_string(offset + t.bytes.size()) + "]}";
    offset += t.bytes.size();
  }
  if (!metadata_json.empty()) header += ",\"__metadata__\":" + metadata_json;
  header += "}";
  std::ofstream out(path, std::ios::binary);
  const std::uint64_t n = header.size();
  out.write(reinterpret_cast<const char*>(&n), 8);
  out << header;
  for (const auto& t : tensors) out << t.bytes;
}
std::string bytes_of(const at::Tensor& t) {
  const at::Tensor c = t.contiguous();
  return std::string(static_cast<const char*>(c.data_ptr()), static_cast<std::size_t>(c.nbytes()));
}

bool same_bits(const at::Tensor& a, const at::Tensor& b) {
  return a.sizes() == b.sizes() && a.scalar_type() == b.scalar_type() &&
         std::memcmp(a.contiguous().data_ptr(), b.contiguous().data_ptr(), static_cast<std::size_t>(a.nbytes())) == 0;
}

QString first_difference(const at::Tensor& ours, const at::Tensor& want) {
  const at::Tensor a = ours.reshape({-1}).to(at::kFloat), b = want.reshape({-1}).to(at::kFloat);
  if (a.numel() != b.numel()) return QString("%1 values, not %2").arg(a.numel()).arg(b.numel());
  for (std::int64_t i = 0; i < a.numel(); ++i) {
    const float x = a[i].item<float>(), y = b[i].item<float>();
    if (!(x == y || (std::isnan(x) && std::isnan(y)))) return QString("element %1: %2, not %3").arg(i).arg(x, 0, 'g', 9).arg(y, 0, 'g', 9);
  }
  return "bits differ (signed zero?)";
}

}  // namespace

class TestBaseQuant : public QObject {
  Q_OBJECT

  std::unique_ptr<zs::io::SafetensorsReader> ref;

 private slots:
  void initTestCase() {
    const QString fixture = zs::test::peerFixture("base_quant.safetensors");
    if (!QFile::exists(fixture)) ZS_SKIP_UNLESS_CI("tests/fixtures/base_quant.safetensors not found: run gen/base_quant.py");
    ref = std::make_unique<zs::io::SafetensorsReader>(fixture.toStdString());
  }

  void e4m3IsPyTorchsCast() {
    // Every code's value, then a sweep through every code, every midpoint (ties to even), the
    // floats either side of each midpoint, subnormals, the NaN edge at 464/480, signed zeros.
    const at::Tensor values = ref->tensor("e4m3.values");
    for (int c = 0; c < 256; ++c) {
      const float want = values[c].item<float>(), got = zs::quant::e4m3_to_float(static_cast<std::uint8_t>(c));
      QVERIFY2(std::isnan(want) ? std::isnan(got) : std::memcmp(&want, &got, sizeof got) == 0, qPrintable(QString("code %1").arg(c)));
    }
    const at::Tensor x = ref->tensor("e4m3.inputs"), codes = ref->tensor("e4m3.codes");
    const float* in = x.data_ptr<float>();
    const std::uint8_t* want = codes.data_ptr<std::uint8_t>();
    for (std::int64_t i = 0; i < x.numel(); ++i)
      QVERIFY2(zs::quant::e4m3_from_float(in[i]) == want[i],
               qPrintable(QString("%1 -> 0x%2, PyTorch 0x%3").arg(in[i], 0, 'g', 9)
                              .arg(zs::quant::e4m3_from_float(in[i]), 2, 16, QChar('0')).arg(want[i], 2, 16, QChar('0'))));
  }

  void blockScaledFp8AndInt8() {
    const at::Tensor w = ref->tensor("weight");
    for (const auto& [format, name] : {std::pair{BaseFormat::fp8, std::string("fp8")}, std::pair{BaseFormat::int8, std::string("int8")}}) {
      const zs::quant::QuantizedWeight q = zs::quant::quantize(w, format);
      QVERIFY2(same_bits(q.scales, ref->tensor(name + ".scales")), qPrintable(QString::fromStdString(name) + " scales: " +
                                                                              first_difference(q.scales, ref->tensor(name + ".scales"))));
      QVERIFY2(same_bits(q.codes, ref->tensor(name + ".codes")),
               qPrintable(QString::fromStdString(name) + " codes: " + first_difference(q.codes, ref->tensor(name + ".codes"))));
      const at::Tensor back = zs::quant::dequantize(q);
      QVERIFY2(same_bits(back, ref->tensor(name + ".dequantized")),
               qPrintable(QString::fromStdString(name) + ": " + first_difference(back, ref->tensor(name + ".dequantized"))));
      // 200 columns: 4 blocks a row, the last of 8; codes a byte each, scales 2 bytes a block.
      QCOMPARE(q.scales.sizes().vec(), (std::vector<std::int64_t>{8, 4}));
      QCOMPARE(q.bytes(), std::int64_t{8 * 200 + 8 * 4 * 2});
    }
  }

  void nf4IsBitsandbytes() {
    for (const auto& [name, source] : {std::pair<std::string, std::string>{"nf4.flat", "nf4.flat"}, {"nf4.rows", "weight"}}) {
      const at::Tensor w = ref->tensor(source);
      const zs::quant::QuantizedWeight q = zs::quant::quantize(w, BaseFormat::nf4);
      QVERIFY2(same_bits(q.scales, ref->tensor(name + ".absmax")),
               qPrintable(QString::fromStdString(name) + " absmax: " + first_difference(q.scales, ref->tensor(name + ".absmax"))));
      QVERIFY2(same_bits(q.codes, ref->tensor(name + ".codes")),
               qPrintable(QString::fromStdString(name) + " codes: " + first_difference(q.codes, ref->tensor(name + ".codes"))));
      const at::Tensor back = zs::quant::dequantize(q);
      QCOMPARE(back.sizes(), w.sizes());
      QVERIFY2(same_bits(back.reshape({-1}), ref->tensor(name + ".dequantized").reshape({-1})),
               qPrintable(QString::fromStdString(name) + ": " + first_difference(back, ref->tensor(name + ".dequantized"))));
      QCOMPARE(q.bytes(), (w.numel() + 1) / 2 + (w.numel() + 63) / 64 * 4);
    }
  }

  void publishedFp8Files() {
    // fp8_weights.safetensors: every code of each fp8 dtype as safetensors' torch writer stores them.
    const zs::io::SafetensorsReader file(zs::test::peerFixture("fp8_weights.safetensors").toStdString());
    const at::Tensor every = at::arange(256, at::TensorOptions().dtype(at::kInt)).to(at::kByte).reshape({16, 16});
    for (const std::string dtype : {"e4m3", "e5m2"}) {
      QVERIFY2(at::equal(file.float8_codes(dtype), every), dtype.c_str());
      const at::Tensor got = file.to_float(dtype).reshape({-1}), want = ref->tensor(dtype + ".values");
      QVERIFY2(same_bits(at::nan_to_num(got, 1234.5), at::nan_to_num(want, 1234.5)) && at::equal(at::isnan(got), at::isnan(want)),
               qPrintable(QString::fromStdString(dtype) + ": " + first_difference(got, want)));
    }
    QVERIFY(file.to_float("e5m2")[15][12].item<float>() == -std::numeric_limits<float>::infinity());  // 0xfc
    try {
      file.tensor("e4m3");
      QFAIL("an fp8 tensor came back as a LibTorch tensor");
    } catch (const zs::Error& e) {
      QVERIFY2(std::string(e.what()).find("fp8_weights.safetensors: tensor 'e4m3' has dtype F8_E4M3") != std::string::npos, e.what());
    }
    try {
      ref->float8_codes("weight");
      QFAIL("float8_codes read a float32 tensor");
    } catch (const zs::Error& e) {
      QVERIFY2(std::string(e.what()).find("'weight' has dtype F32, not F8_E4M3 or F8_E5M2") != std::string::npos, e.what());
    }
    // A dtype nobody defines is refused when the file is opened, naming the file and the tensor.
    QTemporaryDir dir;
    const std::string bad = (dir.path() + "/f4.safetensors").toStdString();
    {
      const std::string header = R"({"w":{"dtype":"F4","shape":[2],"data_offsets":[0,1]}})";
      std::ofstream out(bad, std::ios::binary);
      const std::uint64_t n = header.size();
      out.write(reinterpret_cast<const char*>(&n), 8);
      out << header << '\0';
    }
    try {
      zs::io::SafetensorsReader refused(bad);
      QFAIL("an unknown dtype was accepted");
    } catch (const zs::Error& e) {
      QVERIFY2(std::string(e.what()).find("f4.safetensors") != std::string::npos && std::string(e.what()).find("'w'") != std::string::npos &&
                   std::string(e.what()).find("unknown dtype \"F4\"") != std::string::npos,
               e.what());
    }
  }

  // The GPU's path (tensor operations) gives the loops' values bit for bit, in every format, for
  // rows whose length is not a multiple of the block and an odd NF4 count.
  void tensorOperationsEqualTheLoops() {
    at::manual_seed(3);
    for (BaseFormat f : {BaseFormat::fp8, BaseFormat::int8, BaseFormat::nf4})
      for (const std::vector<std::int64_t>& shape : {std::vector<std::int64_t>{96, 128}, {7, 100}, {5, 13}}) {
        const at::Tensor w = at::randn(shape) * 0.05;
        const zs::quant::QuantizedWeight q = zs::quant::quantize(w, f);
        const at::Tensor loops = zs::quant::dequantize(q), ops = zs::quant::dequantize_ops(q, at::kFloat);
        QVERIFY2(same_bits(ops, loops), qPrintable(QString("%1 %2x%3: %4").arg(zs::quant::to_string(f)).arg(shape[0]).arg(shape[1])
                                                     .arg(first_difference(ops, loops))));
        QVERIFY(same_bits(zs::quant::dequantize_ops(q, at::kBFloat16), loops.to(at::kBFloat16)));
      }
  }

  // A quantized layer computes what a plain Linear on the dequantized weight computes, forward and
  // backward (input and bias gradients), and its backward keeps the codes, not the weight.
  void quantizedLayerIsALinearOnTheDequantizedWeight() {
    at::manual_seed(4);
    for (BaseFormat f : {BaseFormat::fp8, BaseFormat::int8, BaseFormat::nf4})
    for (bool bias : {true, false}) {  // (SD's attention projections have none)
      const auto options = torch::nn::LinearOptions(70, 24).bias(bias);
      zs::models::AdaptedLinear quantized(options), plain(options);
      plain->weight.requires_grad_(false);
      auto q = std::make_shared<zs::quant::QuantizedWeight>(zs::quant::quantize(quantized->weight.detach(), f));
      {
        at::NoGradGuard no_grad;
        plain->weight.copy_(zs::quant::dequantize(*q));
        if (bias) plain->bias.copy_(quantized->bias);
        quantized->weight.set_data(at::empty({0}));
      }
      quantized->quantized = q;
      const at::Tensor x = at::randn({3, 5, 70}).requires_grad_(true), x2 = x.detach().clone().requires_grad_(true);
      const at::Tensor y = quantized->forward(x), y2 = plain->forward(x2);
      QVERIFY2(at::allclose(y, y2, 1e-6, 1e-6), zs::quant::to_string(f));
      const at::Tensor g = at::randn_like(y);
      y.backward(g);
      y2.backward(g);
      QVERIFY2(at::allclose(x.grad(), x2.grad(), 1e-6, 1e-6), zs::quant::to_string(f));
      if (bias) QVERIFY2(at::allclose(quantized->bias.grad(), plain->bias.grad(), 1e-5, 1e-6), zs::quant::to_string(f));
      {
        at::NoGradGuard no_grad;  // sampling: no graph, the same values
        QVERIFY(at::allclose(quantized->forward(x), y2, 1e-6, 1e-6));
      }
    }
  }

  // Published fp8 files load as model weights (SafetensorsReader::weight): a plain one's values as
  // stored, ComfyUI's older scaled_fp8 (`.scale_weight`, a value or one a row) and newer
  // `_quantization_metadata` (`.weight_scale` of a float8_e4m3fn layer) times their scales; their
  // scale tensors are not model tensors. Refused, naming the file and tensor: a layer in a format
  // not read here, a float8 layer without its scale, a scale that fits neither the tensor nor its rows.
  // A plain fp8 weight quantized to fp8 keeps its codes with unit scales.
  void comfyScaledFp8FilesLoadAndBadOnesAreRefused() {
    QTemporaryDir dir;
    at::manual_seed(5);
    const at::Tensor codes = at::randint(0, 0x7e, {4, 8}, at::TensorOptions().dtype(at::kLong)).to(at::kByte);
    at::Tensor values = at::empty({4, 8});
    for (std::int64_t i = 0; i < 32; ++i) values.view(-1)[i] = zs::quant::e4m3_to_float(codes.view(-1)[i].item<std::uint8_t>());
    const at::Tensor scale = at::full({}, 0.015625f), rows = at::tensor({0.5f, 2.0f, 0.25f, 1.0f});
    const RawTensor w{"blk.weight", "F8_E4M3", {4, 8}, bytes_of(codes)}, marker{"scaled_fp8", "F8_E4M3", {0}, ""};
    const std::string old_file = (dir.path() + "/old.safetensors").toStdString();
    write_raw_safetensors(old_file, {w, {"blk.scale_weight", "F32", {}, bytes_of(scale)}, marker,
                                     {"row.weight", "F8_E4M3", {4, 8}, bytes_of(codes)}, {"row.scale_weight", "F32", {4}, bytes_of(rows)},
                                     {"blk.bias", "F32", {4}, bytes_of(rows)}});
    const zs::io::SafetensorsReader old(old_file);
    QVERIFY(at::equal(old.weight("blk.weight"), values * 0.015625f));
    QVERIFY(at::equal(old.weight("row.weight"), values * rows.unsqueeze(1)));
    QVERIFY(at::equal(old.weight("blk.bias"), rows));
    QVERIFY(old.is_quantization_extra("blk.scale_weight") && old.is_quantization_extra("scaled_fp8") && !old.is_quantization_extra("blk.bias"));
    // (built from parts: moc's tokenizer misreads raw strings holding escaped quotes)
    const std::string q = "\\\"";
    const std::string layers = "{" + q + "format_version" + q + ":" + q + "1.0" + q + "," + q + "layers" + q + ":{" + q + "blk" + q +
                               ":{" + q + "format" + q + ":" + q + "float8_e4m3fn" + q + "}," + q + "big" + q + ":{" + q + "format" +
                               q + ":" + q + "nvfp4" + q + "}," + q + "bare" + q + ":{" + q + "format" + q + ":" + q +
                               "float8_e4m3fn" + q + "}}}";
    const std::string meta = "{\"_quantization_metadata\":\"" + layers + "\"}";
    const std::string new_file = (dir.path() + "/new.safetensors").toStdString();
    write_raw_safetensors(new_file, {w, {"blk.weight_scale", "F32", {}, bytes_of(scale)}, {"big.weight", "U8", {4, 4}, std::string(16, '\0')},
                                     {"bare.weight", "F8_E4M3", {4, 8}, bytes_of(codes)}, {"plain.weight", "F8_E4M3", {4, 8}, bytes_of(codes)}},
                          meta);
    const zs::io::SafetensorsReader fresh(new_file);
    QVERIFY(at::equal(fresh.weight("blk.weight"), values * 0.015625f));
    QVERIFY(at::equal(fresh.weight("plain.weight"), values));  // not listed: a plain fp8 tensor
    QVERIFY(fresh.is_quantization_extra("blk.weight_scale"));
    auto refused = [&](const zs::io::SafetensorsReader& r, const std::string& name, const std::string& says) {
      try {
        r.weight(name);
        QFAIL(qPrintable(QString::fromStdString(name + " was read")));
      } catch (const zs::Error& e) {
        const std::string m = e.what();
        QVERIFY2(m.find(r.path()) != std::string::npos && m.find("'" + name + "'") != std::string::npos && m.find(says) != std::string::npos,
                 e.what());
      }
    };
    refused(fresh, "big.weight", "stored as nvfp4");
    refused(fresh, "bare.weight", "without its scale 'bare.weight_scale'");
    const std::string bad_file = (dir.path() + "/bad.safetensors").toStdString();
    write_raw_safetensors(bad_file, {w, {"blk.scale_weight", "F32", {3}, bytes_of(rows.narrow(0, 0, 3))}, marker});
    refused(zs::io::SafetensorsReader(bad_file), "blk.weight", "of shape [3] does not fit");
    // Quantized to fp8, a plain fp8 weight keeps its codes (unit scales); a bf16 one does not qualify.
    const zs::quant::QuantizedWeight kept = zs::quant::fp8_as_stored(fresh.weight("plain.weight"));
    QVERIFY(kept.codes.defined() && at::equal(kept.codes, codes) && at::equal(kept.scales.to(at::kFloat), at::ones({4, 1})));
    QVERIFY(at::equal(zs::quant::dequantize(kept), values));
    QVERIFY(!zs::quant::fp8_as_stored(at::randn({4, 8})).codes.defined());
    // Exports name the limit of a base that is an fp8 file: first_fp8_file finds one in a file or a folder.
    QCOMPARE(zs::io::first_fp8_file(old_file), old_file);
    QVERIFY(zs::io::first_fp8_file(dir.path().toStdString()).ends_with(".safetensors"));
    QTemporaryDir plain_dir;
    const std::string plain = (plain_dir.path() + "/bf16.safetensors").toStdString();
    write_raw_safetensors(plain, {{"w.weight", "F32", {4}, bytes_of(rows)}});
    QVERIFY(zs::io::first_fp8_file(plain).empty() && zs::io::first_fp8_file(plain_dir.path().toStdString()).empty());
  }

  // The quantized base's copy (train/base_cache.h): a load that finds a unit's file there takes
  // its Linear weights' codes from it and never asks the model files for those weights (their
  // biases and norms still come from the files); the codes are the ones the first load made.
  void cachedCopyLeavesTheBlockWeightsUnread() {
    const std::string folder = zs::test::peerFixture("flux-tiny").toStdString();
    if (!QFile::exists(QString::fromStdString(folder))) ZS_SKIP_UNLESS_CI("tests/fixtures/flux-tiny not found");
    QTemporaryDir dir;
    const std::string cache = dir.path().toStdString() + "/base-copy";
    const auto config = zs::models::FluxConfig::from_file(folder + "/transformer/config.json");
    std::vector<std::string> files;
    for (const auto& e : std::filesystem::directory_iterator(folder + "/transformer"))
      if (e.path().extension() == ".safetensors") files.push_back(e.path().string());
    const zs::models::WeightFiles r(files);
    std::set<std::string> asked;
    const zs::models::TensorLookup lookup = [&](const std::string& n) {
      asked.insert(n);
      return r.find(n);
    };
    zs::train::QuantizedBaseLoad first(BaseFormat::nf4, cache, /*writes=*/true, {});
    const auto a = zs::models::load_units<zs::models::FluxTransformer2DModel>(config, lookup, folder, first.callback());
    const auto made = zs::models::quantized_weights(*a);
    QVERIFY(!made.empty());
    QCOMPARE(first.quantized.layers, made.size());
    QCOMPARE(first.cached.layers, std::size_t{0});
    QCOMPARE(static_cast<std::int64_t>(first.units_written), config.num_layers + config.num_single_layers);
    for (const auto& [name, q] : made) QVERIFY2(asked.count(name), name.c_str());

    asked.clear();
    zs::train::QuantizedBaseLoad second(BaseFormat::nf4, cache, /*writes=*/false, {});
    const auto b = zs::models::load_units<zs::models::FluxTransformer2DModel>(config, lookup, folder, second.callback());
    const auto read = zs::models::quantized_weights(*b);
    QCOMPARE(second.cached.layers, made.size());
    QCOMPARE(second.quantized.layers, std::size_t{0});
    QCOMPARE(read.size(), made.size());
    for (std::size_t i = 0; i < made.size(); ++i) {
      QCOMPARE(read[i].first, made[i].first);
      QVERIFY2(!asked.count(made[i].first), made[i].first.c_str());
      QVERIFY(same_bits(read[i].second->codes, made[i].second->codes) && same_bits(read[i].second->scales, made[i].second->scales));
    }
    QVERIFY(std::any_of(asked.begin(), asked.end(), [](const std::string& n) { return n.starts_with("transformer_blocks.0."); }));
    QVERIFY2(second.summary("nf4").find("read as nf4 from the cache " + cache) != std::string::npos, second.summary("nf4").c_str());
  }

  // A stored copy read back is checked against the layout quantize() makes.
  void wellFormedCopies() {
    const at::Tensor w = at::randn({8, 100});
    for (const BaseFormat f : {BaseFormat::fp8, BaseFormat::int8, BaseFormat::nf4}) {
      zs::quant::QuantizedWeight q = zs::quant::quantize(w, f);
      QVERIFY(zs::quant::well_formed(q));
      zs::quant::QuantizedWeight narrower = q;
      narrower.shape = {8, 99};
      QVERIFY(!zs::quant::well_formed(narrower));
      zs::quant::QuantizedWeight retyped = q;
      retyped.scales = q.scales.to(at::kHalf);
      QVERIFY(!zs::quant::well_formed(retyped));
    }
  }

  void formatsByName() {
    QCOMPARE(zs::quant::base_format_from_string("nf4"), BaseFormat::nf4);
    QCOMPARE(std::string(zs::quant::to_string(BaseFormat::fp8)), std::string("fp8"));
    try {
      zs::quant::base_format_from_string("fp4");
      QFAIL("fp4 accepted");
    } catch (const zs::Error& e) {
      QVERIFY2(std::string(e.what()).find("bf16, fp8, int8 or nf4") != std::string::npos, e.what());
    }
  }
};

ZS_TEST_MAIN(TestBaseQuant);
#include "tst_base_quant.moc"
