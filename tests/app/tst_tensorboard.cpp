// TensorBoard event files: a decoder written here from the .proto field numbers and the
// TFRecord framing (independent of engine/io/tfevents.cpp) reads what a short run wrote live and
// what `zerostudio tensorboard` writes afterwards: every CRC, the file version, every scalar, the
// sample grids as PNG images and the config as text.
#include <cstring>
#include <fstream>
#include <map>
#include <set>

#include <QDir>
#include <QFile>
#include <QProcess>
#include <QTemporaryDir>
#include <QtTest>

#include <nlohmann/json.hpp>

#include "io/tfevents.h"
#include "test_support.h"

namespace {

/// CRC-32C bit by bit (no table), and TFRecord's mask.
std::uint32_t crc32c_bitwise(std::string_view s) {
  std::uint32_t c = 0xFFFFFFFFu;
  for (const char ch : s) {
    c ^= static_cast<unsigned char>(ch);
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0x82F63B78u & (0u - (c & 1u)));
  }
  return ~c;
}
std::uint32_t masked(std::string_view s) {
  const std::uint32_t c = crc32c_bitwise(s);
  return ((c >> 15) | (c << 17)) + 0xA282EAD8u;
}

template <class T>
T read_le(const std::string& s, std::size_t at) {
  T v;
  std::memcpy(&v, s.data() + at, sizeof(T));
  return v;
}

/// One protobuf field: its number, and its varint, fixed or bytes payload.
struct Field {
  int number = 0, wire = 0;
  std::uint64_t value = 0;  // varint, fixed32, fixed64
  std::string bytes;
};

std::vector<Field> fields(const std::string& m) {
  std::vector<Field> out;
  std::size_t i = 0;
  auto varint = [&] {
    std::uint64_t v = 0;
    for (int shift = 0; i < m.size(); shift += 7) {
      const auto b = static_cast<unsigned char>(m[i++]);
      v |= static_cast<std::uint64_t>(b & 0x7F) << shift;
      if (!(b & 0x80)) break;
    }
    return v;
  };
  while (i < m.size()) {
    const std::uint64_t key = varint();
    Field f;
    f.number = static_cast<int>(key >> 3);
    f.wire = static_cast<int>(key & 7);
    if (f.wire == 0) f.value = varint();
    else if (f.wire == 1) f.value = read_le<std::uint64_t>(m, i), i += 8;
    else if (f.wire == 5) f.value = read_le<std::uint32_t>(m, i), i += 4;
    else if (f.wire == 2) {
      const auto n = static_cast<std::size_t>(varint());
      f.bytes = m.substr(i, n);
      i += n;
    } else {
      throw std::runtime_error("wire type " + std::to_string(f.wire));
    }
    out.push_back(std::move(f));
  }
  return out;
}

const Field* find(const std::vector<Field>& fs, int number) {
  for (const auto& f : fs)
    if (f.number == number) return &f;
  return nullptr;
}

/// What the decoder found in one file.
struct Decoded {
  std::string file_version;
  std::map<std::string, std::vector<std::pair<std::int64_t, float>>> scalars;  // tag -> (step, value)
  std::vector<std::pair<std::int64_t, std::string>> images;                   // (step, PNG)
  std::map<std::string, std::string> texts;                                   // tag -> text
  std::set<std::string> image_sizes;                                          // "HxWxC"
  int records = 0;
};

