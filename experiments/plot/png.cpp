// PNG images, the bitmap font, viridis and heatmaps (see png.hpp).
#include "experiments/plot/png.hpp"

#include <png.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include <fmt/format.h>

#include "tensor/error.hpp"

namespace attnlab::plot {

Image::Image(int w, int h, Rgb fill) : width(w), height(h), rgb(size_t(std::max(w, 0)) * std::max(h, 0) * 3) {
  if (w < 0 || h < 0) fail<ValueError>("Image: size must be non-negative, got {}x{}", w, h);
  for (size_t i = 0; i < rgb.size(); i += 3) rgb[i] = fill[0], rgb[i + 1] = fill[1], rgb[i + 2] = fill[2];
}

Rgb Image::pixel(int x, int y) const {
  if (x < 0 || y < 0 || x >= width || y >= height)
    fail<IndexError>("Image: pixel ({}, {}) outside {}x{}", x, y, width, height);
  const size_t i = (size_t(y) * width + x) * 3;
  return {rgb[i], rgb[i + 1], rgb[i + 2]};
}

void Image::set(int x, int y, Rgb c) {
  if (x < 0 || y < 0 || x >= width || y >= height) return;
  const size_t i = (size_t(y) * width + x) * 3;
  rgb[i] = c[0], rgb[i + 1] = c[1], rgb[i + 2] = c[2];
}

void Image::fill_rect(int x, int y, int w, int h, Rgb c) {
  for (int yy = std::max(y, 0); yy < std::min(y + h, height); ++yy)
    for (int xx = std::max(x, 0); xx < std::min(x + w, width); ++xx) set(xx, yy, c);
}

// ---------------------------------------------------------------------------- PNG files

namespace {

// libpng reports errors through a longjmp by default; throwing from its error callback instead
// unwinds through C frames, which libpng documents as unsupported, so the callbacks record the
// message and longjmp back to the setjmp in the caller.
struct PngErrors {
  std::string message;
};

void on_png_error(png_structp png, png_const_charp msg) {
  static_cast<PngErrors*>(png_get_error_ptr(png))->message = msg;
  png_longjmp(png, 1);
}
void on_png_warning(png_structp, png_const_charp) {}

// Writes the PNG to an open FILE; returns "" or libpng's error. No C++ object with a destructor
// lives across setjmp here.
std::string write_png_file(FILE* f, const Image& image, PngErrors& errors) {
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, &errors, on_png_error, on_png_warning);
  if (!png) return "png_create_write_struct failed";
  png_infop info = png_create_info_struct(png);
  if (!info || setjmp(png_jmpbuf(png))) {
    png_destroy_write_struct(&png, &info);
    return errors.message.empty() ? "libpng error" : errors.message;
  }
  png_init_io(png, f);
  png_set_IHDR(png, info, image.width, image.height, 8, PNG_COLOR_TYPE_RGB, PNG_INTERLACE_NONE,
               PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  png_write_info(png, info);
  for (int y = 0; y < image.height; ++y)
    png_write_row(png, const_cast<png_bytep>(image.rgb.data() + size_t(y) * image.width * 3));
  png_write_end(png, nullptr);
  png_destroy_write_struct(&png, &info);
  return "";
}

}  // namespace

void write_png(const std::string& path, const Image& image) {
  if (image.width <= 0 || image.height <= 0)
    fail<ValueError>("write_png {}: image is empty ({}x{})", path, image.width, image.height);
  if (image.rgb.size() != size_t(image.width) * image.height * 3)
    fail<ValueError>("write_png {}: {} bytes for a {}x{} RGB image", path, image.rgb.size(), image.width, image.height);
  const std::string tmp = fmt::format("{}.tmp.{}", path, static_cast<long>(getpid()));
  FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) fail<FileError>("write_png: cannot write {}: {}", path, std::strerror(errno));
  PngErrors errors;
  std::string err = write_png_file(f, image, errors);
  if (std::fflush(f) != 0 && err.empty()) err = std::strerror(errno);
  if (fsync(fileno(f)) != 0 && err.empty()) err = std::strerror(errno);
  if (std::fclose(f) != 0 && err.empty()) err = std::strerror(errno);
  if (err.empty() && std::rename(tmp.c_str(), path.c_str()) != 0) err = std::strerror(errno);
  if (!err.empty()) {
    std::remove(tmp.c_str());
    fail<FileError>("write_png: cannot write {}: {}", path, err);
  }
}

