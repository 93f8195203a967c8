// Images, the shapes dataset, dataset layouts and the background loader.
#include <ATen/ATen.h>

#include <cstdio>
#include <filesystem>
#include <map>
#include <set>

#include <jpeglib.h>

#include "core/error.h"
#include "data/dataset.h"
#include "data/shapes.h"
#include "io/atomic_file.h"
#include "io/image.h"

#include <QTemporaryDir>
#include <QtTest>

#include "test_support.h"

using namespace zs::data;
namespace fs = std::filesystem;

namespace {

/// A JPEG of `img` (quality 95), written with libjpeg's encoder.
void write_jpeg(const std::string& path, const zs::io::Image& img) {
  jpeg_compress_struct cinfo;
  jpeg_error_mgr jerr;
  cinfo.err = jpeg_std_error(&jerr);
  jpeg_create_compress(&cinfo);
  FILE* f = std::fopen(path.c_str(), "wb");
  jpeg_stdio_dest(&cinfo, f);
  cinfo.image_width = static_cast<JDIMENSION>(img.width);
  cinfo.image_height = static_cast<JDIMENSION>(img.height);
  cinfo.input_components = 3;
  cinfo.in_color_space = JCS_RGB;
  jpeg_set_defaults(&cinfo);
  jpeg_set_quality(&cinfo, 95, TRUE);
  jpeg_start_compress(&cinfo, TRUE);
  while (cinfo.next_scanline < cinfo.image_height) {
    auto* row = const_cast<JSAMPLE*>(img.rgb.data() + static_cast<std::size_t>(cinfo.next_scanline) * img.width * 3);
    jpeg_write_scanlines(&cinfo, &row, 1);
  }
  jpeg_finish_compress(&cinfo);
  std::fclose(f);
  jpeg_destroy_compress(&cinfo);
}

std::string tmp(const QTemporaryDir& d, const char* rel) { return (d.path() + "/" + rel).toStdString(); }

}  // namespace

class TestData : public QObject {
  Q_OBJECT

 private slots:
  // Aspect-ratio buckets: sizes of about resolution² in step increments; wide images go to wide
  // buckets, every batch is one size, batches are the same for the same seed, and geometry rows carry
  // each image's original size, crop and target.
  void aspectBucketsBatchBySize() {
    QCOMPARE(aspect_buckets(64, 16).size(), std::size_t{7});  // 32x128 … 64x64 … 128x32, within 4:1
    for (const auto& [h, w] : aspect_buckets(512, 64)) {
      QVERIFY(h % 64 == 0 && w % 64 == 0 && h * w <= 512 * 512 && std::max(h, w) <= 4 * std::min(h, w));
    }
    QTemporaryDir dir;
    std::vector<DataItem> items;
    const int sizes[][2] = {{96, 32}, {32, 96}, {64, 64}};  // (width, height): wide, tall, square
    for (int i = 0; i < 24; ++i) {
      const auto& wh = sizes[i % 3];
      zs::io::Image img{wh[0], wh[1], std::vector<std::uint8_t>(static_cast<std::size_t>(wh[0] * wh[1] * 3), static_cast<std::uint8_t>(i * 10))};
      const std::string path = tmp(dir, "") + std::to_string(i) + (i % 2 ? ".png" : ".jpg");
      if (i % 2) zs::io::write_png(path, img);
      else write_jpeg(path, img);
      QCOMPARE(zs::io::image_size(path), (std::pair<int, int>{wh[0], wh[1]}));
      items.push_back({path, "item " + std::to_string(i), {}});
    }
    LoaderOptions o;
    o.batch_size = 4;
    o.resolution = 48;
    o.buckets = true;
    o.bucket_step = 16;
    o.num_workers = 0;
    o.seed = 5;
    DataLoader loader(items, o);
    QCOMPARE(loader.batches_per_epoch(), std::int64_t{6});  // 8 per aspect, 2 batches each
    for (std::size_t i = 0; i < items.size(); ++i) {
      const auto [h, w] = loader.buckets()[static_cast<std::size_t>(loader.item_buckets()[i])];
      const auto& wh = sizes[i % 3];
      if (wh[0] > wh[1]) QVERIFY(w > h);
      if (wh[0] < wh[1]) QVERIFY(h > w);
      if (wh[0] == wh[1]) QCOMPARE(h, w);
    }
    loader.start(0);
    std::set<std::pair<std::int64_t, std::int64_t>> seen;
    std::vector<std::string> first_epoch;
    for (int k = 0; k < 6; ++k) {
      const Batch b = loader.next();
      const auto h = b.images.size(2), w = b.images.size(3);
      seen.insert({h, w});
      QVERIFY(h * w <= 48 * 48);
      for (std::int64_t i = 0; i < 4; ++i) {
        QCOMPARE(b.geometry[i][4].item<double>(), static_cast<double>(h));  // target size
        QCOMPARE(b.geometry[i][5].item<double>(), static_cast<double>(w));
      }
      for (const auto& c : b.captions) first_epoch.push_back(c);
    }
    QCOMPARE(seen.size(), std::size_t{3});
    std::sort(first_epoch.begin(), first_epoch.end());
    QCOMPARE(std::unique(first_epoch.begin(), first_epoch.end()) - first_epoch.begin(), std::ptrdiff_t{24});
    DataLoader again(items, o);
    again.start(3);
    DataLoader same(items, o);
    same.start(0);
    for (int k = 0; k < 3; ++k) same.next();
    const Batch x = again.next(), y = same.next();
    QCOMPARE(x.captions, y.captions);
    QVERIFY(at::equal(x.images, y.images));
  }

