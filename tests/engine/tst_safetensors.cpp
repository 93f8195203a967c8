// safetensors: round trips, the reference fixture, and every malformed case with its message.
// LibTorch first: Qt's `slots` macro would break ATen's headers.
#include <ATen/ATen.h>

#include <QTemporaryDir>
#include <QRandomGenerator>
#include <QtTest>

#include <cstring>

#include "core/text.h"

#include "core/error.h"
#include "io/atomic_file.h"
#include "io/safetensors.h"
#include "test_support.h"

using zs::io::SafetensorsReader;

namespace {

/// A file of: 8-byte little-endian `header_len` (default: the header's size), the header, `data` bytes.
std::string make_file(const std::string& header, size_t data_bytes, long long header_len = -1) {
  const unsigned long long n = header_len < 0 ? header.size() : static_cast<unsigned long long>(header_len);
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  return out + header + std::string(data_bytes, '\x01');
}

}  // namespace

class TestSafetensors : public QObject {
  Q_OBJECT

 private slots:
  void roundTrip() {
    QTemporaryDir dir;
    const std::string path = (dir.path() + "/t.safetensors").toStdString();
    const std::vector<std::pair<std::string, at::Tensor>> tensors = {
        {"w", at::randn({3, 5})},
        {"half", at::randn({4}).to(at::kHalf)},
        {"bf", at::randn({2, 2}).to(at::kBFloat16)},
        {"ids", at::arange(7, at::kLong)},
        {"mask", at::ones({3}, at::kBool)},
        {"empty", at::zeros({0, 4})},
        {"strided", at::randn({4, 6}).t()},
    };
    zs::io::write_safetensors(path, tensors, {{"format", "pt"}, {"step", "12"}});
    const SafetensorsReader reader(path);
    QCOMPARE(reader.entries().size(), tensors.size());
    QCOMPARE(reader.metadata().at("format"), std::string("pt"));
    for (const auto& [name, t] : tensors) {
      const at::Tensor back = reader.tensor(name);
      QCOMPARE(back.scalar_type(), t.scalar_type());
      QCOMPARE(back.sizes().vec(), t.sizes().vec());
      QVERIFY2(at::equal(back, t.contiguous()), name.c_str());
    }
    // Larger alignment first: the 8-byte tensor starts the data section.
    QCOMPARE(reader.entries().front().name, std::string("ids"));
    QVERIFY_THROWS_EXCEPTION(zs::Error, reader.tensor("missing"));
  }

  void readsTheReferenceFixture() {
    ZS_REQUIRE_SHARED();
    const SafetensorsReader reader((zs::test::sharedDir() + "/fixtures/sd15-tiny-reference/unet_io.safetensors").toStdString());
    const at::Tensor sample = reader.tensor("sample");
    QCOMPARE(sample.sizes().vec(), (std::vector<int64_t>{2, 4, 16, 16}));
    QCOMPARE(sample.scalar_type(), at::kFloat);
    const at::Tensor t = reader.tensor("timestep");
    QCOMPARE(t.scalar_type(), at::kLong);
    QCOMPARE(t[0].item<int64_t>(), 10);
    QCOMPARE(t[1].item<int64_t>(), 900);
  }

