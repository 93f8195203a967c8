#include "io/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <filesystem>
#include <cerrno>
#include <cstring>
#include <set>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "quant/base_quant.h"
#include "io/atomic_file.h"

namespace zs::io {

namespace {

using json = nlohmann::json;
constexpr std::uint64_t kMaxHeader = 100'000'000;

struct DType {
  const char* name;
  std::size_t size;
  at::ScalarType type;  // Undefined where LibTorch has no equivalent
};

const std::vector<DType>& dtypes() {
  static const std::vector<DType> table = {
      {"BOOL", 1, at::kBool},       {"U8", 1, at::kByte},     {"I8", 1, at::kChar},
      {"F8_E5M2", 1, at::ScalarType::Undefined},              {"F8_E4M3", 1, at::ScalarType::Undefined},
      {"I16", 2, at::kShort},       {"U16", 2, at::ScalarType::Undefined},
      {"F16", 2, at::kHalf},        {"BF16", 2, at::kBFloat16}, {"I32", 4, at::kInt},
      {"U32", 4, at::ScalarType::Undefined},                  {"F32", 4, at::kFloat},
      {"C64", 8, at::kComplexFloat}, {"F64", 8, at::kDouble},  {"I64", 8, at::kLong},
      {"U64", 8, at::ScalarType::Undefined},
  };
  return table;
}

const DType* find_dtype(const std::string& name) {
  for (const auto& d : dtypes())
    if (name == d.name) return &d;
  return nullptr;
}

const char* dtype_name(at::ScalarType t) {
  for (const auto& d : dtypes())
    if (d.type == t) return d.name;
  return nullptr;
}

[[noreturn]] void not_safetensors(const std::string& path, const std::string& what) {
  throw Error(ErrorKind::io, path + ": not a valid safetensors file: " + what);
}

}  // namespace

std::size_t safetensors_dtype_size(const std::string& dtype) {
  const DType* d = find_dtype(dtype);
  return d ? d->size : 0;
}

SafetensorsReader::SafetensorsReader(const std::string& path) : path_(path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw Error(ErrorKind::io, path + ": cannot open: " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    ::close(fd);
    throw Error(ErrorKind::io, path + ": cannot stat: " + std::strerror(errno));
  }
  size_ = static_cast<std::size_t>(st.st_size);
  if (size_ > 0) {
    void* map = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    ::close(fd);
    if (map == MAP_FAILED) throw Error(ErrorKind::io, path + ": cannot map: " + std::strerror(errno));
    data_ = static_cast<const std::uint8_t*>(map);
  } else {
    ::close(fd);
  }
  try {
    if (size_ < 8) not_safetensors(path, "shorter than the 8-byte header length");
    std::uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = (n << 8) | data_[i];  // little-endian
    if (n > kMaxHeader) not_safetensors(path, "header length " + std::to_string(n) + " exceeds the 100 MB limit");
    if (8 + n > size_) not_safetensors(path, "header length " + std::to_string(n) + " runs past the end of the file");
    data_start_ = 8 + static_cast<std::size_t>(n);
    const std::string text(reinterpret_cast<const char*>(data_ + 8), static_cast<std::size_t>(n));

    // Duplicate top-level names are refused (a plain JSON parse would keep the last).
    std::set<std::string> seen;
    std::string duplicate;
    json header;
    try {
      header = json::parse(text, [&](int depth, json::parse_event_t event, json& parsed) {
        if (depth == 1 && event == json::parse_event_t::key && !seen.insert(parsed.get<std::string>()).second)
          duplicate = parsed.get<std::string>();
        return true;
      });
    } catch (const json::exception& e) {
      not_safetensors(path, std::string("header is not valid UTF-8 JSON (") + e.what() + ")");
    }
    if (!duplicate.empty()) not_safetensors(path, "tensor '" + duplicate + "' is listed twice");
    if (!header.is_object()) not_safetensors(path, "header is not a JSON object");

    for (auto it = header.begin(); it != header.end(); ++it) {
      const std::string& name = it.key();
      if (name == "__metadata__") {
        if (!it->is_object()) not_safetensors(path, "__metadata__ must map strings to strings");
        for (auto m = it->begin(); m != it->end(); ++m) {
          if (!m->is_string()) not_safetensors(path, "__metadata__ value of '" + m.key() + "' is not a string");
          metadata_[m.key()] = m->get<std::string>();
        }
        continue;
      }
      const std::string where = "tensor '" + name + "'";
      const json& e = *it;
      if (!e.is_object() || !e.contains("dtype") || !e.contains("shape") || !e.contains("data_offsets"))
        not_safetensors(path, where + " needs dtype, shape and data_offsets");
      SafetensorsEntry entry;
      entry.name = name;
      if (!e["dtype"].is_string() || !find_dtype(e["dtype"].get<std::string>()))
        not_safetensors(path, where + " has unknown dtype " + e["dtype"].dump());
      entry.dtype = e["dtype"].get<std::string>();
      if (!e["shape"].is_array()) not_safetensors(path, where + " has a shape that is not a list");
      std::uint64_t elements = 1;
      for (const auto& d : e["shape"]) {
        if (!d.is_number_unsigned()) not_safetensors(path, where + " has a shape entry that is not a non-negative integer");
        const std::uint64_t dim = d.get<std::uint64_t>();
        if (dim != 0 && elements > UINT64_MAX / dim) not_safetensors(path, where + " has a shape whose size overflows");
        elements *= dim;
        entry.shape.push_back(static_cast<std::int64_t>(dim));
      }
      const auto& off = e["data_offsets"];
      if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() || !off[1].is_number_unsigned())
        not_safetensors(path, where + " needs data_offsets [begin, end]");
      entry.begin = off[0].get<std::uint64_t>();
      entry.end = off[1].get<std::uint64_t>();
      const std::uint64_t item = safetensors_dtype_size(entry.dtype);
      if (elements > UINT64_MAX / item) not_safetensors(path, where + " has a byte size that overflows");
      if (entry.end < entry.begin || entry.end - entry.begin != elements * item)
        not_safetensors(path, where + " has data_offsets [" + std::to_string(entry.begin) + ", " + std::to_string(entry.end) +
                       "] that do not match its shape and dtype (" + std::to_string(elements * item) + " bytes)");
      entries_.push_back(std::move(entry));
    }
    std::sort(entries_.begin(), entries_.end(), [](const auto& a, const auto& b) {
      return std::tie(a.begin, a.end) < std::tie(b.begin, b.end);
    });
    std::uint64_t expected = 0;
    for (const auto& entry : entries_) {
      if (entry.begin != expected)
        not_safetensors(path, "tensor '" + entry.name + "' starts at byte " + std::to_string(entry.begin) + " but " +
                       (entry.begin > expected ? "a gap" : "an overlap") + " precedes it (expected " +
                       std::to_string(expected) + ")");
      expected = entry.end;
    }
    if (data_start_ + expected != size_)
      not_safetensors(path, "the data section holds " + std::to_string(size_ - data_start_) + " bytes but the tensors need " +
                     std::to_string(expected) + (data_start_ + expected < size_ ? " (trailing bytes)" : " (truncated)"));
    // ComfyUI's quantized files (weight()): the older scheme's marker, the newer one's layer list.
    scaled_fp8_ = contains("scaled_fp8");
    if (const auto q = metadata_.find("_quantization_metadata"); q != metadata_.end()) {
      json layers;
      try {
        layers = json::parse(q->second).at("layers");
      } catch (const json::exception& e) {
        not_safetensors(path, std::string("_quantization_metadata is not ComfyUI's {\"layers\": {...}} JSON (") + e.what() + ")");
      }
      if (!layers.is_object()) not_safetensors(path, "_quantization_metadata's layers is not an object");
      for (auto l = layers.begin(); l != layers.end(); ++l) {
        if (!l->is_object() || !l->contains("format") || !(*l)["format"].is_string())
          not_safetensors(path, "_quantization_metadata's layer '" + l.key() + "' has no format");
        layer_formats_[l.key()] = (*l)["format"].get<std::string>();
      }
    }
  } catch (...) {
    if (data_) ::munmap(const_cast<std::uint8_t*>(data_), size_);
    data_ = nullptr;
    throw;
  }
}

