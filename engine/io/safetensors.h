#pragma once
// safetensors reading and writing with the reference implementation's checks
// (huggingface/safetensors): 8-byte little-endian header length <= 100 MB, UTF-8 JSON,
// known dtypes, offsets sorted and contiguous from 0, sizes matching shapes, no trailing
// bytes, string metadata, no duplicate names. Every failure names the file and the tensor.

#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>
#include <c10/util/accumulate.h>

namespace zs::io {

/// One tensor's entry in the header.
struct SafetensorsEntry {
  std::string name;
  std::string dtype;           ///< "F32", "BF16", "I64", ...
  std::vector<std::int64_t> shape;
  std::uint64_t begin = 0;     ///< byte offsets relative to the data section
  std::uint64_t end = 0;
  /// Elements (the product of the shape).
  std::int64_t numel() const { return c10::multiply_integers(shape); }
};

/// A memory-mapped, validated safetensors file.
class SafetensorsReader {
 public:
  /// Maps and validates `path`; throws zs::Error(io) naming the file (and tensor) on any fault.
  explicit SafetensorsReader(const std::string& path);
  ~SafetensorsReader();
  SafetensorsReader(const SafetensorsReader&) = delete;
  SafetensorsReader& operator=(const SafetensorsReader&) = delete;

  const std::string& path() const { return path_; }
  /// Entries in header order of their offsets.
  const std::vector<SafetensorsEntry>& entries() const { return entries_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  bool contains(const std::string& name) const;
  /// The named tensor, copied out of the mapping (CPU, its stored dtype).
  at::Tensor tensor(const std::string& name) const;
  /// The named F8_E4M3 or F8_E5M2 tensor's codes (uint8, its shape): LibTorch 1.13 has no float8
  /// type, so both builds read published fp8 files this way. Throws naming the file and tensor
  /// for any other dtype.
  at::Tensor float8_codes(const std::string& name) const;
  /// The named tensor as float32; float8 codes decoded to PyTorch's float8_e4m3fn / float8_e5m2
  /// values (quant/base_quant.h).
  at::Tensor to_float(const std::string& name) const;
  /// A weight as model loaders read it: tensor() for what LibTorch holds; fp8 decoded to float32
  /// (to_float) and, in ComfyUI's scaled fp8 files, times the layer's scale — the older scheme's
  /// `<layer>.scale_weight` (files with a `scaled_fp8` tensor) or the newer `<layer>.weight_scale`
  /// of a layer that the `_quantization_metadata` metadata lists as float8_e4m3fn (ComfyUI's
  /// QUANTIZATION.md). A plain fp8 file's values come back as stored (unit scales). Refused, naming
  /// the file and tensor: a layer stored in a format ZeroStudio does not read (int8_blockwise,
  /// nvfp4, ...), a scale whose shape fits neither the tensor nor its rows.
  at::Tensor weight(const std::string& name) const;
  /// Whether `name` is one of those files' scale tensors or their marker (not a model's tensor).
  bool is_quantization_extra(const std::string& name) const;
  /// Elements [first, first + count) of the named tensor, flattened, copied out of the mapping
  /// (only those bytes are read).
  at::Tensor slice(const std::string& name, std::int64_t first, std::int64_t count) const;

 private:
  /// The named entry; throws zs::Error(io) naming the file when there is none.
  const SafetensorsEntry& entry(const std::string& name) const;

  std::string path_;
  const std::uint8_t* data_ = nullptr;  // start of the whole mapping
  std::size_t size_ = 0;
  std::size_t data_start_ = 0;          // 8 + header length
  std::vector<SafetensorsEntry> entries_;
  std::map<std::string, std::string> metadata_;
  /// ComfyUI's newer scheme: each listed layer's format (from `_quantization_metadata`).
  std::map<std::string, std::string> layer_formats_;
  bool scaled_fp8_ = false;  ///< the older scheme's `scaled_fp8` marker is present
};

/// Writes tensors (any device; contiguous copies are made) to `path` atomically: header padded
/// with spaces to a multiple of 8, tensors ordered by dtype alignment then name.
void write_safetensors(const std::string& path, const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

/// Writes a safetensors file one tensor at a time, so memory holds at most one tensor: the
/// header (names, dtypes, shapes) is fixed up front, tensors are then written in that order,
/// and finish() moves the file into place (until then it is a hidden temporary file).
class SafetensorsStreamWriter {
 public:
  struct Entry {
    std::string name;
    at::ScalarType dtype;
    std::vector<std::int64_t> shape;
  };
  SafetensorsStreamWriter(std::string path, std::vector<Entry> entries, const std::map<std::string, std::string>& metadata = {});
  ~SafetensorsStreamWriter();  ///< removes the temporary file when finish() was not reached
  /// The next tensor in header order (converted to its declared dtype; shape checked).
  void write(const at::Tensor& tensor);
  void finish();

 private:
  std::string path_, tmp_;
  std::vector<Entry> entries_;
  std::size_t next_ = 0;
  std::FILE* file_ = nullptr;
};

/// Bytes per element of a safetensors dtype string; 0 when unknown.
std::size_t safetensors_dtype_size(const std::string& dtype);

/// The first .safetensors file of `root` (a file, or a folder searched recursively in name order)
/// that holds F8_E4M3 or F8_E5M2 tensors; empty when none does (or `root` is neither).
std::string first_fp8_file(const std::string& root);

}  // namespace zs::io
