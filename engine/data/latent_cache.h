#pragma once
// VAE posteriors (mean and log-variance) of training images on disk, so each image is encoded once
// and reused by later steps and runs. An entry's key is the image file's content (CRC-32 and
// size), the resolution, the flip and the VAE (its folder and weight file); a changed file, VAE or
// resolution simply misses.

#include <atomic>
#include <cstdint>
#include <string>

#include <ATen/core/Tensor.h>

namespace zs::data {

class LatentCache {
 public:
  /// `root`/<vae key>/<resolution>/ holds the entries (created on first store).
  LatentCache(const std::string& root, const std::string& vae_key, std::int64_t resolution);

  /// The cached posterior for `key`, if there is one (a damaged entry counts as missing).
  bool load(const std::string& key, at::Tensor& mean, at::Tensor& logvar) const;
  /// Stores a posterior [C, h, w] (atomically; concurrent writers of one key are harmless).
  void store(const std::string& key, const at::Tensor& mean, const at::Tensor& logvar);

  const std::string& dir() const { return dir_; }
  std::int64_t hits() const { return hits_; }
  std::int64_t stored() const { return stored_; }

  /// A key for the VAE of a pipeline folder: its path and its weight file's size and time.
  static std::string vae_key(const std::string& pipeline_dir);
  /// A key for an image file's content: CRC-32 and size, "crc-size" in hex.
  static std::string content_key(const std::string& path);

 private:
  std::string dir_;
  mutable std::atomic<std::int64_t> hits_{0};
  std::atomic<std::int64_t> stored_{0};
};

}  // namespace zs::data