  void pngRoundTrip() {
    QTemporaryDir dir;
    zs::io::Image img{5, 3, {}};
    for (int i = 0; i < 45; ++i) img.rgb.push_back(static_cast<std::uint8_t>(i * 5));
    zs::io::write_png(tmp(dir, "a.png"), img);
    const zs::io::Image back = zs::io::read_image(tmp(dir, "a.png"));
    QCOMPARE(back.width, 5);
    QCOMPARE(back.height, 3);
    QVERIFY(back.rgb == img.rgb);
  }

  void jpegDecodes() {
    QTemporaryDir dir;
    const zs::io::Image img = draw_shape({"square", "red", "blue"}, 24, 3);
    write_jpeg(tmp(dir, "a.jpg"), img);
    const zs::io::Image back = zs::io::read_image(tmp(dir, "a.jpg"));
    QCOMPARE(back.width, 24);
    // Lossy with chroma subsampling at the edges; the median pixel error stays small.
    std::vector<int> err;
    for (std::size_t i = 0; i < img.rgb.size(); ++i) err.push_back(std::abs(back.rgb[i] - img.rgb[i]));
    std::nth_element(err.begin(), err.begin() + err.size() / 2, err.end());
    QVERIFY2(err[err.size() / 2] < 8, qPrintable(QString::number(err[err.size() / 2])));
    QCOMPARE(read_shape_image(back).colour, std::string("red"));
  }

  void brokenImagesNameTheFile() {
    QTemporaryDir dir;
    zs::io::write_file_atomic(tmp(dir, "bad.png"), std::string("\x89PNG\r\n\x1a\n", 8) + "garbage");
    zs::io::write_file_atomic(tmp(dir, "text.jpg"), "hello");
    for (const char* name : {"bad.png", "text.jpg", "missing.png"}) {
      try {
        zs::io::read_image(tmp(dir, name));
        QFAIL(name);
      } catch (const zs::Error& e) {
        QVERIFY2(QString(e.what()).contains(name), e.what());
        QCOMPARE(e.kind(), zs::ErrorKind::data);
      }
    }
  }

  void captionsRoundTrip() {
    const ShapeSpec spec{"triangle", "orange", "white"};
    QCOMPARE(shape_caption(spec), std::string("an orange triangle on a white background"));
    const auto back = parse_shape_caption(shape_caption(spec));
    QVERIFY(back);
    QCOMPARE(back->colour, std::string("orange"));
    QVERIFY(!parse_shape_caption("a red dog on a blue background"));
  }

