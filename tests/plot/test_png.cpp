// PNG writing and reading, the bitmap font, viridis and the heatmap renderer
// (experiments/plot/png.hpp): a written image reads back pixel for pixel, heatmap cells take the
// colormap's colours with non-finite cells grey, and bad input is a typed error naming it.
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "experiments/plot/png.hpp"
#include "helpers.hpp"

using namespace attnlab;
using namespace attnlab::testing;
namespace fs = std::filesystem;

namespace {

std::string temp_path(const std::string& name) {
  return (fs::temp_directory_path() / fmt::format("attnlab_test_png_{}_{}", static_cast<long>(getpid()), name)).string();
}

int64_t count_color(const plot::Image& img, plot::Rgb c) {
  int64_t n = 0;
  for (int y = 0; y < img.height; ++y)
    for (int x = 0; x < img.width; ++x) n += img.pixel(x, y) == c;
  return n;
}

double luminance(plot::Rgb c) { return 0.2126 * c[0] + 0.7152 * c[1] + 0.0722 * c[2]; }

}  // namespace

TEST_CASE("png: an RGB image round-trips through write_png and read_png") {
  plot::Image img(7, 5, {255, 255, 255});
  img.set(3, 2, {10, 200, 30});
  img.set(6, 4, {1, 2, 3});
  const std::string path = temp_path("roundtrip.png");
  plot::write_png(path, img);
  plot::Image back = plot::read_png(path);
  CHECK(back.width == 7);
  CHECK(back.height == 5);
  CHECK(back.pixel(3, 2) == plot::Rgb{10, 200, 30});
  CHECK(back.pixel(6, 4) == plot::Rgb{1, 2, 3});
  CHECK(back.pixel(0, 0) == plot::Rgb{255, 255, 255});
  CHECK(back.rgb == img.rgb);
  CHECK_FALSE(fs::exists(fmt::format("{}.tmp.{}", path, static_cast<long>(getpid()))));  // renamed
  fs::remove(path);
}

TEST_CASE("png: errors name the path, empty images are refused") {
  const std::string bad = "/nonexistent_dir_attnlab/x.png";
  std::string e = error_of([&] { plot::write_png(bad, plot::Image(2, 2)); });
  CHECK(e.find(bad) != std::string::npos);
  CHECK_THROWS_AS(plot::write_png(bad, plot::Image(2, 2)), FileError);
  CHECK_THROWS_AS(plot::write_png(temp_path("empty.png"), plot::Image(0, 3)), ValueError);
  CHECK_THROWS_AS(plot::read_png(bad), FileError);
  const std::string not_png = temp_path("not.png");
  { std::ofstream(not_png) << "hello"; }
  CHECK(error_of([&] { plot::read_png(not_png); }).find("not a PNG") != std::string::npos);
  fs::remove(not_png);
}

TEST_CASE("png: viridis hits its control points and brightens monotonically") {
  CHECK(plot::viridis(0) == plot::Rgb{68, 1, 84});
  CHECK(plot::viridis(0.5) == plot::Rgb{33, 144, 140});
  CHECK(plot::viridis(1) == plot::Rgb{253, 231, 37});
  CHECK(plot::viridis(-3) == plot::viridis(0));
  CHECK(plot::viridis(NAN) == plot::kMissing);
  for (int i = 1; i <= 100; ++i) CHECK(luminance(plot::viridis(i / 100.0)) > luminance(plot::viridis((i - 1) / 100.0)));
}

TEST_CASE("png: the bitmap font draws glyphs where expected, vertical text too") {
  plot::Image img(20, 20);
  plot::draw_text(img, 0, 0, "I", {0, 0, 0});  // 'I': row 0 is .###.
  CHECK(img.pixel(0, 0) == plot::Rgb{255, 255, 255});
  CHECK(img.pixel(1, 0) == plot::Rgb{0, 0, 0});
  CHECK(img.pixel(2, 3) == plot::Rgb{0, 0, 0});  // the stem
  CHECK(img.pixel(0, 3) == plot::Rgb{255, 255, 255});
  plot::Image v(20, 20);
  plot::draw_text(v, 0, 19, "-", {0, 0, 0}, 1, true);  // '-' is row 3 across: vertical, column x = 3
  int64_t inked = count_color(v, {0, 0, 0});
  CHECK(inked == 5);
  CHECK(v.pixel(3, 19) == plot::Rgb{0, 0, 0});
  CHECK(v.pixel(3, 15) == plot::Rgb{0, 0, 0});
  CHECK(plot::text_width("abc") == 18);
}

TEST_CASE("png: heatmap cells take the colormap, non-finite cells are grey and outside the scale") {
  plot::Heatmap h;
  h.title = "test";
  h.rows = 2, h.cols = 3;
  h.values = {0, 1, NAN, 0.5, INFINITY, 1};
  h.cell = 10;
  plot::Image img = plot::render_heatmap(h);
  CHECK(count_color(img, plot::kMissing) == 2 * 100);  // NaN and +inf cells
  CHECK(count_color(img, plot::viridis(0.5)) >= 100);  // 0.5 maps to the middle (inf left out of max)
  CHECK(count_color(img, plot::viridis(1)) >= 200);
  h.values = {0, 1, 2, 3, 4, 5};
  plot::Image full = plot::render_heatmap(h);
  CHECK(count_color(full, plot::kMissing) == 0);
  const std::string path = temp_path("heat.png");
  plot::save_heatmap(path, h);
  plot::Image back = plot::read_png(path);
  CHECK(back.rgb == full.rgb);
  fs::remove(path);
}

TEST_CASE("png: heatmap input errors") {
  plot::Heatmap h;
  CHECK(error_of([&] { plot::render_heatmap(h); }).find("empty") != std::string::npos);
  h.rows = 2, h.cols = 2;
  h.values = {1, 2, 3};
  CHECK(error_of([&] { plot::render_heatmap(h); }).find("3 values for 2 x 2") != std::string::npos);
  h.values = {NAN, NAN, INFINITY, -INFINITY};
  CHECK(error_of([&] { plot::render_heatmap(h); }).find("no finite value") != std::string::npos);
  h.values = {1, 2, 3, 4};
  h.row_labels = {"a"};
  CHECK(error_of([&] { plot::render_heatmap(h); }).find("1 row labels for 2 rows") != std::string::npos);
  h.row_labels = {};
  h.vmin = 3, h.vmax = 1;
  CHECK_THROWS_AS(plot::render_heatmap(h), ValueError);
}
