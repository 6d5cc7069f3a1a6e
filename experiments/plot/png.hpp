/// @file
/// Raster plots as PNG files (libpng): an RGB image type, atomic PNG writing and reading, a small
/// embedded 5x7 bitmap font for ASCII labels, the viridis colormap, and a heatmap renderer for
/// attention maps and (layers x heads) statistics.
///
/// Viridis (van der Walt & Smith, matplotlib 1.5) is perceptually uniform and readable in grey
/// and by colour-blind readers; here it is interpolated linearly in RGB between nine of its
/// published control points (t = 0, 1/8, ..., 1), within about 2 units of the full 256-entry
/// table.
/// @ingroup analysis
#pragma once
#include <array>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

/// @addtogroup analysis
/// @{
namespace attnlab::plot {

using Rgb = std::array<uint8_t, 3>;  ///< a colour: red, green, blue

/// An RGB raster image, written as PNG.
struct Image {
  int width = 0;             ///< pixels across
  int height = 0;            ///< pixels down
  std::vector<uint8_t> rgb;  ///< row-major, 3 bytes per pixel

  Image() = default;
  Image(int width, int height, Rgb fill = {255, 255, 255});  ///< filled with `fill`
  Rgb pixel(int x, int y) const;  ///< the colour at (x, y)
  /// Pixels outside the image are ignored (drawing clips).
  void set(int x, int y, Rgb c);
  void fill_rect(int x, int y, int w, int h, Rgb c);  ///< a w x h rectangle from (x, y), clipped
};

/// Writes `image` as an 8-bit RGB PNG, atomically (a temporary file in the same folder, then
/// rename). FileError naming the path when it cannot be written; ValueError for an empty image.
void write_png(const std::string& path, const Image& image);
/// Reads any 8-bit or 16-bit PNG as RGB (alpha dropped, grey expanded). FileError naming the path.
Image read_png(const std::string& path);

/// Glyphs are 5x7 pixels in a 6x8 cell; `scale` multiplies both. Bytes outside ' '..'~' draw as
/// '?'. vertical = true writes bottom-to-top (rotated 90 degrees counter-clockwise), starting
/// at (x, y) = the bottom-left corner of the first glyph.
inline constexpr int kGlyphWidth = 6;
inline constexpr int kGlyphHeight = 8;  ///< see kGlyphWidth
/// Draws `text` in `color` (see the glyph rules above).
void draw_text(Image& image, int x, int y, const std::string& text, Rgb color, int scale = 1, bool vertical = false);
/// Width in pixels of `text` drawn horizontally.
inline int text_width(const std::string& text, int scale = 1) { return int(text.size()) * kGlyphWidth * scale; }

/// Viridis at t in [0, 1] (clamped); NaN gives the "no value" grey kMissing.
Rgb viridis(double t);
inline constexpr Rgb kMissing = {190, 190, 190};  ///< the grey of a missing value

/// A matrix of values drawn as a coloured grid with a title, labels and a colour bar.
struct Heatmap {
  std::string title;  ///< above the grid
  int rows = 0;       ///< cells down
  int cols = 0;       ///< cells across
  std::vector<double> values;              ///< rows * cols, row-major
  std::vector<std::string> row_labels;     ///< empty: row indices 0..rows-1
  std::vector<std::string> col_labels;     ///< empty: column indices
  std::string row_axis;                    ///< the rows' axis name ("layer"), optional
  std::string col_axis;                    ///< the columns' axis name ("query"), optional
  /// Colour scale; both NaN (default): the finite values' min and max.
  double vmin = std::numeric_limits<double>::quiet_NaN();
  double vmax = std::numeric_limits<double>::quiet_NaN();  ///< see vmin
  int cell = 0;  ///< pixels per cell; 0 = chosen from the size (8..32)
};

/// Renders the heatmap: title on top, column labels above the cells (vertical), row labels on the
/// left, a colour bar on the right with its min and max. Labels longer than 12 characters are
/// cut. Non-finite values (NaN, +-inf) are drawn in kMissing grey and left out of the colour
/// scale. ValueError: rows or cols < 1, values.size() != rows * cols, label counts that are
/// neither 0 nor rows/cols, no finite value, vmin > vmax, more than 4096 rows or columns.
Image render_heatmap(const Heatmap& heatmap);
/// render_heatmap, then write_png (their errors).
void save_heatmap(const std::string& path, const Heatmap& heatmap);

}  // namespace attnlab::plot
/// @}