  void scorerReadsEveryGeneratedImage() {
    // The quickstart benchmark scores samples with read_shape_image; on clean drawings it must be exact.
    int checked = 0;
    for (int size : {16, 32}) {
      for (const auto& shape : shape_kinds())
        for (const auto& fg : shape_palette())
          for (const auto& bg : shape_palette()) {
            if (std::string(fg.name) == bg.name) continue;
            const zs::io::Image img = draw_shape({shape, fg.name, bg.name}, size, static_cast<std::uint64_t>(checked));
            const ShapeReading r = read_shape_image(img);
            const QString what = QString("%1 %2 on %3 at %4: read %5 %6 on %7")
                                     .arg(fg.name).arg(shape.c_str()).arg(bg.name).arg(size)
                                     .arg(r.colour.c_str()).arg(r.shape.c_str()).arg(r.background.c_str());
            QVERIFY2(r.colour == fg.name && r.background == bg.name, qPrintable(what));
            if (size == 32) QVERIFY2(r.shape == shape, qPrintable(what));
            ++checked;
          }
    }
    QCOMPARE(checked, 2 * 3 * 56);
  }

  void generatesTheFlatLayout() {
    QTemporaryDir dir;
    const std::string out = tmp(dir, "shapes");
    int last = 0;
    generate_shapes_dataset(out, 12, 16, 7, [&](int done, int) { last = done; });
    QCOMPARE(last, 12);
    QVERIFY(fs::exists(out + "/images/00011.png"));
    QVERIFY(!fs::exists(out + ".partial"));
    const auto items = scan_dataset(out);
    QCOMPARE(items.size(), std::size_t{12});
    const auto spec = parse_shape_caption(items[0].caption);
    QVERIFY2(spec, items[0].caption.c_str());
    QCOMPARE(read_shape_image(zs::io::read_image(items[0].image)).colour, spec->colour);
    // Same seed, same bytes; a non-empty target is refused.
    generate_shapes_dataset(tmp(dir, "again"), 12, 16, 7);
    QCOMPARE(zs::io::read_file(tmp(dir, "again/images/00003.png")), zs::io::read_file(out + "/images/00003.png"));
    QVERIFY_THROWS_EXCEPTION(zs::Error, generate_shapes_dataset(out, 2, 16, 7));
  }

  void otherLayouts() {
    QTemporaryDir dir;
    fs::create_directories(tmp(dir, "csv/img"));
    zs::io::write_png(tmp(dir, "csv/img/a.png"), draw_shape({"circle", "red", "black"}, 16, 1));
    zs::io::write_png(tmp(dir, "csv/img/b.png"), draw_shape({"circle", "red", "black"}, 16, 2));
    zs::io::write_file_atomic(tmp(dir, "csv/metadata.csv"), "file_name,text\nimg/a.png,\"a red, round thing\"\nimg/b.png,plain\n");
    auto items = scan_dataset(tmp(dir, "csv"));
    QCOMPARE(items.size(), std::size_t{2});
    QCOMPARE(items[0].caption, std::string("a red, round thing"));
    zs::io::write_file_atomic(tmp(dir, "csv/metadata.csv"), "file,caption\nimg/a.png,x\n");
    try {
      scan_dataset(tmp(dir, "csv"));
      QFAIL("accepted a bad header");
    } catch (const zs::Error& e) {
      QVERIFY2(QString(e.what()).contains("metadata.csv:1: the header needs the columns file_name and text"), e.what());
    }
    fs::create_directories(tmp(dir, "side/sub"));
    zs::io::write_png(tmp(dir, "side/sub/x.png"), draw_shape({"square", "green", "black"}, 16, 1));
    zs::io::write_file_atomic(tmp(dir, "side/sub/x.txt"), "a green square\n");
    items = scan_dataset(tmp(dir, "side"));
    QCOMPARE(items.size(), std::size_t{1});
    QCOMPARE(items[0].caption, std::string("a green square"));
  }