SafetensorsReader::~SafetensorsReader() {
  if (data_) ::munmap(const_cast<std::uint8_t*>(data_), size_);
}

bool SafetensorsReader::contains(const std::string& name) const {
  return std::any_of(entries_.begin(), entries_.end(), [&](const auto& e) { return e.name == name; });
}

const SafetensorsEntry& SafetensorsReader::entry(const std::string& name) const {
  const auto it = std::find_if(entries_.begin(), entries_.end(), [&](const auto& e) { return e.name == name; });
  if (it == entries_.end()) throw Error(ErrorKind::io, path_ + ": no tensor named '" + name + "'");
  return *it;
}

at::Tensor SafetensorsReader::tensor(const std::string& name) const {
  const SafetensorsEntry& e = entry(name);
  const DType* d = find_dtype(e.dtype);
  if (d->type == at::ScalarType::Undefined)
    throw Error(ErrorKind::io, path_ + ": tensor '" + name + "' has dtype " + e.dtype + ", which LibTorch cannot hold");
  at::Tensor out = at::empty(e.shape, at::TensorOptions().dtype(d->type));
  if (e.end > e.begin) std::memcpy(out.data_ptr(), data_ + data_start_ + e.begin, e.end - e.begin);
  return out;
}

at::Tensor SafetensorsReader::float8_codes(const std::string& name) const {
  const SafetensorsEntry& e = entry(name);
  if (e.dtype != "F8_E4M3" && e.dtype != "F8_E5M2")
    throw Error(ErrorKind::io, path_ + ": tensor '" + name + "' has dtype " + e.dtype + ", not F8_E4M3 or F8_E5M2");
  at::Tensor out = at::empty(e.shape, at::TensorOptions().dtype(at::kByte));
  if (e.end > e.begin) std::memcpy(out.data_ptr(), data_ + data_start_ + e.begin, e.end - e.begin);
  return out;
}