  void malformed_data() {
    QTest::addColumn<QByteArray>("bytes");
    QTest::addColumn<QString>("message");
    auto row = [](const char* name, const std::string& bytes, const char* message) {
      QTest::newRow(name) << QByteArray(bytes.data(), static_cast<int>(bytes.size())) << QString(message);
    };
    const std::string ok = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
    row("short file", std::string(4, '\0'), "shorter than the 8-byte header length");
    row("header over 100 MB", make_file(ok, 8, 100'000'001), "header length 100000001 exceeds the 100 MB limit");
    row("header past the end", make_file(ok, 8, 5000), "header length 5000 runs past the end of the file");
    row("invalid json", make_file("{\"a\":", 0), "header is not valid UTF-8 JSON");
    row("invalid utf-8", make_file("{\"\xff\xfe\":{}}", 0), "header is not valid UTF-8 JSON");
    row("not an object", make_file("[1,2]", 0), "header is not a JSON object");
    row("unknown dtype", make_file(R"({"a":{"dtype":"F31","shape":[2],"data_offsets":[0,8]}})", 8),
        "tensor 'a' has unknown dtype \"F31\"");
    row("missing fields", make_file(R"({"a":{"dtype":"F32","shape":[2]}})", 8), "tensor 'a' needs dtype, shape and data_offsets");
    row("negative dim", make_file(R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", 8),
        "tensor 'a' has a shape entry that is not a non-negative integer");
    row("size mismatch", make_file(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8),
        "tensor 'a' has data_offsets [0, 8] that do not match its shape and dtype (12 bytes)");
    row("shape overflow", make_file(R"({"a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,8]}})", 8),
        "tensor 'a' has a shape whose size overflows");
    row("byte size overflow", make_file(R"({"a":{"dtype":"F64","shape":[4611686018427387904],"data_offsets":[0,8]}})", 8),
        "tensor 'a' has a byte size that overflows");
    row("gap", make_file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})", 12),
        "tensor 'b' starts at byte 8 but a gap precedes it (expected 4)");
    row("overlap", make_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", 8),
        "tensor 'b' starts at byte 4 but an overlap precedes it (expected 8)");
    row("not from zero", make_file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", 8),
        "tensor 'a' starts at byte 4 but a gap precedes it (expected 0)");
    row("trailing bytes", make_file(ok, 9), "the data section holds 9 bytes but the tensors need 8 (trailing bytes)");
    row("truncated", make_file(ok, 7), "the data section holds 7 bytes but the tensors need 8 (truncated)");
    row("metadata not string", make_file(R"({"__metadata__":{"k":1}})", 0), "__metadata__ value of 'k' is not a string");
    row("duplicate name", make_file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", 4),
        "tensor 'a' is listed twice");
  }

  void malformed() {
    QFETCH(QByteArray, bytes);
    QFETCH(QString, message);
    QTemporaryDir dir;
    const std::string path = (dir.path() + "/bad.safetensors").toStdString();
    zs::io::write_file_atomic(path, bytes.toStdString());
    try {
      SafetensorsReader reader(path);
      QFAIL("no error");
    } catch (const zs::Error& e) {
      QCOMPARE(e.kind(), zs::ErrorKind::io);
      const QString expected = QString::fromStdString(path) + ": not a valid safetensors file: " + message;
      QVERIFY2(QString(e.what()).startsWith(expected), e.what());
    }
  }

  // Error messages quote headers: whatever bytes a damaged file holds, the message is printable
  // (no control bytes but newline and tab, no broken UTF-8), with the bytes shown as \xNN.
  void errorMessagesArePrintable() {
    QCOMPARE(zs::printable("a\x01" "b\xff" "c\xc3\xa9\n\x1b[31m"), std::string("a\\x01b\\xffc\xc3\xa9\n\\x1b[31m"));
    QCOMPARE(zs::printable("\xe2\x82"), std::string("\\xe2\\x82"));  // a cut UTF-8 sequence
    QTemporaryDir dir;
    const std::string path = (dir.path() + "/fuzz.safetensors").toStdString();
    const std::string header = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"__metadata__":{"k":"v"}})";
    QRandomGenerator random(7);
    int refused = 0;
    for (int trial = 0; trial < 300; ++trial) {
      std::string h = header;
      for (int k = 0; k < 3; ++k) h[random.bounded(static_cast<quint32>(h.size()))] = static_cast<char>(random.bounded(256));
      std::string file(8, '\0');
      const std::uint64_t n = h.size();
      std::memcpy(file.data(), &n, 8);
      zs::io::write_file_atomic(path, file + h + std::string(8, '\0'));
      try {
        SafetensorsReader reader(path);
      } catch (const zs::Error& e) {
        ++refused;
        QVERIFY2(zs::printable(e.what()) == e.what(), qPrintable(QByteArray(e.what()).toHex()));
      }
    }
    QVERIFY2(refused > 100, qPrintable(QString::number(refused)));
  }
};

ZS_TEST_MAIN(TestSafetensors);
#include "tst_safetensors.moc"