  void metadataJsonLayoutWithEveryOption() {
    QTemporaryDir dir;
    const std::string root = tmp(dir, "meta");
    fs::create_directories(root + "/metadata/a/b");
    fs::create_directories(root + "/images");
    auto add = [&](const std::string& name, int score, const std::string& tags) {
      zs::io::write_png(root + "/images/" + name + ".png", draw_shape({"circle", "red", "black"}, 16, 1));
      zs::io::write_file_atomic(root + "/metadata/a/b/" + name + ".json",
                                "{\"tags\": [" + tags + "], \"score\": " + std::to_string(score) +
                                    ", \"path\": \"images/" + name + ".png\", \"extra\": 1}");
    };
    add("1", 500, "\"princess luna\", \"solo\", \"high res\", \"artist:lulu\"");
    add("2", 40, "\"solo\"");                         // below abs_min_score
    add("3", 900, "\"solo\", \"animated\"");          // blacklisted
    add("4", 150, "\"monochrome\", \"duo\"");          // 150 - 75 < min_score 100
    add("5", 150, "\"duo\", \"pride flag\"");          // 150 + 50 passes
    MetadataOptions o;
    o.blacklist_tags = {"animated"};
    o.non_caption_tags = {"high res"};
    o.replacements = {{"princess luna", "luna"}, {"artist:", "by="}, {" ", "_"}};
    o.tag_separator = " ";
    o.abs_min_score = 50;
    o.min_score = 100;
    o.score_tags = {100, 400, 200};
    o.tag_bonus_scores = {{"monochrome", -75}, {"pride flag", 50}};
    auto items = scan_dataset(root, o);
    QCOMPARE(items.size(), std::size_t{2});
    QCOMPARE(items[0].caption, std::string("luna solo by=lulu scr400"));
    QCOMPARE(items[1].caption, std::string("duo pride_flag scr100"));
    QCOMPARE(items[1].tags.size(), std::size_t{3});
    // consider_every_nth keeps files 0, 2, 4 of the sorted list (1, 3, 5); 3 is blacklisted.
    o.consider_every_nth = 2;
    items = scan_dataset(root, o);
    QCOMPARE(items.size(), std::size_t{2});
    // shuffle_tag_p 1: same tags, shuffled order (deterministic per batch).
    LoaderOptions lo;
    lo.batch_size = 1;
    lo.resolution = 16;
    lo.shuffle_tag_p = 1.0;
    lo.tag_separator = " ";
    lo.num_workers = 0;
    o.consider_every_nth = 1;
    DataLoader loader(scan_dataset(root, o), lo);
    loader.start(0);
    bool reordered = false;
    for (int i = 0; i < 12; ++i) {
      const std::string c = loader.next().captions[0];
      QVERIFY2(c.find("scr") != std::string::npos, c.c_str());
      reordered |= c != "luna solo by=lulu scr400" && c != "duo pride_flag scr100";
    }
    QVERIFY(reordered);
    // A broken metadata file is skipped with a warning naming it; the others still count.
    zs::io::write_file_atomic(root + "/metadata/a/b/bad.json", "{\"tags\": [");
    std::vector<std::string> warnings;
    o.on_warning = [&](const std::string& w) { warnings.push_back(w); };
    items = scan_dataset(root, o);
    QCOMPARE(items.size(), std::size_t{2});
    QCOMPARE(warnings.size(), std::size_t{1});
    QVERIFY2(warnings[0].find("bad.json: not valid JSON") != std::string::npos, warnings[0].c_str());
  }