namespace {

std::string read_png_file(FILE* f, Image& image, PngErrors& errors) {
  png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &errors, on_png_error, on_png_warning);
  if (!png) return "png_create_read_struct failed";
  png_infop info = png_create_info_struct(png);
  if (!info || setjmp(png_jmpbuf(png))) {
    png_destroy_read_struct(&png, &info, nullptr);
    return errors.message.empty() ? "libpng error" : errors.message;
  }
  png_init_io(png, f);
  png_read_info(png, info);
  // Normalise everything to 8-bit RGB.
  png_set_expand(png);
  png_set_strip_16(png);
  png_set_strip_alpha(png);
  png_set_gray_to_rgb(png);
  png_read_update_info(png, info);
  const int w = png_get_image_width(png, info), h = png_get_image_height(png, info);
  image.width = w, image.height = h;
  image.rgb.assign(size_t(w) * h * 3, 0);
  for (int y = 0; y < h; ++y) png_read_row(png, image.rgb.data() + size_t(y) * w * 3, nullptr);
  png_read_end(png, nullptr);
  png_destroy_read_struct(&png, &info, nullptr);
  return "";
}

}  // namespace

Image read_png(const std::string& path) {
  FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) fail<FileError>("read_png: cannot open {}: {}", path, std::strerror(errno));
  unsigned char sig[8] = {};
  if (std::fread(sig, 1, 8, f) != 8 || png_sig_cmp(sig, 0, 8) != 0) {
    std::fclose(f);
    fail<FileError>("read_png: {} is not a PNG file", path);
  }
  std::rewind(f);
  Image image;
  PngErrors errors;
  const std::string err = read_png_file(f, image, errors);
  std::fclose(f);
  if (!err.empty()) fail<FileError>("read_png: cannot read {}: {}", path, err);
  return image;
}

// ---------------------------------------------------------------------------- font