namespace {

/// "<layer>.weight" -> "<layer>" (else the name itself).
std::string layer_of(const std::string& name) {
  return name.size() > 7 && name.ends_with(".weight") ? name.substr(0, name.size() - 7) : name;
}

/// "[a, b]".
std::string shape_text(at::IntArrayRef shape) {
  std::string out;
  for (const auto d : shape) out += (out.empty() ? "" : ", ") + std::to_string(d);
  return "[" + out + "]";
}

}  // namespace

at::Tensor SafetensorsReader::weight(const std::string& name) const {
  const SafetensorsEntry& e = entry(name);
  const std::string layer = layer_of(name);
  const bool fp8 = e.dtype == "F8_E4M3" || e.dtype == "F8_E5M2";
  std::string scale_name;
  if (const auto listed = layer_formats_.find(layer); listed != layer_formats_.end() && layer != name) {
    if (listed->second != "float8_e4m3fn")
      throw Error(ErrorKind::io, path_ + ": tensor '" + name + "' is stored as " + listed->second +
                                     " (ComfyUI's _quantization_metadata), which ZeroStudio does not read; use a bf16 or "
                                     "fp8 (float8_e4m3fn) file of this model");
    if (!fp8) throw Error(ErrorKind::io, path_ + ": tensor '" + name + "' is listed as float8_e4m3fn but has dtype " + e.dtype);
    scale_name = layer + ".weight_scale";
    if (!contains(scale_name))
      throw Error(ErrorKind::io, path_ + ": tensor '" + name + "' is float8_e4m3fn without its scale '" + scale_name + "'");
  } else if (fp8 && scaled_fp8_ && contains(layer + ".scale_weight")) {
    scale_name = layer + ".scale_weight";
  }
  if (!fp8) return tensor(name);
  at::Tensor values = to_float(name);
  if (scale_name.empty()) return values;
  const at::Tensor scale = to_float(scale_name);
  if (scale.numel() == 1) return values.mul_(scale.reshape({}));
  if (values.dim() >= 1 && scale.numel() == values.size(0)) {
    std::vector<std::int64_t> shape(static_cast<std::size_t>(values.dim()), 1);
    shape[0] = values.size(0);
    return values.mul_(scale.reshape(shape));
  }
  throw Error(ErrorKind::io, path_ + ": scale '" + scale_name + "' of shape " + shape_text(scale.sizes()) +
                                 " does not fit tensor '" + name + "' of shape " + shape_text(values.sizes()) +
                                 " (one value, or one a row)");
}