  // Paths in metadata/*.json and metadata.csv that resolve outside the dataset folder (absolute,
  // climbing out with .., or through a symlink) are skipped with a warning unless
  // allow_external_paths; a dataset with nothing usable left is an error that says why.
  void datasetsCannotReachOutsideTheirFolder() {
    QTemporaryDir dir;
    const std::string outside = tmp(dir, "secret.png");
    zs::io::write_png(outside, draw_shape({"circle", "red", "black"}, 16, 1));
    const std::string root = tmp(dir, "ds");
    fs::create_directories(root + "/metadata");
    fs::create_directories(root + "/images");
    zs::io::write_png(root + "/images/ok.png", draw_shape({"square", "blue", "black"}, 16, 1));
    auto meta = [&](const std::string& name, const std::string& path) {
      zs::io::write_file_atomic(root + "/metadata/" + name + ".json", "{\"tags\": [\"x\"], \"path\": \"" + path + "\"}");
    };
    meta("a_ok", "images/ok.png");
    meta("b_absolute", outside);
    meta("c_climbs", "../secret.png");
    meta("d_inside_dots", "images/../images/ok.png");
    std::vector<std::string> warnings;
    MetadataOptions o;
    o.on_warning = [&](const std::string& w) { warnings.push_back(w); };
    auto items = scan_dataset(root, o);
    QCOMPARE(items.size(), std::size_t{2});
    for (const auto& item : items) QVERIFY2(item.image.find("secret") == std::string::npos, item.image.c_str());
    QCOMPARE(warnings.size(), std::size_t{2});
    QVERIFY2(warnings[0].find("b_absolute.json: the image") != std::string::npos &&
                 warnings[0].find("outside the dataset folder") != std::string::npos &&
                 warnings[0].find("data.allow_external_paths") != std::string::npos,
             warnings[0].c_str());
    QVERIFY2(warnings[1].find("c_climbs.json: the image '../secret.png' resolves to " + fs::canonical(outside).string()) !=
                 std::string::npos,
             warnings[1].c_str());
    o.allow_external_paths = true;
    QCOMPARE(scan_dataset(root, o).size(), std::size_t{4});
    // metadata.csv: the same rule for file_name; a row with the wrong field count is skipped.
    const std::string csv = tmp(dir, "csv");
    fs::create_directories(csv + "/img");
    zs::io::write_png(csv + "/img/a.png", draw_shape({"circle", "red", "black"}, 16, 1));
    zs::io::write_file_atomic(csv + "/metadata.csv", "file_name,text\nimg/a.png,fine\n../secret.png,out\nimg/a.png,x,y\n");
    warnings.clear();
    o.allow_external_paths = false;
    items = scan_dataset(csv, o);
    QCOMPARE(items.size(), std::size_t{1});
    QCOMPARE(warnings.size(), std::size_t{2});
    QVERIFY2(warnings[0].find("metadata.csv:4: has 3 fields, the header has 2; row skipped") != std::string::npos, warnings[0].c_str());
    QVERIFY2(warnings[1].find("metadata.csv:3: the image '../secret.png' resolves to") != std::string::npos, warnings[1].c_str());
    // images/ as a symlink elsewhere: outside, unless allowed.
    const std::string linked = tmp(dir, "linked");
    fs::create_directories(linked);
    fs::create_directories(tmp(dir, "elsewhere/images"));
    zs::io::write_png(tmp(dir, "elsewhere/images/e.png"), draw_shape({"circle", "green", "black"}, 16, 1));
    fs::create_directory_symlink(tmp(dir, "elsewhere/images"), linked + "/images");
    try {
      scan_dataset(linked, o);
      QFAIL("read an image through a symlink out of the dataset");
    } catch (const zs::Error& e) {
      QVERIFY2(QString(e.what()).contains("no images found") && QString(e.what()).contains("1 skipped, the first:") &&
                   QString(e.what()).contains("outside the dataset folder"),
               e.what());
    }
    o.allow_external_paths = true;
    QCOMPARE(scan_dataset(linked, o).size(), std::size_t{1});
    // Nothing usable: every metadata file broken.
    const std::string broken = tmp(dir, "broken");
    fs::create_directories(broken + "/metadata");
    zs::io::write_file_atomic(broken + "/metadata/x.json", std::string("{\"path\": 3}"));
    try {
      scan_dataset(broken, o);
      QFAIL("accepted a dataset with nothing usable");
    } catch (const zs::Error& e) {
      QVERIFY2(QString(e.what()).contains("x.json: needs \"path\""), e.what());
    }
  }

  void missingOrEmptyDatasetNamesThePath() {
    QTemporaryDir dir;
    for (const std::string path : {tmp(dir, "nothing"), tmp(dir, "")}) {
      try {
        scan_dataset(path);
        QFAIL("accepted an empty dataset");
      } catch (const zs::Error& e) {
        QVERIFY2(QString(e.what()).startsWith(QString::fromStdString(path)), e.what());
      }
    }
  }

