#include "data/dataset.h"
#include "data/latent_cache.h"

#include <algorithm>
#include <tuple>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/text.h"
#include "io/atomic_file.h"
#include "io/image.h"

namespace zs::data {

namespace fs = std::filesystem;

namespace {

bool is_image(const fs::path& p) {
  std::string ext = p.extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return std::tolower(c); });
  return ext == ".png" || ext == ".jpg" || ext == ".jpeg";
}

std::string read_caption(const fs::path& p) {
  std::string text = io::read_file(p.string());
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r' || text.back() == ' ')) text.pop_back();
  return text;
}

/// Splits one CSV record (RFC 4180 quoting) starting at `pos`; advances `pos` past its line end.
std::vector<std::string> csv_record(const std::string& s, std::size_t& pos) {
  std::vector<std::string> fields(1);
  bool quoted = false;
  for (; pos < s.size(); ++pos) {
    const char c = s[pos];
    if (quoted) {
      if (c == '"' && pos + 1 < s.size() && s[pos + 1] == '"') {
        fields.back() += '"';
        ++pos;
      } else if (c == '"') {
        quoted = false;
      } else {
        fields.back() += c;
      }
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      fields.emplace_back();
    } else if (c == '\n') {
      ++pos;
      break;
    } else if (c != '\r') {
      fields.back() += c;
    }
  }
  return fields;
}

/// Skipped files and items: each reported, the first kept for the error when nothing is left.
struct Skips {
  const MetadataOptions& o;
  std::size_t count = 0;
  std::string first;
  void operator()(const std::string& why) {
    const std::string line = printable(why);
    if (count++ == 0) first = line;
    if (o.on_warning) o.on_warning(line);
  }
};

std::vector<DataItem> scan_csv(const fs::path& root, Skips& skip) {
  const fs::path csv = root / "metadata.csv";
  const std::string text = io::read_file(csv.string());
  std::size_t pos = 0;
  const auto header = csv_record(text, pos);
  const auto file_col = std::find(header.begin(), header.end(), "file_name") - header.begin();
  const auto text_col = std::find(header.begin(), header.end(), "text") - header.begin();
  if (file_col == static_cast<long>(header.size()) || text_col == static_cast<long>(header.size()))
    throw Error(ErrorKind::data, csv.string() + ":1: the header needs the columns file_name and text");
  std::vector<DataItem> items;
  for (int line = 2; pos < text.size(); ++line) {
    const auto rec = csv_record(text, pos);
    if (rec.size() == 1 && rec[0].empty()) continue;
    if (rec.size() != header.size()) {
      skip(csv.string() + ":" + std::to_string(line) + ": has " + std::to_string(rec.size()) +
           " fields, the header has " + std::to_string(header.size()) + "; row skipped");
      continue;
    }
    DataItem item{(root / rec[static_cast<std::size_t>(file_col)]).string(), rec[static_cast<std::size_t>(text_col)]};
    item.source = csv.string() + ":" + std::to_string(line);
    items.push_back(std::move(item));
  }
  return items;
}

std::string apply_replacements(std::string tag, const MetadataOptions& o) {
  for (const auto& [from, to] : o.replacements) {
    if (from.empty()) continue;
    for (std::size_t pos = 0; (pos = tag.find(from, pos)) != std::string::npos; pos += to.size()) tag.replace(pos, from.size(), to);
  }
  return tag;
}

std::string format_threshold(double t) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", t);
  return buf;
}

