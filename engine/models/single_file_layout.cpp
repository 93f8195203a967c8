#include "models/single_file_layout.h"

#include <algorithm>
#include <filesystem>

#include <ATen/ATen.h>

#include "core/error.h"
#include "io/safetensors.h"
#include "models/weights.h"

namespace zs::models {

std::vector<SingleFileTensor> single_file_layout(const torch::nn::Module& skeleton, const SingleFilePlacer& place,
                                                 const std::string& family) {
  std::map<std::string, SingleFileTensor> by_key;
  for (const auto& p : skeleton.named_parameters()) {
    const SingleFilePlace where = place(p.key());
    SingleFileTensor& t = by_key[where.key];
    t.key = where.key;
    t.swapped = where.swapped;
    const auto shape = p.value().sizes().vec();
    if (where.third < 0) {
      t.shape = shape;
      t.parts = {p.key()};
      continue;
    }
    if (t.parts.size() < 3) t.parts.resize(3);
    t.parts[static_cast<std::size_t>(where.third)] = p.key();
    t.shape = shape;
    t.shape[0] = 3 * shape[0];
  }
  std::vector<SingleFileTensor> out;
  for (auto& [key, t] : by_key) {
    if (std::any_of(t.parts.begin(), t.parts.end(), [](const std::string& s) { return s.empty(); }))
      throw Error(ErrorKind::checkpoint, family + " single-file layout: " + key + " lacks one of q, k, v");
    out.push_back(std::move(t));
  }
  return out;
}

at::Tensor assemble_single_file_tensor(const SingleFileTensor& t, const std::function<at::Tensor(const std::string&)>& read) {
  if (t.parts.empty()) return at::ones(t.shape, at::kFloat);
  if (t.parts.size() == 1) {
    const at::Tensor v = read(t.parts.front()).to(at::kFloat);
    if (!t.swapped) return v;
    const std::int64_t half = v.size(0) / 2;
    return at::cat({v.narrow(0, half, half), v.narrow(0, 0, half)}, 0);
  }
  std::vector<at::Tensor> rows;
  for (const auto& part : t.parts) rows.push_back(read(part).to(at::kFloat));
  return at::cat(rows, 0);
}

SingleFile::SingleFile(const std::string& path,
                       const std::function<std::optional<std::string>(const std::vector<std::string>&)>& find_prefix,
                       const std::string& not_this_layout)
    : reader_(std::make_shared<io::SafetensorsReader>(path)) {
  std::vector<std::string> names;
  for (const auto& e : reader_->entries()) names.push_back(e.name);
  const auto prefix = find_prefix(names);
  if (!prefix) throw Error(ErrorKind::config, path + ": " + not_this_layout);
  prefix_ = *prefix;
  for (const auto& e : reader_->entries())
    if (e.name.starts_with(prefix_)) {
      names_.push_back(e.name.substr(prefix_.size()));
      shapes_[names_.back()] = e.shape;
    }
}

const std::string& SingleFile::path() const { return reader_->path(); }

std::vector<std::int64_t> SingleFile::dims(const std::string& key, std::size_t rank, const std::string& model) const {
  const auto it = shapes_.find(key);
  if (it == shapes_.end() || it->second.size() != rank)
    throw Error(ErrorKind::config, path() + ": " + prefix_ + key +
                                       (it == shapes_.end() ? " is missing" : " has shape " + shape_text(it->second)) + " (" +
                                       model + " has it, of rank " + std::to_string(rank) + ")");
  return it->second;
}

void SingleFile::check(const std::vector<SingleFileTensor>& layout, const std::string& model) const {
  for (const auto& t : layout) {
    if (t.parts.empty()) continue;  // never read
    const auto it = shapes_.find(t.key);
    if (it == shapes_.end())
      throw Error(ErrorKind::config, path() + ": has no " + prefix_ + t.key + " (" + model +
                                         " has it); the file is incomplete or another model");
    if (it->second != t.shape)
      throw Error(ErrorKind::config, path() + ": " + prefix_ + t.key + " has shape " + shape_text(it->second) +
                                         ", the transformer's config needs " + shape_text(t.shape));
  }
}

at::Tensor SingleFile::tensor(const SingleFilePlace& place, std::int64_t rows_each) const {
  const std::string full = prefix_ + place.key;
  if (!reader_->contains(full)) return {};
  const at::Tensor t = reader_->weight(full);
  if (place.swapped) {
    const std::int64_t half = t.size(0) / 2;
    return at::cat({t.narrow(0, half, half), t.narrow(0, 0, half)}, 0);
  }
  if (place.third < 0) return t;
  return fused_rows(t, 3, place.third, rows_each, full, path());
}

std::optional<std::string> folder_transformer_config(const std::string& config_dir) {
  std::error_code ec;
  if (config_dir.empty()) return std::nullopt;
  const auto file = std::filesystem::path(config_dir) / "transformer" / "config.json";
  if (!std::filesystem::exists(file, ec)) return std::nullopt;
  return file.string();
}

}  // namespace zs::models