namespace {

// 5x7 glyphs for ' '..'~', drawn for this file: 7 rows per glyph, bit 4 = leftmost pixel.
constexpr uint8_t kFont[95][7] = {
    {0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00}, {0x04, 0x04, 0x04, 0x04, 0x04, 0x00, 0x04},  // ' ' !
    {0x0A, 0x0A, 0x00, 0x00, 0x00, 0x00, 0x00}, {0x0A, 0x0A, 0x1F, 0x0A, 0x1F, 0x0A, 0x0A},  // " #
    {0x04, 0x0F, 0x14, 0x0E, 0x05, 0x1E, 0x04}, {0x18, 0x19, 0x02, 0x04, 0x08, 0x13, 0x03},  // $ %
    {0x0C, 0x12, 0x14, 0x08, 0x15, 0x12, 0x0D}, {0x04, 0x04, 0x00, 0x00, 0x00, 0x00, 0x00},  // & '
    {0x02, 0x04, 0x08, 0x08, 0x08, 0x04, 0x02}, {0x08, 0x04, 0x02, 0x02, 0x02, 0x04, 0x08},  // ( )
    {0x00, 0x04, 0x15, 0x0E, 0x15, 0x04, 0x00}, {0x00, 0x04, 0x04, 0x1F, 0x04, 0x04, 0x00},  // * +
    {0x00, 0x00, 0x00, 0x00, 0x0C, 0x04, 0x08}, {0x00, 0x00, 0x00, 0x1F, 0x00, 0x00, 0x00},  // , -
    {0x00, 0x00, 0x00, 0x00, 0x00, 0x0C, 0x0C}, {0x00, 0x01, 0x02, 0x04, 0x08, 0x10, 0x00},  // . /
    {0x0E, 0x11, 0x13, 0x15, 0x19, 0x11, 0x0E}, {0x04, 0x0C, 0x04, 0x04, 0x04, 0x04, 0x0E},  // 0 1
    {0x0E, 0x11, 0x01, 0x02, 0x04, 0x08, 0x1F}, {0x1F, 0x02, 0x04, 0x02, 0x01, 0x11, 0x0E},  // 2 3
    {0x02, 0x06, 0x0A, 0x12, 0x1F, 0x02, 0x02}, {0x1F, 0x10, 0x1E, 0x01, 0x01, 0x11, 0x0E},  // 4 5
    {0x06, 0x08, 0x10, 0x1E, 0x11, 0x11, 0x0E}, {0x1F, 0x01, 0x02, 0x04, 0x08, 0x08, 0x08},  // 6 7
    {0x0E, 0x11, 0x11, 0x0E, 0x11, 0x11, 0x0E}, {0x0E, 0x11, 0x11, 0x0F, 0x01, 0x02, 0x0C},  // 8 9
    {0x00, 0x0C, 0x0C, 0x00, 0x0C, 0x0C, 0x00}, {0x00, 0x0C, 0x0C, 0x00, 0x0C, 0x04, 0x08},  // : ;
    {0x02, 0x04, 0x08, 0x10, 0x08, 0x04, 0x02}, {0x00, 0x00, 0x1F, 0x00, 0x1F, 0x00, 0x00},  // < =
    {0x08, 0x04, 0x02, 0x01, 0x02, 0x04, 0x08}, {0x0E, 0x11, 0x01, 0x02, 0x04, 0x00, 0x04},  // > ?
    {0x0E, 0x11, 0x01, 0x0D, 0x15, 0x15, 0x0E}, {0x0E, 0x11, 0x11, 0x11, 0x1F, 0x11, 0x11},  // @ A
    {0x1E, 0x11, 0x11, 0x1E, 0x11, 0x11, 0x1E}, {0x0E, 0x11, 0x10, 0x10, 0x10, 0x11, 0x0E},  // B C
    {0x1C, 0x12, 0x11, 0x11, 0x11, 0x12, 0x1C}, {0x1F, 0x10, 0x10, 0x1E, 0x10, 0x10, 0x1F},  // D E
    {0x1F, 0x10, 0x10, 0x1E, 0x10, 0x10, 0x10}, {0x0E, 0x11, 0x10, 0x17, 0x11, 0x11, 0x0F},  // F G
    {0x11, 0x11, 0x11, 0x1F, 0x11, 0x11, 0x11}, {0x0E, 0x04, 0x04, 0x04, 0x04, 0x04, 0x0E},  // H I
    {0x07, 0x02, 0x02, 0x02, 0x02, 0x12, 0x0C}, {0x11, 0x12, 0x14, 0x18, 0x14, 0x12, 0x11},  // J K
    {0x10, 0x10, 0x10, 0x10, 0x10, 0x10, 0x1F}, {0x11, 0x1B, 0x15, 0x15, 0x11, 0x11, 0x11},  // L M
    {0x11, 0x11, 0x19, 0x15, 0x13, 0x11, 0x11}, {0x0E, 0x11, 0x11, 0x11, 0x11, 0x11, 0x0E},  // N O
    {0x1E, 0x11, 0x11, 0x1E, 0x10, 0x10, 0x10}, {0x0E, 0x11, 0x11, 0x11, 0x15, 0x12, 0x0D},  // P Q
    {0x1E, 0x11, 0x11, 0x1E, 0x14, 0x12, 0x11}, {0x0F, 0x10, 0x10, 0x0E, 0x01, 0x01, 0x1E},  // R S
    {0x1F, 0x04, 0x04, 0x04, 0x04, 0x04, 0x04}, {0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x0E},  // T U
    {0x11, 0x11, 0x11, 0x11, 0x11, 0x0A, 0x04}, {0x11, 0x11, 0x11, 0x15, 0x15, 0x15, 0x0A},  // V W
    {0x11, 0x11, 0x0A, 0x04, 0x0A, 0x11, 0x11}, {0x11, 0x11, 0x11, 0x0A, 0x04, 0x04, 0x04},  // X Y
    {0x1F, 0x01, 0x02, 0x04, 0x08, 0x10, 0x1F}, {0x0E, 0x08, 0x08, 0x08, 0x08, 0x08, 0x0E},  // Z [
    {0x00, 0x10, 0x08, 0x04, 0x02, 0x01, 0x00}, {0x0E, 0x02, 0x02, 0x02, 0x02, 0x02, 0x0E},  // \ ]
    {0x04, 0x0A, 0x11, 0x00, 0x00, 0x00, 0x00}, {0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x1F},  // ^ _
    {0x08, 0x04, 0x02, 0x00, 0x00, 0x00, 0x00}, {0x00, 0x00, 0x0E, 0x01, 0x0F, 0x11, 0x0F},  // ` a
    {0x10, 0x10, 0x16, 0x19, 0x11, 0x11, 0x1E}, {0x00, 0x00, 0x0E, 0x10, 0x10, 0x11, 0x0E},  // b c
    {0x01, 0x01, 0x0D, 0x13, 0x11, 0x11, 0x0F}, {0x00, 0x00, 0x0E, 0x11, 0x1F, 0x10, 0x0E},  // d e
    {0x06, 0x09, 0x08, 0x1C, 0x08, 0x08, 0x08}, {0x00, 0x0F, 0x11, 0x11, 0x0F, 0x01, 0x0E},  // f g
    {0x10, 0x10, 0x16, 0x19, 0x11, 0x11, 0x11}, {0x04, 0x00, 0x0C, 0x04, 0x04, 0x04, 0x0E},  // h i
    {0x02, 0x00, 0x06, 0x02, 0x02, 0x12, 0x0C}, {0x10, 0x10, 0x12, 0x14, 0x18, 0x14, 0x12},  // j k
    {0x0C, 0x04, 0x04, 0x04, 0x04, 0x04, 0x0E}, {0x00, 0x00, 0x1A, 0x15, 0x15, 0x11, 0x11},  // l m
    {0x00, 0x00, 0x16, 0x19, 0x11, 0x11, 0x11}, {0x00, 0x00, 0x0E, 0x11, 0x11, 0x11, 0x0E},  // n o
    {0x00, 0x00, 0x1E, 0x11, 0x1E, 0x10, 0x10}, {0x00, 0x00, 0x0D, 0x13, 0x0F, 0x01, 0x01},  // p q
    {0x00, 0x00, 0x16, 0x19, 0x10, 0x10, 0x10}, {0x00, 0x00, 0x0E, 0x10, 0x0E, 0x01, 0x1E},  // r s
    {0x08, 0x08, 0x1C, 0x08, 0x08, 0x09, 0x06}, {0x00, 0x00, 0x11, 0x11, 0x11, 0x13, 0x0D},  // t u
    {0x00, 0x00, 0x11, 0x11, 0x11, 0x0A, 0x04}, {0x00, 0x00, 0x11, 0x11, 0x15, 0x15, 0x0A},  // v w
    {0x00, 0x00, 0x11, 0x0A, 0x04, 0x0A, 0x11}, {0x00, 0x00, 0x11, 0x11, 0x0F, 0x01, 0x0E},  // x y
    {0x00, 0x00, 0x1F, 0x02, 0x04, 0x08, 0x1F}, {0x02, 0x04, 0x04, 0x08, 0x04, 0x04, 0x02},  // z {
    {0x04, 0x04, 0x04, 0x04, 0x04, 0x04, 0x04}, {0x08, 0x04, 0x04, 0x02, 0x04, 0x04, 0x08},  // | }
    {0x00, 0x00, 0x08, 0x15, 0x02, 0x00, 0x00},                                              // ~
};

}  // namespace

