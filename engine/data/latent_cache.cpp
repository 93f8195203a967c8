#include "data/latent_cache.h"

#include <zlib.h>

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

LatentCache::LatentCache(const std::string& root, const std::string& vae_key, std::int64_t resolution)
    : dir_((fs::path(root) / vae_key / std::to_string(resolution)).string()) {}

bool LatentCache::load(const std::string& key, at::Tensor& mean, at::Tensor& logvar) const {
  const fs::path file = fs::path(dir_) / (key + ".safetensors");
  std::error_code ec;
  if (!fs::exists(file, ec)) return false;
  try {
    const io::SafetensorsReader r(file.string());
    mean = r.tensor("mean");
    logvar = r.tensor("logvar");
  } catch (const std::exception&) {
    return false;  // damaged or half-copied: encode again (and overwrite)
  }
  ++hits_;
  return true;
}

void LatentCache::store(const std::string& key, const at::Tensor& mean, const at::Tensor& logvar) {
  fs::create_directories(dir_);
  io::write_safetensors((fs::path(dir_) / (key + ".safetensors")).string(),
                        {{"mean", mean.to(at::kFloat).cpu().contiguous()}, {"logvar", logvar.to(at::kFloat).cpu().contiguous()}});
  ++stored_;
}

std::string LatentCache::vae_key(const std::string& pipeline_dir) {
  std::string id = fs::absolute(pipeline_dir).lexically_normal().string();
  std::error_code ec;
  // A single file stands for its own VAE; a folder's VAE weights are the vae/ files.
  const bool single = fs::is_regular_file(pipeline_dir, ec);
  for (const char* name : {"diffusion_pytorch_model.safetensors", "diffusion_pytorch_model.fp16.safetensors"}) {
    const fs::path f = single ? fs::path(pipeline_dir) : fs::path(pipeline_dir) / "vae" / name;
    if (single && std::string(name) != "diffusion_pytorch_model.safetensors") continue;
    if (!fs::exists(f, ec)) continue;
    id += "|" + std::to_string(fs::file_size(f, ec)) + "|" +
          std::to_string(fs::last_write_time(f, ec).time_since_epoch().count());
  }
  return "vae-" + hex(crc_of(id));
}

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
