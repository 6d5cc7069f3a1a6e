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
