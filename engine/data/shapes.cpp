#include "data/shapes.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <random>
#include <sstream>

#include "core/error.h"
#include "io/atomic_file.h"

namespace zs::data {

namespace fs = std::filesystem;

const std::vector<PaletteColour>& shape_palette() {
  static const std::vector<PaletteColour> palette = {
      {"red", {230, 20, 20}},     {"green", {20, 170, 20}},  {"blue", {30, 60, 230}},   {"yellow", {250, 230, 20}},
      {"purple", {140, 30, 180}}, {"orange", {255, 140, 0}}, {"white", {255, 255, 255}}, {"black", {0, 0, 0}},
  };
  return palette;
}

const std::vector<std::string>& shape_kinds() {
  static const std::vector<std::string> kinds = {"circle", "square", "triangle"};
  return kinds;
}

namespace {

std::string with_article(const std::string& word) {
  const bool vowel = !word.empty() && std::string("aeiou").find(word[0]) != std::string::npos;
  return (vowel ? "an " : "a ") + word;
}

const PaletteColour& colour_named(const std::string& name, const std::vector<PaletteColour>& palette) {
  for (const auto& c : palette)
    if (name == c.name) return c;
  throw Error(ErrorKind::data, "unknown shape colour \"" + name + "\"");
}

/// Inside test for a shape occupying the square [x0, x0+s) × [y0, y0+s).
bool inside(const std::string& shape, double x, double y, double x0, double y0, double s) {
  const double u = (x - x0) / s, v = (y - y0) / s;  // 0..1 in the shape's box
  if (u < 0 || u > 1 || v < 0 || v > 1) return false;
  if (shape == "square") return true;
  if (shape == "circle") return (u - 0.5) * (u - 0.5) + (v - 0.5) * (v - 0.5) <= 0.25;
  // triangle: apex at top centre, base along the bottom
  return std::abs(u - 0.5) <= 0.5 * v;
}

}  // namespace

std::string shape_caption(const ShapeSpec& spec) {
  return with_article(spec.colour) + " " + spec.shape + " on " + with_article(spec.background) + " background";
}

std::vector<std::string> all_shape_captions() {
  std::vector<std::string> out;
  for (const auto& shape : shape_kinds())
    for (const auto& colour : shape_palette())
      for (const auto& back : shape_palette())
        if (std::string(colour.name) != back.name) out.push_back(shape_caption({shape, colour.name, back.name}));
  return out;
}

std::optional<ShapeSpec> parse_shape_caption(const std::string& caption) {
  std::istringstream in(caption);
  std::vector<std::string> w;
  for (std::string s; in >> s;) w.push_back(s);
  // a COLOUR SHAPE on a COLOUR background
  if (w.size() != 7 || w[3] != "on" || w[6] != "background") return std::nullopt;
  ShapeSpec spec{w[2], w[1], w[5]};
  auto known = [](const std::string& n) {
    for (const auto& c : shape_palette())
      if (n == c.name) return true;
    return false;
  };
  if (!known(spec.colour) || !known(spec.background)) return std::nullopt;
  if (std::find(shape_kinds().begin(), shape_kinds().end(), spec.shape) == shape_kinds().end()) return std::nullopt;
  return spec;
}

io::Image draw_shape(const ShapeSpec& spec, int size, std::uint64_t seed) {
  return draw_shape(spec, size, seed, shape_palette());
}

io::Image draw_shape(const ShapeSpec& spec, int size, std::uint64_t seed, const std::vector<PaletteColour>& palette) {
  const auto& fg = colour_named(spec.colour, palette).rgb;
  const auto& bg = colour_named(spec.background, palette).rgb;
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> uni(0.0, 1.0);
  const double s = size * (0.55 + 0.30 * uni(rng));
  const double x0 = (size - s) * uni(rng), y0 = (size - s) * uni(rng);
  io::Image img{size, size, std::vector<std::uint8_t>(static_cast<std::size_t>(size) * size * 3)};
  constexpr int kSub = 4;  // 4×4 supersampling for smooth edges
  for (int y = 0; y < size; ++y)
    for (int x = 0; x < size; ++x) {
      int hits = 0;
      for (int sy = 0; sy < kSub; ++sy)
        for (int sx = 0; sx < kSub; ++sx)
          hits += inside(spec.shape, x + (sx + 0.5) / kSub, y + (sy + 0.5) / kSub, x0, y0, s);
      const double a = static_cast<double>(hits) / (kSub * kSub);
      for (int c = 0; c < 3; ++c)
        img.rgb[(static_cast<std::size_t>(y) * size + x) * 3 + c] =
            static_cast<std::uint8_t>(std::lround(a * fg[c] + (1 - a) * bg[c]));
    }
  return img;
}

void generate_shapes_dataset(const std::string& dir, int count, int size, std::uint64_t seed,
                             const std::function<void(int, int)>& progress) {
  if (count < 1) throw Error(ErrorKind::config, "make-dataset: --count must be at least 1");
  if (size < 8 || size > 1024) throw Error(ErrorKind::config, "make-dataset: --size must be between 8 and 1024");
  const fs::path target(dir);
  if (fs::exists(target) && !fs::is_empty(target))
    throw Error(ErrorKind::io, dir + ": already exists and is not empty; choose another --out or delete it");
  const fs::path partial = target.string() + ".partial";
  std::error_code ec;
  io::remove_tree(partial, ec);
  fs::create_directories(partial / "images", ec);
  fs::create_directories(partial / "captions", ec);
  if (ec) throw Error(ErrorKind::io, partial.string() + ": cannot create the folder: " + ec.message());
  const auto& palette = shape_palette();
  const auto& kinds = shape_kinds();
  std::mt19937_64 rng(seed);
  for (int i = 0; i < count; ++i) {
    const std::size_t fg = rng() % palette.size();
    std::size_t bg = rng() % (palette.size() - 1);
    if (bg >= fg) ++bg;  // any colour but the shape's
    const ShapeSpec spec{kinds[rng() % kinds.size()], palette[fg].name, palette[bg].name};
    char stem[32];
    std::snprintf(stem, sizeof stem, "%05d", i);
    io::write_png((partial / "images" / (std::string(stem) + ".png")).string(), draw_shape(spec, size, rng()));
    io::write_file_atomic((partial / "captions" / (std::string(stem) + ".txt")).string(), shape_caption(spec) + "\n");
    if (progress) progress(i + 1, count);
  }
  if (fs::exists(target)) fs::remove(target, ec);  // an empty folder
  fs::create_directories(target.parent_path().empty() ? fs::path(".") : target.parent_path(), ec);
  fs::rename(partial, target, ec);
  if (ec) throw Error(ErrorKind::io, dir + ": cannot move the generated dataset into place: " + ec.message());
}

ShapeReading read_shape_image(const io::Image& image) { return read_shape_image(image, shape_palette()); }

ShapeReading read_shape_image(const io::Image& image, const std::vector<PaletteColour>& palette) {
  const int w = image.width, h = image.height;
  // Nearest palette colour of every pixel.
  std::vector<int> label(static_cast<std::size_t>(w) * h);
  for (std::size_t i = 0; i < label.size(); ++i) {
    int best = 0;
    long best_d = -1;
    for (std::size_t k = 0; k < palette.size(); ++k) {
      long d = 0;
      for (int c = 0; c < 3; ++c) {
        const long diff = static_cast<long>(image.rgb[i * 3 + c]) - palette[k].rgb[c];
        d += diff * diff;
      }
      if (best_d < 0 || d < best_d) {
        best_d = d;
        best = static_cast<int>(k);
      }
    }
    label[i] = best;
  }
  std::vector<int> border(palette.size(), 0);
  for (int x = 0; x < w; ++x) {
    ++border[static_cast<std::size_t>(label[x])];
    ++border[static_cast<std::size_t>(label[static_cast<std::size_t>(h - 1) * w + x])];
  }
  for (int y = 0; y < h; ++y) {
    ++border[static_cast<std::size_t>(label[static_cast<std::size_t>(y) * w])];
    ++border[static_cast<std::size_t>(label[static_cast<std::size_t>(y) * w + w - 1])];
  }
  const int bg = static_cast<int>(std::max_element(border.begin(), border.end()) - border.begin());
  ShapeReading r;
  r.background = palette[static_cast<std::size_t>(bg)].name;
  std::vector<int> counts(palette.size(), 0);
  int area = 0, minx = w, miny = h, maxx = -1, maxy = -1;
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x) {
      const int l = label[static_cast<std::size_t>(y) * w + x];
      if (l == bg) continue;
      ++counts[static_cast<std::size_t>(l)];
      ++area;
      minx = std::min(minx, x), maxx = std::max(maxx, x), miny = std::min(miny, y), maxy = std::max(maxy, y);
    }
  r.coverage = static_cast<double>(area) / (w * h);
  if (area < std::max(4, w * h / 50)) return r;
  r.colour = palette[static_cast<std::size_t>(std::max_element(counts.begin(), counts.end()) - counts.begin())].name;
  const double box = static_cast<double>(maxx - minx + 1) * (maxy - miny + 1);
  const double fill = area / box;  // square ≈ 1, circle ≈ π/4, triangle ≈ 1/2
  r.shape = fill > 0.89 ? "square" : fill > 0.64 ? "circle" : "triangle";
  return r;
}

}  // namespace zs::data