/// Reads every record, checking both CRCs of each; fails the test on the first bad one.
Decoded decode(const QString& path) {
  std::ifstream in(path.toStdString(), std::ios::binary);
  const std::string s((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  Decoded d;
  std::size_t at = 0;
  while (at < s.size()) {
    if (at + 12 > s.size()) throw std::runtime_error("truncated record header");
    const auto n = read_le<std::uint64_t>(s, at);
    if (read_le<std::uint32_t>(s, at + 8) != masked(s.substr(at, 8))) throw std::runtime_error("bad length CRC");
    const std::string data = s.substr(at + 12, n);
    if (read_le<std::uint32_t>(s, at + 12 + n) != masked(data)) throw std::runtime_error("bad data CRC");
    at += 12 + n + 4;
    ++d.records;
    const auto event = fields(data);
    if (const Field* v = find(event, 3)) d.file_version = v->bytes;
    const Field* step_field = find(event, 2);
    const std::int64_t step = step_field ? static_cast<std::int64_t>(step_field->value) : 0;
    const Field* summary = find(event, 5);
    if (!summary) continue;
    for (const Field& value : fields(summary->bytes)) {
      if (value.number != 1) continue;
      const auto v = fields(value.bytes);
      const std::string tag = find(v, 1)->bytes;
      if (const Field* simple = find(v, 2)) {
        float x;
        const auto bits = static_cast<std::uint32_t>(simple->value);
        std::memcpy(&x, &bits, 4);
        d.scalars[tag].emplace_back(step, x);
      } else if (const Field* image = find(v, 4)) {
        const auto img = fields(image->bytes);
        d.images.emplace_back(step, find(img, 4)->bytes);
        d.image_sizes.insert(std::to_string(find(img, 1)->value) + "x" + std::to_string(find(img, 2)->value) + "x" +
                             std::to_string(find(img, 3)->value));
      } else if (const Field* tensor = find(v, 8)) {
        const auto t = fields(tensor->bytes);
        const auto plugin = fields(find(fields(find(v, 9)->bytes), 1)->bytes);
        if (find(t, 1)->value == 7 && find(plugin, 1)->bytes == "text") d.texts[tag] = find(t, 8)->bytes;
      }
    }
  }
  return d;
}

QString only_file(const QString& dir) {
  const QStringList files = QDir(dir).entryList({"events.out.tfevents.*"}, QDir::Files);
  return files.size() == 1 ? dir + "/" + files[0] : QString();
}

}  // namespace

class TestTensorBoard : public QObject {
  Q_OBJECT

 private slots:
  void crc32cMatchesTheCheckValue() {
    QCOMPARE(zs::io::crc32c("123456789"), 0xE3069283u);
    QCOMPARE(crc32c_bitwise("123456789"), 0xE3069283u);
    QCOMPARE(zs::io::masked_crc32c("some bytes"), masked("some bytes"));
  }

  // A short run writes its event file live; `zerostudio tensorboard` writes the same records
  // from events.jsonl afterwards.
  void aRunsEventFileHoldsEveryScalarImageAndText() {
    QTemporaryDir dir;
    const QString run = dir.path() + "/run";
    zs::test::FailureReport report(run);
    QProcess p;
    p.setProcessChannelMode(QProcess::MergedChannels);
    p.start(zs::test::cliPath(),
            {"train", zs::test::quickstart(), "--run-dir", run, "--set", "data.generate_count=32",
             "--set", "training.batch_size=4", "--set", "training.max_steps=4", "--set", "logging.every_n_steps=2", "--set",
             "sampling.every_n_steps=2", "--set", "sampling.steps=2", "--set", "checkpointing.every_n_steps=0"});
    QVERIFY(p.waitForFinished(120000));
    report.setOutput("train", QString::fromUtf8(p.readAll()));
    QCOMPARE(p.exitCode(), 0);
    const QString live = only_file(run + "/tensorboard");
    QVERIFY2(!live.isEmpty(), "one event file in the run's tensorboard/");
    QVERIFY(QFileInfo(live).fileName().contains(".tfevents."));
    Decoded d;
    try {
      d = decode(live);
    } catch (const std::exception& e) {
      QFAIL(e.what());
    }
    QCOMPARE(d.file_version, std::string("brain.Event:2"));
    for (const char* tag : {"train/loss", "train/loss_smoothed", "train/lr", "train/grad_norm", "train/samples_per_s",
                            "train/s_per_step", "memory/rank0/rss_bytes"}) {
      QVERIFY2(d.scalars.count(tag), tag);
      QCOMPARE(d.scalars[tag].size(), std::size_t{2});  // steps 2 and 4
      QCOMPARE(d.scalars[tag][1].first, std::int64_t{4});
    }
    QVERIFY(!d.scalars.count("train/loss_scale"));  // fp32: no loss scaling
    // A CPU run has no GPU memory to report: no memory/rank*/gpu_* scalars of 0 (issue 40).
    for (const char* tag : {"memory/rank0/gpu_allocated_bytes", "memory/rank0/gpu_reserved_bytes", "memory/rank0/gpu_peak_bytes"})
      QVERIFY2(!d.scalars.count(tag), tag);
    // The values are the events' values.
    std::ifstream in((run + "/events.jsonl").toStdString());
    std::vector<double> losses;
    for (std::string line; std::getline(in, line);) {
      const auto e = nlohmann::json::parse(line);
      if (e["type"] == "metrics") losses.push_back(e["loss"].get<double>());
    }
    QCOMPARE(losses.size(), std::size_t{2});
    QCOMPARE(d.scalars["train/loss"][0].second, static_cast<float>(losses[0]));
    // Samples at steps 2 and 4 as PNG images: the grid files' bytes.
    QCOMPARE(d.images.size(), std::size_t{2});
    QCOMPARE(d.images[0].first, std::int64_t{2});
    QFile grid(run + "/samples/step_2/grid.png");
    QVERIFY(grid.open(QIODevice::ReadOnly));
    QVERIFY(d.images[0].second == grid.readAll().toStdString());
    QCOMPARE(d.image_sizes.size(), std::size_t{1});
    QVERIFY2(d.image_sizes.begin()->ends_with("x3"), d.image_sizes.begin()->c_str());
    QVERIFY(d.texts.count("config"));
    QVERIFY2(d.texts["config"].find("max_steps: 4") != std::string::npos, d.texts["config"].c_str());
    // Afterwards, from events.jsonl: the same records.
    const QString out = dir.path() + "/tb";
    QProcess again;
    again.setProcessChannelMode(QProcess::MergedChannels);
    again.start(zs::test::cliPath(), {"tensorboard", run + "/", "-o", out});
    QVERIFY(again.waitForFinished(60000));
    const QString said = QString::fromUtf8(again.readAll());
    QVERIFY2(again.exitCode() == 0 && said.contains("2 images, 1 texts"), qPrintable(said));
    const Decoded replay = decode(only_file(out));
    QCOMPARE(replay.records, d.records);
    QVERIFY(replay.scalars == d.scalars);
    QVERIFY(replay.images == d.images);
    QVERIFY(replay.texts == d.texts);
  }
};

ZS_TEST_MAIN(TestTensorBoard);
#include "tst_tensorboard.moc"
