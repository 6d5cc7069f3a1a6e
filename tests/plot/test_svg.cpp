// experiments/plot/svg: the charts the benchmark and the reports write.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "experiments/plot/svg.hpp"
#include "helpers.hpp"

using namespace attnlab;

namespace {

int count(const std::string& s, const std::string& what) {
  int n = 0;
  for (size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + 1)) ++n;
  return n;
}

}  // namespace

TEST_CASE("svg line chart: one polyline per unbroken run, a dot per point, escaped names") {
  plot::LineChart c{"time <vs> N", "N", "seconds", true, true, {}};
  c.series.push_back({"mha & co", {1024, 2048, 4096, 8192}, {0.1, 0.4, NAN, 6.4}});  // a gap at 4096
  c.series.push_back({"local", {1024, 2048, 4096, 8192}, {0.01, 0.02, 0.04, 0.08}});
  const std::string svg = plot::render_svg(c);
  CHECK(svg.rfind("<svg", 0) == 0);
  CHECK(svg.find("</svg>") != std::string::npos);
  CHECK(count(svg, "<polyline") == 3);  // mha in two runs, local in one
  CHECK(count(svg, "<circle") == 7);
  CHECK(svg.find("mha &amp; co") != std::string::npos);
  CHECK(svg.find("time &lt;vs&gt; N") != std::string::npos);
  CHECK(svg.find("N (log)") != std::string::npos);
}

TEST_CASE("svg line chart: log axes place decades evenly, and nothing drawable gives an empty frame") {
  plot::LineChart c{"", "x", "y", true, true, {}};
  c.series.push_back({"s", {10, 100, 1000}, {10, 100, 1000}});
  const std::string svg = plot::render_svg(c);
  // The three points lie on a straight line: equal pixel steps between decades.
  std::vector<double> xs, ys;
  std::istringstream in(svg);
  for (std::string line; std::getline(in, line);)
    if (line.rfind("<circle", 0) == 0) {
      double x = 0, y = 0;
      std::sscanf(line.c_str(), "<circle cx=\"%lf\" cy=\"%lf\"", &x, &y);
      xs.push_back(x), ys.push_back(y);
    }
  REQUIRE(xs.size() == 3);
  CHECK(std::abs((xs[1] - xs[0]) - (xs[2] - xs[1])) < 0.2);
  CHECK(std::abs((ys[1] - ys[0]) - (ys[2] - ys[1])) < 0.2);
  CHECK(ys[2] < ys[0]);  // larger values are higher up
  plot::LineChart empty{"", "x", "y", true, true, {{"s", {1, 2}, {-1, 0}}}};  // nothing positive on a log axis
  const std::string e = plot::render_svg(empty);
  CHECK(count(e, "<circle") == 0);
  CHECK(e.find("</svg>") != std::string::npos);
}

TEST_CASE("svg save writes atomically and reports an unwritable path") {
  const std::string dir = (std::filesystem::temp_directory_path() / "attnlab_test_svg").string();
  std::filesystem::create_directories(dir);
  plot::LineChart c{"t", "x", "y", false, false, {{"s", {0, 1}, {0, 1}}}};
  plot::save_svg(dir + "/a.svg", c);
  std::ifstream f(dir + "/a.svg");
  std::stringstream ss;
  ss << f.rdbuf();
  CHECK(ss.str() == plot::render_svg(c));
  const std::string err = testing::error_of([&] { plot::save_svg(dir + "/no/such/dir/a.svg", c); });
  CHECK(err.find("no/such/dir/a.svg") != std::string::npos);
  std::filesystem::remove_all(dir);
}