std::vector<DataItem> scan_metadata(const fs::path& root, const MetadataOptions& o, Skips& skip) {
  std::vector<fs::path> files;
  for (const auto& e : fs::recursive_directory_iterator(root / "metadata"))
    if (e.is_regular_file() && e.path().extension() == ".json") files.push_back(e.path());
  std::sort(files.begin(), files.end());
  std::vector<double> thresholds = o.score_tags;
  std::sort(thresholds.rbegin(), thresholds.rend());
  const std::set<std::string> blacklist(o.blacklist_tags.begin(), o.blacklist_tags.end());
  const std::set<std::string> non_caption(o.non_caption_tags.begin(), o.non_caption_tags.end());
  std::vector<DataItem> items;
  for (std::size_t i = 0; i < files.size(); i += static_cast<std::size_t>(std::max<std::int64_t>(o.consider_every_nth, 1))) {
    const std::string file = files[i].string();
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(io::read_file(file));
    } catch (const std::exception& e) {  // not JSON, or unreadable
      skip(file + ": not valid JSON (" + e.what() + "); skipped");
      continue;
    }
    if (!j.is_object() || !j.contains("path") || !j["path"].is_string()) {
      skip(file + ": needs \"path\" (the image, relative to " + root.string() + "); skipped");
      continue;
    }
    std::vector<std::string> tags;
    if (j.contains("tags")) {
      if (!j["tags"].is_array()) {
        skip(file + ": \"tags\" must be a list of strings; skipped");
        continue;
      }
      for (const auto& t : j["tags"])
        if (t.is_string()) tags.push_back(t.get<std::string>());
    }
    const double score = j.contains("score") && j["score"].is_number() ? j["score"].get<double>() : 0.0;
    if (o.abs_min_score && score < *o.abs_min_score) continue;
    if (std::any_of(tags.begin(), tags.end(), [&](const std::string& t) { return blacklist.count(t) != 0; })) continue;
    if (o.min_score) {
      double bonus = score;
      for (const auto& [tag, b] : o.tag_bonus_scores)
        if (std::find(tags.begin(), tags.end(), tag) != tags.end()) bonus += b;
      if (bonus < *o.min_score) continue;
    }
    DataItem item;
    item.image = (root / j["path"].get<std::string>()).string();  // an absolute "path" replaces root: checked below
    item.source = file;
    for (const auto& t : tags)
      if (!non_caption.count(t)) item.tags.push_back(apply_replacements(t, o));
    for (const double t : thresholds)
      if (score > t) {
        item.tags.push_back("scr" + format_threshold(t));
        break;
      }
    for (std::size_t k = 0; k < item.tags.size(); ++k) item.caption += (k ? o.tag_separator : "") + item.tags[k];
    items.push_back(std::move(item));
  }
  return items;
}

}  // namespace

std::vector<DataItem> scan_dataset(const std::string& root_text, const MetadataOptions& metadata) {
  const fs::path root(root_text);
  std::error_code ec;
  if (!fs::is_directory(root, ec))
    throw Error(ErrorKind::data, root_text + ": dataset folder does not exist; set data.path to a folder of images "
                                             "(or data.generate: shapes for the demo data)");
  Skips skip{metadata};
  std::vector<DataItem> items;
  if (fs::is_directory(root / "metadata")) {
    items = scan_metadata(root, metadata, skip);
  } else if (fs::exists(root / "metadata.csv")) {
    items = scan_csv(root, skip);
  } else if (fs::is_directory(root / "images")) {
    for (const auto& e : fs::directory_iterator(root / "images")) {
      if (!e.is_regular_file() || !is_image(e.path())) continue;
      const fs::path cap = root / "captions" / (e.path().stem().string() + ".txt");
      items.push_back({e.path().string(), fs::exists(cap) ? read_caption(cap) : std::string()});
    }
  } else {
    for (const auto& e : fs::recursive_directory_iterator(root)) {
      if (!e.is_regular_file() || !is_image(e.path())) continue;
      fs::path cap = e.path();
      cap.replace_extension(".txt");
      items.push_back({e.path().string(), fs::exists(cap) ? read_caption(cap) : std::string()});
    }
  }
  if (!metadata.allow_external_paths) {
    // A downloaded dataset must not make the trainer read other files of the machine: every item
    // resolves (symlinks too) inside the resolved root.
    const fs::path real_root = fs::canonical(root, ec);
    std::erase_if(items, [&](const DataItem& item) {
      std::error_code e;
      const fs::path real = fs::weakly_canonical(item.image, e);
      const auto [r, p] = std::mismatch(real_root.begin(), real_root.end(), real.begin(), real.end());
      if (!e && !ec && r == real_root.end()) return false;
      // As the metadata wrote it: relative to the root, or the absolute path it gave.
      const bool under_root = item.image.rfind(root.string(), 0) == 0;
      const fs::path shown = under_root ? fs::path(item.image).lexically_relative(root) : fs::path(item.image);
      skip((item.source.empty() ? item.image : item.source) + ": the image " +
           (item.source.empty() ? std::string() : "'" + shown.string() + "' ") + "resolves to " + real.string() +
           ", outside the dataset folder " + real_root.string() +
           "; skipped (set data.allow_external_paths: true if the images live elsewhere on purpose)");
      return true;
    });
  }
  if (items.empty())
    throw Error(ErrorKind::data, root_text + ": no images found (looked for metadata/*.json, metadata.csv, images/ + "
                                             "captions/, and PNG/JPEG files with .txt captions beside them; "
                                             "data.metadata filters may have left nothing)" +
                                             (skip.count ? "; " + std::to_string(skip.count) + " skipped, the first: " + skip.first
                                                         : std::string()));
  std::sort(items.begin(), items.end(), [](const DataItem& a, const DataItem& b) { return a.image < b.image; });
  return items;
}

