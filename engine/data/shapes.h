#pragma once
// The demo dataset: coloured shapes (circle, square, triangle) on plain backgrounds, captioned
// "a red circle on a blue background", and a scorer that reads such an image back.

#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "io/image.h"

namespace zs::data {

/// One named colour of the palette (plain RGB).
struct PaletteColour {
  const char* name;
  std::array<std::uint8_t, 3> rgb;
};
/// red, green, blue, yellow, purple, orange, white, black.
const std::vector<PaletteColour>& shape_palette();
/// circle, square, triangle.
const std::vector<std::string>& shape_kinds();

/// What one image shows.
struct ShapeSpec {
  std::string shape;       ///< circle | square | triangle
  std::string colour;      ///< palette name of the shape
  std::string background;  ///< palette name of the background (never the shape's)
};

/// "a red circle on a blue background" ("an" before vowels).
std::string shape_caption(const ShapeSpec& spec);
/// Every caption the demo dataset can have (each shape, colour and other background): the words
/// the tiny presets' tokenizers are built from where no dataset is at hand (the estimator).
std::vector<std::string> all_shape_captions();
/// Parses a caption written by shape_caption(); nullopt when it is not one.
std::optional<ShapeSpec> parse_shape_caption(const std::string& caption);

/// Draws `spec` at `size`×`size`: the shape spans 55–85 % of the side at a random position,
/// anti-aliased. `seed` fixes size and position.
io::Image draw_shape(const ShapeSpec& spec, int size, std::uint64_t seed);
/// The same with the colours named from `palette` (e.g. the demo palette plus a colour of one's own).
io::Image draw_shape(const ShapeSpec& spec, int size, std::uint64_t seed, const std::vector<PaletteColour>& palette);

/// Writes `count` images in the flat-files layout: DIR/images/NNNNN.png + DIR/captions/NNNNN.txt.
/// The same seed gives the same files. `progress(done, count)` is called as files are written.
/// Files go into DIR.partial first, renamed to DIR when complete, so DIR is never half-written.
void generate_shapes_dataset(const std::string& dir, int count, int size, std::uint64_t seed,
                             const std::function<void(int, int)>& progress = {});

/// What the scorer read from an image.
struct ShapeReading {
  std::string background;  ///< palette colour nearest the border's most common colour
  std::string colour;      ///< palette colour most common in the non-background region ("" if none)
  std::string shape;       ///< circle | square | triangle by fill ratio of the bounding box ("" if none)
  double coverage = 0;     ///< fraction of the image in the shape region
};
/// Reads background colour, shape colour and shape from an image (of any size).
ShapeReading read_shape_image(const io::Image& image);
/// The same, reading colours as the nearest of `palette`.
ShapeReading read_shape_image(const io::Image& image, const std::vector<PaletteColour>& palette);

}  // namespace zs::data
