#include "data/latent_cache.h"

#include <zlib.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <vector>

#include <ATen/ATen.h>

#include "io/safetensors.h"

namespace zs::data {

namespace fs = std::filesystem;

namespace {
std::string hex(std::uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "%llx", static_cast<unsigned long long>(v));
  return buf;
}
std::uint32_t crc_of(const std::string& s) {
  return static_cast<std::uint32_t>(crc32(0L, reinterpret_cast<const Bytef*>(s.data()), static_cast<uInt>(s.size())));
}
}  // namespace

LatentCache::LatentCache(const std::string& root, const std::string& model_key, std::int64_t resolution)
    : LatentCache(root, model_key, std::to_string(resolution)) {}

LatentCache::LatentCache(const std::string& root, const std::string& model_key, const std::string& folder)
    : dir_((fs::path(root) / model_key / folder).string()) {}

bool LatentCache::has(const std::string& key) const {
  std::error_code ec;
  return fs::exists(fs::path(dir_) / (key + ".safetensors"), ec);
}

bool LatentCache::load(const std::string& key, const std::vector<std::string>& names, std::vector<at::Tensor>& out) const {
  const fs::path file = fs::path(dir_) / (key + ".safetensors");
  std::error_code ec;
  if (!fs::exists(file, ec)) return false;
  try {
    const io::SafetensorsReader r(file.string());
    out.clear();
    for (const auto& name : names) out.push_back(r.tensor(name));
  } catch (const std::exception&) {
    return false;  // damaged or half-copied: encode again (and overwrite)
  }
  ++hits_;
  return true;
}

void LatentCache::store(const std::string& key, const std::vector<std::pair<std::string, at::Tensor>>& tensors) {
  fs::create_directories(dir_);
  std::vector<std::pair<std::string, at::Tensor>> data;
  for (const auto& [name, t] : tensors) data.emplace_back(name, t.to(at::kFloat).cpu().contiguous());
  io::write_safetensors((fs::path(dir_) / (key + ".safetensors")).string(), data);
  ++stored_;
}

bool LatentCache::load(const std::string& key, at::Tensor& mean, at::Tensor& logvar) const {
  std::vector<at::Tensor> out;
  if (!load(key, {"mean", "logvar"}, out)) return false;
  mean = out[0];
  logvar = out[1];
  return true;
}

void LatentCache::store(const std::string& key, const at::Tensor& mean, const at::Tensor& logvar) {
  store(key, {{"mean", mean}, {"logvar", logvar}});
}

namespace {
/// "<kind>-<crc>" of a model's path and the sizes and times of its weight files (a single file
/// stands for every component; a folder's are the .safetensors files in `components`).
std::string model_key(const std::string& kind, const std::string& pipeline_dir, const std::vector<std::string>& components) {
  std::string id = fs::absolute(pipeline_dir).lexically_normal().string();
  std::error_code ec;
  std::vector<fs::path> files;
  if (fs::is_regular_file(pipeline_dir, ec)) {
    files.push_back(pipeline_dir);
  } else {
    for (const auto& c : components) {
      // "<folder>@<setting>": the component's folder, and a setting its outputs depend on (Flux's
      // T5 sequence length) that the key includes.
      const auto at = c.find('@');
      if (at != std::string::npos) id += "|" + c;
      for (const auto& e : fs::directory_iterator(fs::path(pipeline_dir) / c.substr(0, at), ec))
        if (e.path().extension() == ".safetensors") files.push_back(e.path());
    }
    std::sort(files.begin(), files.end());
  }
  for (const auto& f : files)
    id += "|" + f.filename().string() + "|" + std::to_string(fs::file_size(f, ec)) + "|" +
          std::to_string(fs::last_write_time(f, ec).time_since_epoch().count());
  return kind + "-" + hex(crc_of(id));
}
}  // namespace

std::string LatentCache::weights_key(const std::string& kind, const std::string& pipeline_dir,
                                     const std::vector<std::string>& components) {
  return model_key(kind, pipeline_dir, components);
}

std::string LatentCache::vae_key(const std::string& pipeline_dir) { return model_key("vae", pipeline_dir, {"vae"}); }

std::string LatentCache::text_key(const std::string& pipeline_dir, const std::vector<std::string>& components) {
  return model_key("text", pipeline_dir, components);
}

std::string LatentCache::text_content_key(const std::string& text) { return hex(crc_of(text)) + "-" + hex(text.size()); }

std::string LatentCache::content_key(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<char> buf(1 << 16);
  uLong crc = crc32(0L, Z_NULL, 0);
  std::uint64_t size = 0;
  while (in) {
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    const auto n = in.gcount();
    if (n <= 0) break;
    crc = crc32(crc, reinterpret_cast<const Bytef*>(buf.data()), static_cast<uInt>(n));
    size += static_cast<std::uint64_t>(n);
  }
  return hex(crc) + "-" + hex(size);
}

}  // namespace zs::data