  // Global micro batches per epoch: per bucket ceil(images × repeats / batch), rounded up to
  // whole steps of processes × accumulation batches (kohya's sd-scripts: partial batches and
  // steps count).
  void epochMicroBatchesCountPartialBatchesAndSteps_data() {
    QTest::addColumn<QList<qint64>>("counts");
    QTest::addColumn<std::int64_t>("batch");
    QTest::addColumn<std::int64_t>("repeats");
    QTest::addColumn<std::int64_t>("step_batches");
    QTest::addColumn<std::int64_t>("expected");
    using V = QList<qint64>;
    QTest::newRow("exact") << V{64} << std::int64_t{8} << std::int64_t{1} << std::int64_t{1} << std::int64_t{8};
    QTest::newRow("partial batch") << V{10} << std::int64_t{3} << std::int64_t{1} << std::int64_t{1} << std::int64_t{4};
    QTest::newRow("repeats") << V{10} << std::int64_t{4} << std::int64_t{50} << std::int64_t{1} << std::int64_t{125};
    QTest::newRow("partial step") << V{10} << std::int64_t{3} << std::int64_t{1} << std::int64_t{3} << std::int64_t{6};
    QTest::newRow("seed: 1 image, repeat 50") << V{1} << std::int64_t{1} << std::int64_t{50} << std::int64_t{1} << std::int64_t{50};
    QTest::newRow("buckets, each partial") << V{5, 3, 1} << std::int64_t{2} << std::int64_t{1} << std::int64_t{1} << std::int64_t{6};
    QTest::newRow("buckets, repeats, steps") << V{5, 3} << std::int64_t{4} << std::int64_t{3} << std::int64_t{4} << std::int64_t{8};
  }
  void epochMicroBatchesCountPartialBatchesAndSteps() {
    QFETCH(QList<qint64>, counts);
    QFETCH(std::int64_t, batch);
    QFETCH(std::int64_t, repeats);
    QFETCH(std::int64_t, step_batches);
    QFETCH(std::int64_t, expected);
    QCOMPARE(epoch_micro_batches(std::vector<std::int64_t>(counts.begin(), counts.end()), batch, repeats, step_batches), expected);
  }

  // data.repeats: each epoch is a permutation of images × repeats entries, so every image comes
  // exactly `repeats` times before any comes again; the epoch is padded to whole steps with its
  // first entries; the order is a function of (seed, epoch) alone.
  void repeatsVisitEveryImageNTimesPerEpoch() {
    QTemporaryDir dir;
    std::vector<DataItem> items;
    for (int i = 0; i < 5; ++i) {
      zs::io::Image img{8, 8, std::vector<std::uint8_t>(8 * 8 * 3, static_cast<std::uint8_t>(i * 40))};
      const std::string path = tmp(dir, "") + std::to_string(i) + ".png";
      zs::io::write_png(path, img);
      items.push_back({path, "item " + std::to_string(i), {}});
    }
    LoaderOptions o;
    o.batch_size = 2;
    o.resolution = 8;
    o.num_workers = 0;
    o.repeats = 3;
    o.accumulation = 2;
    o.seed = 9;
    bool epochs_right = true;
    auto captions = [&](std::uint64_t seed, std::int64_t from, std::int64_t batches) -> std::vector<std::string> {
      LoaderOptions with_seed = o;
      with_seed.seed = seed;
      DataLoader loader(items, with_seed);
      loader.start(from);
      std::vector<std::string> out;
      for (std::int64_t k = 0; k < batches; ++k) {
        const Batch b = loader.next();
        epochs_right &= b.epoch == (from + k) / 8;
        out.insert(out.end(), b.captions.begin(), b.captions.end());
      }
      return out;
    };
    // 15 entries in batches of 2: 8 batches, already whole steps of 2.
    QCOMPARE(DataLoader(items, o).batches_per_epoch(), std::int64_t{8});
    const auto run = captions(9, 0, 16);
    for (int epoch = 0; epoch < 2; ++epoch) {
      const std::vector<std::string> entries(run.begin() + epoch * 16, run.begin() + epoch * 16 + 16);
      std::map<std::string, int> seen;
      for (int i = 0; i < 15; ++i) ++seen[entries[static_cast<std::size_t>(i)]];
      QCOMPARE(seen.size(), std::size_t{5});
      for (const auto& [caption, n] : seen) QVERIFY2(n == 3, caption.c_str());
      QCOMPARE(entries[15], entries[0]);  // the padding slot: the epoch's first entry again
    }
    QVERIFY(!std::equal(run.begin(), run.begin() + 15, run.begin() + 16));  // a new order each epoch
    QCOMPARE(captions(9, 0, 16), run);                                       // the same seed, the same order
    const auto resumed = captions(9, 5, 11);                                 // from batch 5, as a resume does
    QVERIFY(std::equal(resumed.begin(), resumed.end(), run.begin() + 10));
    QVERIFY(captions(10, 0, 16) != run);
    QVERIFY(epochs_right);
  }