std::vector<std::pair<std::int64_t, std::int64_t>> aspect_buckets(std::int64_t resolution, std::int64_t step) {
  std::vector<std::pair<std::int64_t, std::int64_t>> out;
  const std::int64_t area = resolution * resolution;
  for (std::int64_t h = step; h <= 4 * resolution; h += step) {
    const std::int64_t w = area / h / step * step;
    if (w < step || std::max(w, h) > 4 * std::min(w, h)) continue;
    if (std::find(out.begin(), out.end(), std::pair{h, w}) == out.end()) out.emplace_back(h, w);
  }
  return out;
}

at::Tensor uncropped_geometry(std::int64_t n, std::int64_t height, std::int64_t width) {
  const auto h = static_cast<double>(height), w = static_cast<double>(width);
  return at::tensor(std::vector<double>{h, w, 0, 0, h, w}, at::kFloat).repeat({n, 1});
}

at::Tensor DataLoader::load_image(const std::string& path, std::int64_t res, std::array<double, 6>* geometry) {
  return load_image(path, res, res, geometry);
}

at::Tensor DataLoader::load_image(const std::string& path, std::int64_t th, std::int64_t tw, std::array<double, 6>* geometry) {
  const io::Image img = io::read_image(path);
  // [H, W, 3] uint8 -> [1, 3, H, W] float 0..255
  at::Tensor t = at::from_blob(const_cast<std::uint8_t*>(img.rgb.data()), {img.height, img.width, 3}, at::kByte)
                     .permute({2, 0, 1}).unsqueeze(0).to(at::kFloat);
  // Scale so the image covers the target, then cut the middle.
  const double scale = std::max(static_cast<double>(th) / img.height, static_cast<double>(tw) / img.width);
  const std::int64_t nh = std::max<std::int64_t>(th, std::llround(img.height * scale));
  const std::int64_t nw = std::max<std::int64_t>(tw, std::llround(img.width * scale));
  if (nh != img.height || nw != img.width)
    t = at::_upsample_bilinear2d_aa(t, {nh, nw}, false, c10::nullopt, c10::nullopt);
  const std::int64_t top = (nh - th) / 2, left = (nw - tw) / 2;
  t = t.slice(2, top, top + th).slice(3, left, left + tw);
  if (geometry)
    *geometry = {static_cast<double>(img.height), static_cast<double>(img.width), static_cast<double>(top),
                 static_cast<double>(left), static_cast<double>(th), static_cast<double>(tw)};
  return (t.squeeze(0) / 127.5 - 1.0).clamp(-1.0, 1.0).contiguous();
}

std::int64_t epoch_micro_batches(const std::vector<std::int64_t>& counts, std::int64_t batch_size,
                                 std::int64_t repeats, std::int64_t step_batches) {
  std::int64_t batches = 0;
  for (const auto c : counts) batches += (c * repeats + batch_size - 1) / batch_size;
  return (batches + step_batches - 1) / step_batches * step_batches;
}

DataLoader::DataLoader(std::vector<DataItem> items, LoaderOptions options,
                       std::function<void(const std::string&)> on_warning)
    : items_(std::move(items)), options_(options), on_warning_(std::move(on_warning)) {
  if (items_.empty()) throw Error(ErrorKind::data, "the dataset is empty");
  if (static_cast<std::int64_t>(items_.size()) < options_.batch_size)
    throw Error(ErrorKind::data, "the dataset has " + std::to_string(items_.size()) +
                                     " images, fewer than training.batch_size " + std::to_string(options_.batch_size));
  if (options_.repeats < 1 || options_.accumulation < 1)
    throw Error(ErrorKind::config, "data.repeats and training.gradient_accumulation_steps must be at least 1");
  const std::int64_t step_batches = std::max<std::int64_t>(options_.num_shards, 1) * options_.accumulation;
  batches_per_epoch_ =
      epoch_micro_batches({static_cast<std::int64_t>(items_.size())}, options_.batch_size, options_.repeats, step_batches);
  if (options_.buckets) {
    buckets_ = aspect_buckets(options_.resolution, options_.bucket_step);
    if (buckets_.empty())
      throw Error(ErrorKind::config, "data.bucket_step " + std::to_string(options_.bucket_step) +
                                         " leaves no bucket at data.resolution " + std::to_string(options_.resolution));
    std::vector<std::int64_t> counts(buckets_.size(), 0);
    for (const auto& item : items_) {
      double aspect = 1.0;  // unreadable headers go to the squarest bucket and fail later as usual
      try {
        const auto [w, h] = io::image_size(item.image);
        aspect = std::log(static_cast<double>(w) / h);
      } catch (const Error&) {
      }
      int best = 0;
      double dist = 1e300;
      for (std::size_t b = 0; b < buckets_.size(); ++b) {
        const double d = std::abs(std::log(static_cast<double>(buckets_[b].second) / buckets_[b].first) - aspect);
        if (d < dist) {
          dist = d;
          best = static_cast<int>(b);
        }
      }
      item_bucket_.push_back(best);
      ++counts[static_cast<std::size_t>(best)];
    }
    batches_per_epoch_ = epoch_micro_batches(counts, options_.batch_size, options_.repeats, step_batches);
  }
}