void draw_text(Image& image, int x, int y, const std::string& text, Rgb color, int scale, bool vertical) {
  for (size_t i = 0; i < text.size(); ++i) {
    const unsigned char ch = static_cast<unsigned char>(text[i]);
    const uint8_t* glyph = kFont[(ch >= 32 && ch <= 126 ? ch : '?') - 32];
    const int advance = int(i) * kGlyphWidth * scale;
    for (int row = 0; row < 7; ++row)
      for (int col = 0; col < 5; ++col) {
        if (!(glyph[row] >> (4 - col) & 1)) continue;
        for (int sy = 0; sy < scale; ++sy)
          for (int sx = 0; sx < scale; ++sx) {
            const int gx = col * scale + sx, gy = row * scale + sy;  // in the glyph, y down
            if (vertical)  // rotated counter-clockwise: the glyph's x runs up, its y runs right
              image.set(x + gy, y - advance - gx, color);
            else
              image.set(x + advance + gx, y + gy, color);
          }
      }
  }
}

// ---------------------------------------------------------------------------- colormap

Rgb viridis(double t) {
  // matplotlib's viridis at t = 0, 1/8, ..., 1.
  static constexpr uint8_t kStops[9][3] = {{68, 1, 84},    {71, 45, 123},  {59, 82, 139},
                                           {44, 114, 142}, {33, 144, 140}, {39, 173, 129},
                                           {93, 200, 99},  {170, 220, 50}, {253, 231, 37}};
  if (std::isnan(t)) return kMissing;
  t = std::clamp(t, 0.0, 1.0) * 8;
  const int i = std::min(int(t), 7);
  const double f = t - i;
  Rgb c;
  for (int k = 0; k < 3; ++k) c[k] = uint8_t(std::lround(kStops[i][k] + f * (kStops[i + 1][k] - kStops[i][k])));
  return c;
}