  void loaderIsDeterministicAndResumable() {
    QTemporaryDir dir;
    generate_shapes_dataset(tmp(dir, "s"), 10, 16, 1);
    const auto items = scan_dataset(tmp(dir, "s"));
    LoaderOptions o;
    o.batch_size = 3;
    o.resolution = 8;
    o.flip_p = 0.5;
    o.caption_dropout = 0.3;
    o.seed = 5;
    DataLoader threaded(items, o);
    o.num_workers = 0;
    DataLoader inline_loader(items, o);
    QCOMPARE(threaded.batches_per_epoch(), std::int64_t{4});  // 10 images: the 4th batch is partial, filled
    threaded.start(0);
    inline_loader.start(0);
    std::vector<Batch> first;
    for (int i = 0; i < 7; ++i) {
      const Batch a = threaded.next(), b = inline_loader.next();
      QCOMPARE(a.index, std::int64_t{i});
      QCOMPARE(a.epoch, std::int64_t{i / 4});
      QVERIFY(at::equal(a.images, b.images));
      QCOMPARE(a.captions, b.captions);
      QCOMPARE(a.images.sizes().vec(), (std::vector<std::int64_t>{3, 3, 8, 8}));
      QVERIFY(a.images.min().item<float>() >= -1.0f && a.images.max().item<float>() <= 1.0f);
      first.push_back(a);
    }
    // Restarting at batch 4 gives batch 4 again (what --resume relies on).
    threaded.start(4);
    const Batch again = threaded.next();
    QVERIFY(at::equal(again.images, first[4].images));
  }

  void brokenImageIsSkippedWithAWarning() {
    QTemporaryDir dir;
    generate_shapes_dataset(tmp(dir, "s"), 6, 16, 1);
    zs::io::write_file_atomic(tmp(dir, "s/images/00002.png"), "not a png");
    std::vector<std::string> warnings;
    std::mutex m;
    LoaderOptions o;
    o.batch_size = 2;
    o.resolution = 16;
    DataLoader loader(scan_dataset(tmp(dir, "s")), o, [&](const std::string& w) {
      std::lock_guard<std::mutex> lock(m);
      warnings.push_back(w);
    });
    loader.start(0);
    for (int i = 0; i < 6; ++i) QCOMPARE(loader.next().images.size(0), std::int64_t{2});
    QCOMPARE(warnings.size(), std::size_t{1});
    QVERIFY2(QString::fromStdString(warnings[0]).contains("00002.png"), warnings[0].c_str());
  }

  void resizesAndCenterCrops() {
    QTemporaryDir dir;
    // 40×20: left half red, right half blue. Cropped to the centre square and resized to 10.
    zs::io::Image img{40, 20, {}};
    for (int y = 0; y < 20; ++y)
      for (int x = 0; x < 40; ++x) {
        const bool left = x < 20;
        img.rgb.insert(img.rgb.end(), {static_cast<std::uint8_t>(left ? 255 : 0), 0, static_cast<std::uint8_t>(left ? 0 : 255)});
      }
    zs::io::write_png(tmp(dir, "wide.png"), img);
    const at::Tensor t = DataLoader::load_image(tmp(dir, "wide.png"), 10);
    QCOMPARE(t.sizes().vec(), (std::vector<std::int64_t>{3, 10, 10}));
    QVERIFY(t[0][5][0].item<float>() > 0.9f);   // left column red
    QVERIFY(t[2][5][9].item<float>() > 0.9f);   // right column blue
  }
};

ZS_TEST_MAIN(TestData);
#include "tst_data.moc"