bool SafetensorsReader::is_quantization_extra(const std::string& name) const {
  if (!scaled_fp8_ && layer_formats_.empty()) return false;
  if (name == "scaled_fp8") return true;
  for (const char* suffix : {".scale_weight", ".scale_input", ".weight_scale", ".input_scale", ".weight_scale_2", ".pre_quant_scale"})
    if (name.size() > std::strlen(suffix) && name.ends_with(suffix)) return true;
  return false;
}

at::Tensor SafetensorsReader::to_float(const std::string& name) const {
  const SafetensorsEntry& e = entry(name);
  if (e.dtype != "F8_E4M3" && e.dtype != "F8_E5M2") return tensor(name).to(at::kFloat);
  // Decoded straight from the mapping (one byte a code).
  const std::array<float, 256>& table = e.dtype == "F8_E4M3" ? quant::e4m3_values() : quant::e5m2_values();
  at::Tensor out = at::empty(e.shape, at::TensorOptions().dtype(at::kFloat));
  const std::uint8_t* in = data_ + data_start_ + e.begin;
  float* o = out.data_ptr<float>();
  for (std::int64_t i = 0; i < e.numel(); ++i) o[i] = table[in[i]];
  return out;
}

at::Tensor SafetensorsReader::slice(const std::string& name, std::int64_t first, std::int64_t count) const {
  const SafetensorsEntry& e = entry(name);
  const DType* d = find_dtype(e.dtype);
  if (d->type == at::ScalarType::Undefined)
    throw Error(ErrorKind::io, path_ + ": tensor '" + name + "' has dtype " + e.dtype + ", which LibTorch cannot hold");
  const std::uint64_t elem = safetensors_dtype_size(e.dtype);
  if (first < 0 || count < 0 || (static_cast<std::uint64_t>(first + count)) * elem > e.end - e.begin)
    throw Error(ErrorKind::io, path_ + ": tensor '" + name + "' has no elements [" + std::to_string(first) + ", " +
                                   std::to_string(first + count) + ")");
  at::Tensor out = at::empty({count}, at::TensorOptions().dtype(d->type));
  if (count > 0) std::memcpy(out.data_ptr(), data_ + data_start_ + e.begin + first * elem, count * elem);
  return out;
}