std::vector<std::vector<std::int64_t>> DataLoader::bucket_plan(std::int64_t epoch) const {
  std::vector<std::vector<std::int64_t>> members(buckets_.size()), batches;
  for (std::int64_t r = 0; r < options_.repeats; ++r)
    for (std::size_t i = 0; i < items_.size(); ++i)
      members[static_cast<std::size_t>(item_bucket_[i])].push_back(static_cast<std::int64_t>(i));
  std::mt19937_64 rng(options_.seed * 1000003ULL + static_cast<std::uint64_t>(epoch) + 1);
  const auto batch = static_cast<std::size_t>(options_.batch_size);
  for (auto& m : members) {
    std::shuffle(m.begin(), m.end(), rng);
    // A bucket's partial last batch is filled with the bucket's first entries of this epoch.
    for (std::size_t s = 0; s < m.size(); s += batch) {
      std::vector<std::int64_t> b;
      for (std::size_t j = 0; j < batch; ++j) b.push_back(m[(s + j) % m.size()]);
      batches.push_back(std::move(b));
    }
  }
  std::shuffle(batches.begin(), batches.end(), rng);
  // Whole optimizer steps: the epoch's first batches again.
  const std::size_t planned = batches.size();
  for (std::size_t i = 0; batches.size() < static_cast<std::size_t>(batches_per_epoch_); ++i) batches.push_back(batches[i % planned]);
  return batches;
}

DataLoader::~DataLoader() { stop(); }

std::vector<std::int64_t> DataLoader::permutation(std::int64_t epoch) const {
  // Entry e is item e mod N: with one repeat the permutation of the items it always was.
  std::vector<std::int64_t> order(items_.size() * static_cast<std::size_t>(options_.repeats));
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = static_cast<std::int64_t>(i % items_.size());
  std::mt19937_64 rng(options_.seed * 1000003ULL + static_cast<std::uint64_t>(epoch) + 1);
  std::shuffle(order.begin(), order.end(), rng);
  return order;
}

std::string DataLoader::latent_key(const std::string& content, bool flip, std::int64_t height, std::int64_t width) const {
  return content + (flip ? "-flip" : "") + (buckets_.empty() ? "" : "-" + std::to_string(height) + "x" + std::to_string(width));
}

std::pair<std::int64_t, std::int64_t> DataLoader::item_size(std::size_t index) const {
  if (buckets_.empty()) return {options_.resolution, options_.resolution};
  return buckets_[static_cast<std::size_t>(item_bucket_.at(index))];
}

std::string DataLoader::cache_key(std::size_t index, bool flip) {
  const auto [height, width] = item_size(index);
  return latent_key(content_key(items_.at(index).image), flip, height, width);
}

std::string DataLoader::content_key(const std::string& path) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (const auto it = content_keys_.find(path); it != content_keys_.end()) return it->second;
  }
  const std::string key = LatentCache::content_key(path);
  std::lock_guard<std::mutex> lock(mutex_);
  content_keys_[path] = key;
  return key;
}

