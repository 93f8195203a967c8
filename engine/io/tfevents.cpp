#include "io/tfevents.h"

#include <array>
#include <cerrno>
#include <cstring>

#include "core/error.h"
#include "io/tfevents_format.h"

namespace zs::io {

namespace {

using namespace tfevents;

void varint(std::string& out, std::uint64_t v) {
  while (v >= 0x80) {
    out += static_cast<char>((v & 0x7F) | 0x80);
    v >>= 7;
  }
  out += static_cast<char>(v);
}

void key(std::string& out, int field, int wire) { varint(out, static_cast<std::uint64_t>(field) << 3 | static_cast<unsigned>(wire)); }

void bytes_field(std::string& out, int field, std::string_view data) {
  key(out, field, kBytes);
  varint(out, data.size());
  out.append(data);
}

void varint_field(std::string& out, int field, std::int64_t v) {
  key(out, field, kVarint);
  varint(out, static_cast<std::uint64_t>(v));
}

template <class T>
void fixed(std::string& out, T v) {
  char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));  // little-endian hosts (x86-64, aarch64)
  out.append(b, sizeof(T));
}

/// Event{wall_time, step, summary{value}} around one Summary.Value.
std::string event_with_value(double wall_time, std::int64_t step, const std::string& value) {
  std::string summary;
  bytes_field(summary, kSummaryValue, value);
  std::string e;
  key(e, kEventWallTime, kFixed64);
  fixed(e, wall_time);
  varint_field(e, kEventStep, step);
  bytes_field(e, kEventSummary, summary);
  return e;
}

const std::array<std::uint32_t, 256>& crc_table() {
  static const auto table = [] {
    std::array<std::uint32_t, 256> t{};
    for (std::uint32_t i = 0; i < 256; ++i) {
      std::uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = c & 1 ? kCrc32cPolynomial ^ (c >> 1) : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  return table;
}

}  // namespace

std::uint32_t crc32c(std::string_view data) {
  const auto& t = crc_table();
  std::uint32_t c = 0xFFFFFFFFu;
  for (const char ch : data) c = t[(c ^ static_cast<unsigned char>(ch)) & 0xFF] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

std::uint32_t masked_crc32c(std::string_view data) {
  const std::uint32_t c = crc32c(data);
  return ((c >> 15) | (c << 17)) + kCrcMaskDelta;
}

TfEventWriter::TfEventWriter(const std::string& path, double wall_time) : path_(path) {
  file_ = std::fopen(path.c_str(), "ab");
  if (!file_) throw Error(ErrorKind::io, path + ": cannot open the TensorBoard event file: " + std::strerror(errno));
  if (std::ftell(file_) == 0) {
    std::string e;
    key(e, kEventWallTime, kFixed64);
    fixed(e, wall_time);
    bytes_field(e, kEventFileVersion, kFileVersion);
    record(e);
    flush();
  }
}

TfEventWriter::~TfEventWriter() {
  if (file_) std::fclose(file_);
}

void TfEventWriter::record(const std::string& event) {
  std::string framed;
  fixed(framed, static_cast<std::uint64_t>(event.size()));
  const std::uint32_t length_crc = masked_crc32c(framed);
  fixed(framed, length_crc);
  framed += event;
  fixed(framed, masked_crc32c(event));
  if (std::fwrite(framed.data(), 1, framed.size(), file_) != framed.size())
    throw Error(ErrorKind::io, path_ + ": write failed (is the disk full?)");
}

void TfEventWriter::scalar(double wall_time, std::int64_t step, const std::string& tag, float value) {
  std::string v;
  bytes_field(v, kValueTag, tag);
  key(v, kValueSimpleValue, kFixed32);
  fixed(v, value);
  record(event_with_value(wall_time, step, v));
}

void TfEventWriter::image(double wall_time, std::int64_t step, const std::string& tag, int height, int width,
                          int channels, const std::string& png) {
  std::string img;
  varint_field(img, kImageHeight, height);
  varint_field(img, kImageWidth, width);
  varint_field(img, kImageColorspace, channels);
  bytes_field(img, kImageEncoded, png);
  std::string v;
  bytes_field(v, kValueTag, tag);
  bytes_field(v, kValueImage, img);
  record(event_with_value(wall_time, step, v));
}

void TfEventWriter::text(double wall_time, std::int64_t step, const std::string& tag, const std::string& text) {
  std::string plugin;
  bytes_field(plugin, kPluginName, "text");
  std::string metadata;
  bytes_field(metadata, kMetadataPluginData, plugin);
  std::string tensor;
  varint_field(tensor, kTensorDtype, kDtString);
  bytes_field(tensor, kTensorStringVal, text);
  std::string v;
  bytes_field(v, kValueTag, tag);
  bytes_field(v, kValueTensor, tensor);
  bytes_field(v, kValueMetadata, metadata);
  record(event_with_value(wall_time, step, v));
}

void TfEventWriter::flush() {
  if (std::fflush(file_) != 0) throw Error(ErrorKind::io, path_ + ": write failed (is the disk full?)");
}

}  // namespace zs::io
