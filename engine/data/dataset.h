#pragma once
// Datasets on disk (flat files, side-by-side files, metadata.csv) and a loader that decodes,
// resizes, crops and flips them in background threads, deterministically from a seed.

#include <array>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <ATen/core/Tensor.h>

namespace zs::data {

/// The geometry rows (Batch::geometry) of `n` images of `height` × `width` neither scaled nor
/// cropped: what samples generated at that size are conditioned on. [n, 6] float.
at::Tensor uncropped_geometry(std::int64_t n, std::int64_t height, std::int64_t width);

/// One training example.
struct DataItem {
  std::string image;    ///< absolute or root-relative path of the PNG/JPEG
  std::string caption;  ///< the caption; for metadata-JSON items the tags joined in file order
  std::vector<std::string> tags;  ///< metadata-JSON items: caption tags (the loader may shuffle them)
  std::string source;   ///< the metadata file (or metadata.csv:LINE) that named it; empty for folder layouts
};

/// How a dataset folder is read: the metadata-JSON layout's filters (the trainer fills them from
/// data.metadata.*), whether items may lie outside the folder, and where warnings go.
struct MetadataOptions {
  std::int64_t consider_every_nth = 1;
  std::vector<std::string> blacklist_tags;
  std::vector<std::string> non_caption_tags;
  std::vector<std::pair<std::string, std::string>> replacements;  ///< applied to each tag in order
  std::string tag_separator = ", ";
  std::optional<double> abs_min_score;
  std::optional<double> min_score;
  std::vector<double> score_tags;
  std::vector<std::pair<std::string, double>> tag_bonus_scores;
  /// data.allow_external_paths: keep items whose file resolves outside the dataset folder (an
  /// `images/` that is a symlink elsewhere). Off: such items are skipped with a warning.
  bool allow_external_paths = false;
  /// One line per skipped metadata file, CSV row or item (null: not reported).
  std::function<void(const std::string&)> on_warning;
};

/// Finds the examples under `root`, by layout:
///  - `metadata/` with JSON files (any depth) {"tags": [...], "score": N, "path": "rel/to/root.png"},
///    filtered and captioned per `metadata`;
///  - `metadata.csv` with a header `file_name,text` (paths relative to root);
///  - `images/` + `captions/` with the same stems;
///  - `name.png|jpg|jpeg` beside `name.txt` (no caption file: empty caption).
/// A metadata file that is not valid or a CSV row with the wrong number of fields is skipped with
/// a warning naming it, as is an item whose file resolves outside `root` (after symlinks; `root`
/// itself is resolved first) unless `allow_external_paths`. Sorted by path. Throws
/// zs::Error(data) naming `root` when it is missing or nothing usable is left (then the first
/// reason something was skipped is in the message).
std::vector<DataItem> scan_dataset(const std::string& root, const MetadataOptions& metadata = {});

/// One batch: images [B, 3, R, R] float32 in [-1, 1], captions (after dropout: "" for dropped).
struct Batch {
  at::Tensor images;
  at::Tensor geometry;  ///< [B, 6] float: original h, w, crop top, left, target h, w (models that condition on it: SDXL's time ids)
  std::vector<std::string> keys;  ///< per sample: the image file's content key, "+flip" when flipped
  std::vector<std::string> captions;
  std::int64_t epoch = 0;
  std::int64_t index = 0;  ///< batch number since the start of training
};

struct LoaderOptions {
  std::int64_t batch_size = 1;
  std::int64_t resolution = 512;    ///< square side in pixels
  double flip_p = 0;                ///< probability of a horizontal flip
  double caption_dropout = 0;       ///< probability of an empty caption
  double shuffle_tag_p = 0;         ///< probability of shuffling a tagged item's tags
  std::string tag_separator = ", "; ///< joins tags into a caption
  std::uint64_t seed = 0;           ///< fixes order, flips and dropout
  int num_workers = 2;              ///< decoding threads; 0 decodes in the caller's thread
  int prefetch = 4;                 ///< batches decoded ahead
  std::int64_t shard = 0;           ///< this rank: it gets global batches k·num_shards + shard
  std::int64_t num_shards = 1;      ///< ranks sharing the data
  std::int64_t repeats = 1;         ///< data.repeats: each item this many times per epoch
  /// Micro batches per process in one optimizer step (training.gradient_accumulation_steps): an
  /// epoch is padded to whole steps of num_shards × accumulation global batches.
  std::int64_t accumulation = 1;
  bool content_keys = false;        ///< fill Batch::keys (for the latent cache)
  /// Aspect-ratio buckets: sizes of about resolution² pixels in `bucket_step` steps (aspect up to
  /// 4:1); each image goes to the bucket nearest its aspect (resize, center crop), every batch
  /// comes from one bucket.
  bool buckets = false;
  std::int64_t bucket_step = 64;
};

/// The bucket sizes (height, width) for `resolution` and `step`: h in step increments, w the
/// largest multiple of step with h·w <= resolution², aspect at most 4:1; square included when
/// resolution is a multiple of step.
std::vector<std::pair<std::int64_t, std::int64_t>> aspect_buckets(std::int64_t resolution, std::int64_t step);

/// Global micro batches in one epoch: `counts` images per aspect bucket (one count without
/// buckets), each repeated `repeats` times, in batches of `batch_size` per bucket, then rounded up
/// to whole optimizer steps of `step_batches` (processes × accumulation) batches. A partial batch or
/// step counts as a whole one, as kohya's sd-scripts count `len(train_dataloader)` and
/// ceil(len / accumulation); the loader fills it with the epoch's first entries again. Without
/// buckets: ceil(images × repeats / (batch_size × step_batches)) × step_batches.
std::int64_t epoch_micro_batches(const std::vector<std::int64_t>& counts, std::int64_t batch_size,
                                 std::int64_t repeats, std::int64_t step_batches);

/// Deterministic batches: batch k depends only on (items, options, k), so a resumed run gets the
/// same batches as an uninterrupted one. With num_shards ranks, rank `shard`'s k-th batch is global
/// batch k·num_shards + shard, so the ranks together see what one process would, in order.
/// (Below: "batch k" means the global batch number.)
///
/// Every epoch is a fresh permutation (from the seed and the epoch) of items × repeats entries,
/// so each item comes `repeats` times; the epoch has epoch_micro_batches() batches, the slots past
/// the last entry taking the permutation's first entries again. A broken image is replaced by the
/// next item in the permutation and reported once through `on_warning` (from a worker thread).
class DataLoader {
 public:
  DataLoader(std::vector<DataItem> items, LoaderOptions options,
             std::function<void(const std::string&)> on_warning = {});
  ~DataLoader();  ///< stops and joins the workers
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  /// Starts (or restarts) producing from batch number `first`.
  void start(std::int64_t first);
  /// The next batch in order; blocks until it is decoded. Throws zs::Error(data) when every
  /// image of the dataset is unreadable.
  Batch next();
  /// Global batches per epoch (over all shards).
  std::int64_t batches_per_epoch() const { return batches_per_epoch_; }
  std::size_t size() const { return items_.size(); }
  const std::vector<DataItem>& items() const { return items_; }
  const LoaderOptions& options() const { return options_; }
  /// The latent-cache key of item `index` as Batch::keys spells it, for a flipped or unflipped
  /// copy (reads the image file for its content key).
  std::string cache_key(std::size_t index, bool flip);
  /// The size (height, width) item `index` is decoded to: its bucket's, else resolution².
  std::pair<std::int64_t, std::int64_t> item_size(std::size_t index) const;

