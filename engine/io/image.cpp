#include "io/image.h"

#include <fstream>
#include <vector>

#include <csetjmp>
#include <cstdio>
#include <cstring>
#include <memory>

#include <jpeglib.h>
#include <png.h>

#include "core/error.h"
#include "io/atomic_file.h"

namespace zs::io {
namespace {

[[noreturn]] void bad_image(const std::string& path, const std::string& what) {
  throw Error(ErrorKind::data, path + ": " + what);
}

Image decode_png(const std::string& path, const std::string& bytes) {
  png_image img;
  std::memset(&img, 0, sizeof img);
  img.version = PNG_IMAGE_VERSION;
  if (!png_image_begin_read_from_memory(&img, bytes.data(), bytes.size()))
    bad_image(path, std::string("not a readable PNG (") + img.message + ")");
  img.format = PNG_FORMAT_RGB;
  Image out;
  out.width = static_cast<int>(img.width);
  out.height = static_cast<int>(img.height);
  if (out.width <= 0 || out.height <= 0 || static_cast<std::uint64_t>(img.width) * img.height > (1ull << 28)) {
    png_image_free(&img);
    bad_image(path, "PNG size " + std::to_string(img.width) + "x" + std::to_string(img.height) + " is out of range");
  }
  out.rgb.resize(PNG_IMAGE_SIZE(img));
  if (!png_image_finish_read(&img, nullptr, out.rgb.data(), 0, nullptr))
    bad_image(path, std::string("broken PNG data (") + img.message + ")");
  return out;
}

struct JpegErrorManager {
  jpeg_error_mgr base;
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
};

extern "C" void jpeg_error_exit_to_jump(j_common_ptr cinfo) {
  auto* err = reinterpret_cast<JpegErrorManager*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, err->message);
  std::longjmp(err->jump, 1);
}

Image decode_jpeg(const std::string& path, const std::string& bytes) {
  jpeg_decompress_struct cinfo;
  JpegErrorManager err;
  cinfo.err = jpeg_std_error(&err.base);
  err.base.error_exit = jpeg_error_exit_to_jump;
  err.message[0] = '\0';
  Image out;
  // No C++ objects with destructors are created between setjmp and the calls that may jump.
  if (setjmp(err.jump)) {
    jpeg_destroy_decompress(&cinfo);
    bad_image(path, std::string("broken JPEG data (") + err.message + ")");
  }
  jpeg_create_decompress(&cinfo);
  jpeg_mem_src(&cinfo, reinterpret_cast<const unsigned char*>(bytes.data()), static_cast<unsigned long>(bytes.size()));
  jpeg_read_header(&cinfo, TRUE);
  cinfo.out_color_space = JCS_RGB;
  jpeg_start_decompress(&cinfo);
  out.width = static_cast<int>(cinfo.output_width);
  out.height = static_cast<int>(cinfo.output_height);
  out.rgb.resize(static_cast<std::size_t>(out.width) * out.height * 3);
  while (cinfo.output_scanline < cinfo.output_height) {
    unsigned char* row = out.rgb.data() + static_cast<std::size_t>(cinfo.output_scanline) * out.width * 3;
    jpeg_read_scanlines(&cinfo, &row, 1);
  }
  jpeg_finish_decompress(&cinfo);
  jpeg_destroy_decompress(&cinfo);
  return out;
}

}  // namespace

Image read_image(const std::string& path) {
  std::string bytes;
  try {
    bytes = read_file(path);
  } catch (const Error& e) {
    throw Error(ErrorKind::data, e.what());
  }
  static const unsigned char kPng[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  if (bytes.size() >= 8 && std::memcmp(bytes.data(), kPng, 8) == 0) return decode_png(path, bytes);
  if (bytes.size() >= 3 && static_cast<unsigned char>(bytes[0]) == 0xff && static_cast<unsigned char>(bytes[1]) == 0xd8 &&
      static_cast<unsigned char>(bytes[2]) == 0xff)
    return decode_jpeg(path, bytes);
  bad_image(path, bytes.empty() ? "empty file" : "neither PNG nor JPEG data");
}

std::pair<int, int> image_size(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(ErrorKind::data, path + ": cannot be read");
  std::vector<unsigned char> head(1 << 16);
  in.read(reinterpret_cast<char*>(head.data()), static_cast<std::streamsize>(head.size()));
  head.resize(static_cast<std::size_t>(in.gcount()));
  auto be16 = [&](std::size_t i) { return (head[i] << 8) | head[i + 1]; };
  auto be32 = [&](std::size_t i) { return (be16(i) << 16) | be16(i + 2); };
  if (head.size() >= 24 && head[0] == 0x89 && head[1] == 'P' && head[2] == 'N' && head[3] == 'G')
    return {be32(16), be32(20)};  // IHDR follows the signature
  if (head.size() >= 4 && head[0] == 0xFF && head[1] == 0xD8) {
    // JPEG: walk the segments to a start-of-frame marker (SOF0..SOF15 but DHT, JPG, DAC).
    std::size_t i = 2;
    while (i + 9 < head.size()) {
      if (head[i] != 0xFF) break;
      const int marker = head[i + 1];
      if (marker >= 0xC0 && marker <= 0xCF && marker != 0xC4 && marker != 0xC8 && marker != 0xCC)
        return {be16(i + 7), be16(i + 5)};
      i += 2 + static_cast<std::size_t>(be16(i + 2));
    }
  }
  // Not found in the first 64 KiB (or another format): decode it, as read_image would.
  const Image img = read_image(path);
  return {img.width, img.height};
}

std::string encode_png(const Image& image) {
  if (image.width <= 0 || image.height <= 0 ||
      image.rgb.size() != static_cast<std::size_t>(image.width) * image.height * 3)
    throw Error(ErrorKind::io, "encode_png: image buffer does not match its size");
  png_image img;
  std::memset(&img, 0, sizeof img);
  img.version = PNG_IMAGE_VERSION;
  img.width = static_cast<png_uint_32>(image.width);
  img.height = static_cast<png_uint_32>(image.height);
  img.format = PNG_FORMAT_RGB;
  png_alloc_size_t size = 0;
  if (!png_image_write_get_memory_size(img, size, 0, image.rgb.data(), 0, nullptr))
    throw Error(ErrorKind::io, std::string("PNG encoding failed: ") + img.message);
  std::string out(size, '\0');
  if (!png_image_write_to_memory(&img, out.data(), &size, 0, image.rgb.data(), 0, nullptr))
    throw Error(ErrorKind::io, std::string("PNG encoding failed: ") + img.message);
  out.resize(size);
  return out;
}

void write_png(const std::string& path, const Image& image) { write_file_atomic(path, encode_png(image)); }

}  // namespace zs::io