SafetensorsStreamWriter::SafetensorsStreamWriter(std::string path, std::vector<Entry> entries,
                                                 const std::map<std::string, std::string>& metadata)
    : path_(std::move(path)), entries_(std::move(entries)) {
  json header = json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::uint64_t offset = 0;
  std::set<std::string> names;
  for (const auto& e : entries_) {
    const char* dt = dtype_name(e.dtype);
    if (!dt) throw Error(ErrorKind::io, path_ + ": tensor '" + e.name + "' has a dtype safetensors cannot store");
    if (e.name == "__metadata__" || !names.insert(e.name).second)
      throw Error(ErrorKind::io, path_ + ": tensor name '" + e.name + "' is reserved or given twice");
    std::uint64_t n = 1;
    for (auto d : e.shape) n *= static_cast<std::uint64_t>(d);
    const std::uint64_t bytes = n * c10::elementSize(e.dtype);
    header[e.name] = {{"dtype", dt}, {"shape", e.shape}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  std::string prefix(8, '\0');
  for (int i = 0; i < 8; ++i) prefix[i] = static_cast<char>((static_cast<std::uint64_t>(text.size()) >> (8 * i)) & 0xff);
  const std::filesystem::path p(path_);
  std::string hidden = ".";  // not "." + name: GCC 12 warns falsely on that at -O3
  hidden += p.filename().string();
  hidden += ".tmp";
  tmp_ = (p.parent_path() / hidden).string();
  file_ = std::fopen(tmp_.c_str(), "wb");
  if (!file_) throw Error(ErrorKind::io, tmp_ + ": cannot create: " + std::strerror(errno));
  if (std::fwrite(prefix.data(), 1, 8, file_) != 8 || std::fwrite(text.data(), 1, text.size(), file_) != text.size())
    throw Error(ErrorKind::io, tmp_ + ": write failed (is the disk full?)");
}

SafetensorsStreamWriter::~SafetensorsStreamWriter() {
  if (file_) {
    std::fclose(file_);
    std::remove(tmp_.c_str());
  }
}

void SafetensorsStreamWriter::write(const at::Tensor& tensor) {
  if (next_ >= entries_.size()) throw Error(ErrorKind::io, path_ + ": more tensors written than declared");
  const Entry& e = entries_[next_];
  if (tensor.sizes().vec() != e.shape)
    throw Error(ErrorKind::io, path_ + ": tensor '" + e.name + "' has the wrong shape for its header entry");
  const at::Tensor t = tensor.detach().to(at::kCPU).to(e.dtype).contiguous();
  const std::size_t bytes = static_cast<std::size_t>(t.numel()) * t.element_size();
  if (bytes > 0 && std::fwrite(t.data_ptr(), 1, bytes, file_) != bytes)
    throw Error(ErrorKind::io, tmp_ + ": write failed (is the disk full?)");
  ++next_;
}

void SafetensorsStreamWriter::finish() {
  if (next_ != entries_.size())
    throw Error(ErrorKind::io, path_ + ": " + std::to_string(entries_.size() - next_) + " declared tensors were not written");
  const bool ok = std::fflush(file_) == 0 && ::fsync(fileno(file_)) == 0;
  std::fclose(file_);
  file_ = nullptr;
  if (!ok || std::rename(tmp_.c_str(), path_.c_str()) != 0) {
    std::remove(tmp_.c_str());
    throw Error(ErrorKind::io, path_ + ": cannot finish writing: " + std::strerror(errno));
  }
}

void write_safetensors(const std::string& path, const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  std::vector<std::pair<std::string, at::Tensor>> order;
  std::set<std::string> names;
  for (const auto& [name, t] : tensors) {
    if (name == "__metadata__" || !names.insert(name).second)
      throw Error(ErrorKind::io, path + ": tensor name '" + name + "' is reserved or given twice");
    if (!dtype_name(t.scalar_type()))
      throw Error(ErrorKind::io, path + ": tensor '" + name + "' has a dtype safetensors cannot store");
    order.emplace_back(name, t.detach().to(at::kCPU).contiguous());
  }
  // Larger alignment first, then by name, as the reference writer orders them.
  std::stable_sort(order.begin(), order.end(), [](const auto& a, const auto& b) {
    const auto sa = a.second.element_size(), sb = b.second.element_size();
    return sa != sb ? sa > sb : a.first < b.first;
  });
  json header = json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::uint64_t offset = 0;
  for (const auto& [name, t] : order) {
    const std::uint64_t bytes = static_cast<std::uint64_t>(t.numel()) * t.element_size();
    header[name] = {{"dtype", dtype_name(t.scalar_type())}, {"shape", t.sizes().vec()}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  std::string file(8, '\0');
  for (int i = 0; i < 8; ++i) file[i] = static_cast<char>((static_cast<std::uint64_t>(text.size()) >> (8 * i)) & 0xff);
  file += text;
  file.reserve(file.size() + offset);
  for (const auto& [name, t] : order)
    file.append(static_cast<const char*>(t.data_ptr()), static_cast<std::size_t>(t.numel()) * t.element_size());
  write_file_atomic(path, file);
}

std::string first_fp8_file(const std::string& root) {
  namespace fs = std::filesystem;
  std::error_code ec;
  std::vector<std::string> files;
  if (fs::is_regular_file(root, ec)) {
    files.push_back(root);
  } else if (fs::is_directory(root, ec)) {
    for (const auto& e : fs::recursive_directory_iterator(root, ec))
      if (e.is_regular_file() && e.path().extension() == ".safetensors") files.push_back(e.path().string());
    std::sort(files.begin(), files.end());
  }
  for (const auto& f : files) {
    const SafetensorsReader r(f);
    for (const auto& e : r.entries())
      if (e.dtype == "F8_E4M3" || e.dtype == "F8_E5M2") return f;
  }
  return "";
}

}  // namespace zs::io
