#pragma once
// TensorBoard event files, written by hand: TFRecord framing around protobuf `Event` messages
// (tensorflow/core/util/event.proto, summary.proto). Only the fields TensorBoard needs for
// scalars, PNG images and text are written; the format's constants are in tfevents_format.h.

#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

namespace zs::io {

/// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78): "123456789" -> 0xE3069283.
std::uint32_t crc32c(std::string_view data);
/// TFRecord's masked CRC: ((c >> 15 | c << 17) + 0xA282EAD8) mod 2³².
std::uint32_t masked_crc32c(std::string_view data);

/// Appends framed records to one event file: u64 length, u32 masked CRC-32C of the length's
/// bytes, the data, u32 masked CRC-32C of the data (little-endian).
class TfEventWriter {
 public:
  /// Opens `path` for appending; an empty file first gets Event{wall_time, file_version:
  /// "brain.Event:2"}. Throws zs::Error(io) naming the file.
  explicit TfEventWriter(const std::string& path, double wall_time);
  ~TfEventWriter();
  TfEventWriter(const TfEventWriter&) = delete;
  TfEventWriter& operator=(const TfEventWriter&) = delete;

  /// Summary.Value{tag, simple_value}.
  void scalar(double wall_time, std::int64_t step, const std::string& tag, float value);
  /// Summary.Value{tag, image: Image{height, width, colorspace, encoded_image_string}} (PNG bytes).
  void image(double wall_time, std::int64_t step, const std::string& tag, int height, int width, int channels,
             const std::string& png);
  /// Summary.Value{tag, metadata: {plugin_data: {plugin_name: "text"}}, tensor: TensorProto{DT_STRING, string_val}}.
  void text(double wall_time, std::int64_t step, const std::string& tag, const std::string& text);
  /// Writes what is buffered, so a live TensorBoard sees it.
  void flush();
  const std::string& path() const { return path_; }

 private:
  void record(const std::string& event);
  std::string path_;
  std::FILE* file_ = nullptr;
};

}  // namespace zs::io
