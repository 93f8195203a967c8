#pragma once
// 8-bit RGB images: PNG (libpng) and JPEG (libjpeg-turbo) decoding, PNG encoding.

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace zs::io {

/// Interleaved 8-bit RGB, row-major: pixel (x, y) channel c at rgb[(y * width + x) * 3 + c].
struct Image {
  int width = 0;
  int height = 0;
  std::vector<std::uint8_t> rgb;
};

/// Decodes a PNG or JPEG file (chosen by its first bytes, not its name); grey, palette, 16-bit
/// and alpha images are converted to 8-bit RGB (alpha is dropped).
/// Throws zs::Error(data) naming the file when it cannot be read or decoded.
Image read_image(const std::string& path);

/// Width and height from a PNG or JPEG header, without decoding the pixels. Throws
/// zs::Error(data) naming the file when it is neither or is cut short.
std::pair<int, int> image_size(const std::string& path);

/// Encodes `image` as PNG to `path` atomically (temporary file, then rename).
void write_png(const std::string& path, const Image& image);

/// PNG bytes of `image` (for writers that collect files before an atomic folder rename).
std::string encode_png(const Image& image);

}  // namespace zs::io
