// experiments/plot/svg: the bubble chart of `attnlab report` (accuracy against speed, memory as area).
#include <cmath>
#include <regex>
#include <string>
#include <vector>

#include "experiments/plot/svg.hpp"
#include "helpers.hpp"

using namespace attnlab;

TEST_CASE("svg bubble chart: area proportional to size, labelled, escaped, non-finite points left out") {
  plot::BubbleChart c{"acc vs speed", "steps/s", "acc", "peak_rss_mb", false, {}};
  c.bubbles.push_back({"mha(heads=4)", 10, 0.6, 400});
  c.bubbles.push_back({"local<16>", 20, 0.5, 100});
  c.bubbles.push_back({"broken", NAN, 0.5, 100});
  const std::string svg = plot::render_svg(c);
  CHECK(svg.rfind("<svg", 0) == 0);
  CHECK(svg.find("</svg>") != std::string::npos);
  CHECK(svg.find("mha(heads=4)") != std::string::npos);
  CHECK(svg.find("local&lt;16&gt;") != std::string::npos);
  CHECK(svg.find(">broken<") == std::string::npos);
  std::vector<double> radii;
  const std::regex r("<circle [^>]* r=\"([0-9.]+)\"");
  for (auto it = std::sregex_iterator(svg.begin(), svg.end(), r); it != std::sregex_iterator(); ++it)
    radii.push_back(std::stod((*it)[1]));
  REQUIRE(radii.size() == 2);
  // 4x the size is 4x the area: 2x the radius.
  CHECK(radii[0] / radii[1] == doctest::Approx(2.0).epsilon(0.01));
}

TEST_CASE("svg bubble chart: labels stay inside the plot area at the right, left and top edges") {
  plot::BubbleChart c{"acc vs speed", "steps/s", "acc", "peak_rss_mb", false, {}};
  c.bubbles.push_back({"model.attention=performer(features=64)", 100, 0.9, 400});  // right edge, top
  c.bubbles.push_back({"model.attention=local(window=16)", 1, 0.1, 100});          // left edge, bottom
  c.bubbles.push_back({"mha", 50, 0.5, 100});                                       // in the middle
  const std::string svg = plot::render_svg(c);
  // The frame: <rect x=.. y=.. width=.. height=.. fill="none">.
  std::smatch f;
  REQUIRE(std::regex_search(svg, f, std::regex(R"re(<rect x="([0-9.]+)" y="([0-9.]+)" width="([0-9.]+)" height="([0-9.]+)" fill="none")re")));
  const double left = std::stod(f[1]), top = std::stod(f[2]), right = left + std::stod(f[3]), bottom = top + std::stod(f[4]);
  const std::regex label(R"re(<text x="([0-9.]+)" y="([0-9.]+)" text-anchor="(start|middle|end)">([^<]*)</text>)re");
  int seen = 0;
  for (auto it = std::sregex_iterator(svg.begin(), svg.end(), label); it != std::sregex_iterator(); ++it) {
    const std::string text = (*it)[4];
    if (text.find("model.attention") != 0 && text != "mha") continue;
    ++seen;
    CAPTURE(text);
    const double x = std::stod((*it)[1]), y = std::stod((*it)[2]), w = 7.0 * double(text.size());
    const std::string anchor = (*it)[3];
    const double x0 = anchor == "start" ? x : anchor == "end" ? x - w : x - w / 2;
    CHECK(x0 >= left);
    CHECK(x0 + w <= right);
    CHECK(y - 12 >= top);
    CHECK(y <= bottom);
    if (text == "mha") CHECK(anchor == "middle");
    if (text.find("performer") != std::string::npos) CHECK(anchor == "end");
    if (text.find("local") != std::string::npos) CHECK(anchor == "start");
  }
  CHECK(seen == 3);
}