  /// Decodes one item as the loader does ([3, R, R] in [-1, 1], no flip). Throws zs::Error(data).
  /// `geometry` (optional) receives the image's geometry (what SDXL's micro-conditioning reads): original height and width, the
  /// crop's top and left in the resized image, and the target height and width.
  static at::Tensor load_image(const std::string& path, std::int64_t resolution, std::array<double, 6>* geometry = nullptr);
  /// The same to a height × width target (resize to cover it, center crop).
  static at::Tensor load_image(const std::string& path, std::int64_t height, std::int64_t width,
                               std::array<double, 6>* geometry);
  /// Buckets in use ((height, width)) and each item's bucket index (empty without buckets).
  const std::vector<std::pair<std::int64_t, std::int64_t>>& buckets() const { return buckets_; }
  const std::vector<int>& item_buckets() const { return item_bucket_; }

 private:
  Batch make_batch(std::int64_t k);
  std::string content_key(const std::string& path);  // memoised LatentCache::content_key
  std::string latent_key(const std::string& content, bool flip, std::int64_t height, std::int64_t width) const;
  std::vector<std::int64_t> permutation(std::int64_t epoch) const;
  /// With buckets: the epoch's batches, each a list of item indices from one bucket.
  std::vector<std::vector<std::int64_t>> bucket_plan(std::int64_t epoch) const;
  void stop();
  void worker();

  std::vector<DataItem> items_;
  LoaderOptions options_;
  std::function<void(const std::string&)> on_warning_;
  std::int64_t batches_per_epoch_ = 1;

  std::mutex mutex_;
  std::condition_variable cv_;
  std::map<std::int64_t, Batch> ready_;
  std::map<std::int64_t, std::string> failed_;  // batch number -> error text
  std::int64_t next_to_make_ = 0, next_to_take_ = 0;
  std::set<std::string> bad_;
  std::map<std::string, std::string> content_keys_;
  std::vector<std::pair<std::int64_t, std::int64_t>> buckets_;
  std::vector<int> item_bucket_;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace zs::data
