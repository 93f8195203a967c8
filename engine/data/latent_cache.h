#pragma once
// What frozen models compute from the training data, on disk, so each input is encoded once and
// reused by later steps and runs: VAE posteriors (mean and log-variance) of the images, keyed by
// the image file's content (CRC-32 and size), the resolution, the flip and the VAE; and the text
// encoders' outputs for each caption, keyed by the caption's text and the encoders. A changed
// file, caption, model or resolution simply misses.

#include <atomic>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>

namespace zs::data {

class LatentCache {
 public:
  /// `root`/<model key>/<resolution>/ holds the entries (created on first store).
  LatentCache(const std::string& root, const std::string& model_key, std::int64_t resolution);
  /// `root`/<model key>/<folder>/ (text embeddings: "text").
  LatentCache(const std::string& root, const std::string& model_key, const std::string& folder);

  /// Whether an entry exists under `key` (without reading it).
  bool has(const std::string& key) const;
  /// The tensors `names` cached under `key`, if the entry has them all (a damaged entry counts
  /// as missing).
  bool load(const std::string& key, const std::vector<std::string>& names, std::vector<at::Tensor>& out) const;
  /// Stores named tensors under `key`, as float32 (atomically; concurrent writers of one key are harmless).
  void store(const std::string& key, const std::vector<std::pair<std::string, at::Tensor>>& tensors);
  /// The same for a posterior [C, h, w].
  bool load(const std::string& key, at::Tensor& mean, at::Tensor& logvar) const;
  void store(const std::string& key, const at::Tensor& mean, const at::Tensor& logvar);

  const std::string& dir() const { return dir_; }
  std::int64_t hits() const { return hits_; }
  std::int64_t stored() const { return stored_; }

  /// A key for the VAE of a pipeline folder or single file: its path and its weight files' sizes
  /// and times.
  static std::string vae_key(const std::string& pipeline_dir);
  /// The same for its text encoders: the weight files in the `components` folders (the model's
  /// text-encoder component names); a component "<folder>@<setting>" adds the setting to the key.
  static std::string text_key(const std::string& pipeline_dir, const std::vector<std::string>& components);
  /// The same for any part: "<kind>-<crc>" of the path and the weight files of its `components`
  /// folders (a single file: that file).
  static std::string weights_key(const std::string& kind, const std::string& pipeline_dir,
                                 const std::vector<std::string>& components);
  /// A key for an image file's content: CRC-32 and size, "crc-size" in hex.
  static std::string content_key(const std::string& path);
  /// A key for a caption: CRC-32 and length of its text.
  static std::string text_content_key(const std::string& text);

 private:
  std::string dir_;
  mutable std::atomic<std::int64_t> hits_{0};
  std::atomic<std::int64_t> stored_{0};
};

}  // namespace zs::data
