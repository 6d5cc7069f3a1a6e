// experiments/plot/svg: the charts the benchmark and the reports write.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <regex>
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

TEST_CASE("svg line chart: a long legend is shown whole, wrapped between parts and never inside a spec") {
  const std::string name = "model.attention=mha(heads=4, key_size=8), train.lr=0.001, model.layers=2";
  plot::LineChart c{"t", "step", "loss", false, false, {{name, {0, 1}, {1, 2}}}};
  const std::string svg = plot::render_svg(c);
  std::vector<std::string> lines;
  const std::regex tspan("<tspan [^>]*>([^<]*)</tspan>");
  for (auto it = std::sregex_iterator(svg.begin(), svg.end(), tspan); it != std::sregex_iterator(); ++it)
    lines.push_back((*it)[1]);
  REQUIRE(lines.size() == 3);
  CHECK(lines[0] == "model.attention=mha(heads=4, key_size=8),");  // the spec stays whole
  CHECK(lines[1] == "train.lr=0.001,");
  CHECK(lines[2] == "model.layers=2");
  // The legend widens to its longest line: 41 characters of 7 px after the 44 px swatch.
  std::smatch m;
  REQUIRE(std::regex_search(svg, m, std::regex("<svg [^>]*width=\"([0-9]+)\"")));
  CHECK(std::stoi(m[1]) >= 70 + (760 - 70 - 190) + 44 + 41 * 7);
  // A short name keeps the default size.
  plot::LineChart short_name{"t", "step", "loss", false, false, {{"mha", {0, 1}, {1, 2}}}};
  CHECK(plot::render_svg(short_name).find("width=\"760\"") != std::string::npos);
}

TEST_CASE("svg line chart: a band is one shaded polygon around its line, inside the axis range") {
  plot::LineChart c{"t", "step", "loss", false, false, {}};
  plot::Series s{"mha", {0, 1, 2}, {1, 2, 3}};
  s.lo = {0.5, 1.5, 2.5};
  s.hi = {1.5, 2.5, 10};
  c.series.push_back(s);
  c.note = "line: mean over seeds; band: min-max over seeds";
  const std::string svg = plot::render_svg(c);
  CHECK(count(svg, "<polygon class=\"band\"") == 1);
  CHECK(svg.find(">line: mean over seeds; band: min-max over seeds<") != std::string::npos);
  // The band's top (10) is inside the frame: its smallest pixel y is below the frame's top (40).
  std::smatch m;
  REQUIRE(std::regex_search(svg, m, std::regex("<polygon class=\"band\" points=\"([^\"]*)\"")));
  std::istringstream pts(m[1].str());
  double lowest_y = 1e9;
  for (std::string p; pts >> p;) lowest_y = std::min(lowest_y, std::stod(p.substr(p.find(',') + 1)));
  CHECK(lowest_y >= 40);
  // Without lo/hi, or with lengths that do not match, no band.
  c.series[0].hi.pop_back();
  CHECK(count(plot::render_svg(c), "<polygon") == 0);
}