// ---------------------------------------------------------------------------- heatmap

namespace {

constexpr size_t kMaxLabel = 12;
constexpr Rgb kInk = {30, 30, 30};

std::string cut(const std::string& s) { return s.size() <= kMaxLabel ? s : s.substr(0, kMaxLabel - 1) + "~"; }

std::vector<std::string> labels_or_indices(const std::vector<std::string>& given, int n, const char* what) {
  if (given.empty()) {
    std::vector<std::string> out;
    for (int i = 0; i < n; ++i) out.push_back(std::to_string(i));
    return out;
  }
  if (int(given.size()) != n)
    fail<ValueError>("render_heatmap: {} {} labels for {} {}s (give one per {} or none)", given.size(), what, n, what, what);
  std::vector<std::string> out;
  for (const auto& s : given) out.push_back(cut(s));
  return out;
}

}  // namespace

Image render_heatmap(const Heatmap& h) {
  if (h.rows < 1 || h.cols < 1) fail<ValueError>("render_heatmap: the matrix is empty ({} x {})", h.rows, h.cols);
  if (h.rows > 4096 || h.cols > 4096)
    fail<ValueError>("render_heatmap: {} x {} cells is too many (at most 4096 per side)", h.rows, h.cols);
  if (h.values.size() != size_t(h.rows) * h.cols)
    fail<ValueError>("render_heatmap: {} values for {} x {} cells", h.values.size(), h.rows, h.cols);
  const auto row_labels = labels_or_indices(h.row_labels, h.rows, "row");
  const auto col_labels = labels_or_indices(h.col_labels, h.cols, "column");
  double lo = h.vmin, hi = h.vmax;
  if (std::isnan(lo) || std::isnan(hi)) {
    double fmin = INFINITY, fmax = -INFINITY;
    for (double v : h.values)
      if (std::isfinite(v)) fmin = std::min(fmin, v), fmax = std::max(fmax, v);
    if (!std::isfinite(fmin)) fail<ValueError>("render_heatmap \"{}\": no finite value among {} cells", h.title, h.values.size());
    if (std::isnan(lo)) lo = fmin;
    if (std::isnan(hi)) hi = fmax;
  }
  if (!(lo <= hi)) fail<ValueError>("render_heatmap: vmin {} is greater than vmax {}", lo, hi);

  const int cell = h.cell > 0 ? h.cell : std::clamp(640 / std::max(h.rows, h.cols), 8, 32);
  size_t row_chars = 0, col_chars = 0;
  for (const auto& s : row_labels) row_chars = std::max(row_chars, s.size());
  for (const auto& s : col_labels) col_chars = std::max(col_chars, s.size());
  const std::string lo_text = fmt::format("{:.3g}", lo), hi_text = fmt::format("{:.3g}", hi);
  const int pad = 6;
  const int axis_w = h.row_axis.empty() ? 0 : kGlyphHeight + 2;  // the row axis name, vertical
  const int left = pad + axis_w + int(row_chars) * kGlyphWidth + 4;
  const int title_h = h.title.empty() ? 0 : kGlyphHeight + 4;
  const int col_axis_h = h.col_axis.empty() ? 0 : kGlyphHeight + 2;
  const int top = pad + title_h + col_axis_h + int(col_chars) * kGlyphWidth + 4;
  const int grid_w = h.cols * cell, grid_h = h.rows * cell;
  const int bar_x = left + grid_w + 12, bar_w = 14;
  const int right_text = int(std::max(lo_text.size(), hi_text.size())) * kGlyphWidth;
  const int width = std::max(bar_x + bar_w + 4 + right_text + pad, pad + text_width(h.title) + pad);
  const int height = top + std::max(grid_h, 3 * kGlyphHeight) + pad;
  Image img(width, height);

  if (!h.title.empty()) draw_text(img, pad, pad, h.title, kInk);
  if (!h.col_axis.empty()) draw_text(img, left, pad + title_h, h.col_axis, kInk);
  if (!h.row_axis.empty()) draw_text(img, pad, top + std::min(grid_h, text_width(h.row_axis)) , h.row_axis, kInk, 1, true);
  for (int c = 0; c < h.cols; ++c)  // vertical, bottom-aligned just above the grid
    draw_text(img, left + c * cell + (cell - 7) / 2, top - 4, col_labels[c], kInk, 1, true);
  for (int r = 0; r < h.rows; ++r)
    draw_text(img, left - 4 - text_width(row_labels[r]), top + r * cell + (cell - 7) / 2, row_labels[r], kInk);
  for (int r = 0; r < h.rows; ++r)
    for (int c = 0; c < h.cols; ++c) {
      const double v = h.values[size_t(r) * h.cols + c];
      const Rgb color = std::isfinite(v) ? viridis(hi > lo ? (v - lo) / (hi - lo) : 0.5) : kMissing;
      img.fill_rect(left + c * cell, top + r * cell, cell, cell, color);
    }
  // Colour bar: max at the top, min at the bottom.
  const int bar_h = std::max(grid_h, 3 * kGlyphHeight);
  for (int y = 0; y < bar_h; ++y)
    img.fill_rect(bar_x, top + y, bar_w, 1, viridis(bar_h > 1 ? 1.0 - double(y) / (bar_h - 1) : 0.5));
  draw_text(img, bar_x + bar_w + 4, top, hi_text, kInk);
  draw_text(img, bar_x + bar_w + 4, top + bar_h - 7, lo_text, kInk);
  return img;
}

void save_heatmap(const std::string& path, const Heatmap& heatmap) { write_png(path, render_heatmap(heatmap)); }

}  // namespace attnlab::plot