Batch DataLoader::make_batch(std::int64_t local_k) {
  const std::int64_t k = local_k * std::max<std::int64_t>(options_.num_shards, 1) + options_.shard;
  Batch b;
  b.index = k;
  b.epoch = k / batches_per_epoch_;
  // Without buckets: consecutive slices of the epoch's permutation. With buckets: the epoch's
  // k-th planned batch (one bucket), a broken image replaced by another of the same bucket.
  std::vector<std::int64_t> order;
  std::int64_t first = 0, height = options_.resolution, width = options_.resolution;
  if (buckets_.empty()) {
    order = permutation(b.epoch);
    first = (k % batches_per_epoch_) * options_.batch_size;
  } else {
    const auto plan = bucket_plan(b.epoch);
    const auto& chosen = plan[static_cast<std::size_t>(k % batches_per_epoch_)];
    const int bucket = item_bucket_[static_cast<std::size_t>(chosen.front())];
    std::tie(height, width) = buckets_[static_cast<std::size_t>(bucket)];
    order = chosen;
    for (std::size_t i = 0; i < items_.size(); ++i)
      if (item_bucket_[i] == bucket && std::find(chosen.begin(), chosen.end(), static_cast<std::int64_t>(i)) == chosen.end())
        order.push_back(static_cast<std::int64_t>(i));
  }
  std::vector<at::Tensor> images;
  std::vector<double> geometries;
  for (std::int64_t j = 0; j < options_.batch_size; ++j) {
    std::array<double, 6> geometry{};
    std::string image_path;
    // Per-sample randomness from (seed, batch, slot): independent of threads and of resume.
    std::mt19937_64 rng(options_.seed ^ (static_cast<std::uint64_t>(k) * 0x9E3779B97F4A7C15ULL + j * 7919ULL + 17));
    std::uniform_real_distribution<double> uni(0.0, 1.0);
    const double flip = uni(rng), drop = uni(rng), shuffle = uni(rng);
    at::Tensor img;
    std::string caption;
    for (std::size_t tries = 0; tries < order.size(); ++tries) {
      const auto& item = items_[static_cast<std::size_t>(order[(first + j + tries) % order.size()])];
      {
        std::lock_guard<std::mutex> lock(mutex_);
        if (bad_.count(item.image)) continue;
      }
      try {
        img = load_image(item.image, height, width, &geometry);
        image_path = item.image;
        caption = item.caption;
        if (!item.tags.empty() && shuffle < options_.shuffle_tag_p) {
          std::vector<std::string> tags = item.tags;
          std::shuffle(tags.begin(), tags.end(), rng);
          caption.clear();
          for (std::size_t t = 0; t < tags.size(); ++t) caption += (t ? options_.tag_separator : "") + tags[t];
        }
        break;
      } catch (const Error& e) {
        bool first_time = false;
        {
          std::lock_guard<std::mutex> lock(mutex_);
          first_time = bad_.insert(item.image).second;
        }
        if (first_time && on_warning_) on_warning_(std::string("skipping an unreadable image: ") + e.what());
      }
    }
    if (!img.defined()) throw Error(ErrorKind::data, "no image of the dataset could be read (see the warnings)");
    if (flip < options_.flip_p) img = img.flip({2});
    if (options_.content_keys) b.keys.push_back(latent_key(content_key(image_path), flip < options_.flip_p, height, width));
    if (drop < options_.caption_dropout) caption.clear();
    images.push_back(img);
    geometries.insert(geometries.end(), geometry.begin(), geometry.end());
    b.captions.push_back(std::move(caption));
  }
  b.images = at::stack(images);
  b.geometry = at::tensor(geometries, at::kFloat).view({options_.batch_size, 6});
  return b;
}

void DataLoader::worker() {
  for (;;) {
    std::int64_t k = 0;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      cv_.wait(lock, [&] { return stopping_ || next_to_make_ < next_to_take_ + options_.prefetch; });
      if (stopping_) return;
      k = next_to_make_++;
    }
    Batch b;
    std::string error;
    try {
      b = make_batch(k);
    } catch (const std::exception& e) {
      error = e.what();
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (error.empty()) {
        ready_[k] = std::move(b);
      } else {
        failed_[k] = error;
      }
    }
    cv_.notify_all();
  }
}

void DataLoader::stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  cv_.notify_all();
  for (auto& t : threads_) t.join();
  threads_.clear();
}

void DataLoader::start(std::int64_t first) {
  stop();
  stopping_ = false;
  ready_.clear();
  failed_.clear();
  next_to_make_ = next_to_take_ = first;
  for (int i = 0; i < options_.num_workers; ++i) threads_.emplace_back([this] { worker(); });
}

Batch DataLoader::next() {
  if (threads_.empty()) return make_batch(next_to_take_++);
  std::unique_lock<std::mutex> lock(mutex_);
  const std::int64_t k = next_to_take_;
  cv_.wait(lock, [&] { return ready_.count(k) || failed_.count(k); });
  if (failed_.count(k)) throw Error(ErrorKind::data, failed_[k]);
  Batch b = std::move(ready_[k]);
  ready_.erase(k);
  ++next_to_take_;
  lock.unlock();
  cv_.notify_all();
  return b;
}

}  // namespace zs::data
