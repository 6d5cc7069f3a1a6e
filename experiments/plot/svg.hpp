/// @file
/// Plots as self-contained SVG files: line charts (linear or log axes, optional shaded bands) for
/// the benchmark's time against N, training curves and metric-against-value sweeps; bubble charts for a sweep's
/// accuracy against speed with memory as the bubble's area (the Long Range Arena summary figure). No plotting library: an SVG is a
/// few hundred lines of text, and a browser or any image viewer shows it.
/// @ingroup analysis
#pragma once
#include <string>
#include <vector>

/// @addtogroup analysis
/// @{
namespace attnlab::plot {

/// One line of a LineChart: points, and an optional shaded band.
struct Series {
  std::string name;       ///< the legend's text
  std::vector<double> x;  ///< the points' x
  std::vector<double> y;  ///< as long as x; points with a non-finite y (or <= 0 on a log axis) are gaps
  std::vector<double> lo = {};  ///< optional band's lower edge (empty, or as long as x): drawn shaded
  std::vector<double> hi = {};  ///< the band's upper edge (as long as lo)
};

/// An SVG line chart: titled axes, optional log scales, one or more series.
struct LineChart {
  std::string title;            ///< above the plot
  std::string x_label;          ///< under the x axis
  std::string y_label;          ///< beside the y axis
  bool log_x = false;           ///< log scale across
  bool log_y = false;           ///< log scale up
  std::vector<Series> series;   ///< the lines, in legend order
  int width = 760;              ///< the plot area's; a legend wider than 190 px widens the image
  int height = 480;             ///< the plot area's
  std::string note = {};          ///< optional line under the legend, e.g. what the bands show
};

/// The legend on the right shows every series name whole: a long name wraps after the ", " that
/// separate its top-level parts (never inside parentheses, so a spec like mha(heads=4, dk=8)
/// stays on one line), and the legend widens to its longest line.
/// The chart as SVG text.
std::string render_svg(const LineChart& chart);
/// Renders and writes atomically; FileError names the path on failure.
void save_svg(const std::string& path, const LineChart& chart);

/// One labelled bubble: its area is proportional to `size`.
struct Bubble {
  std::string label;  ///< written above the bubble
  double x = 0;       ///< position across
  double y = 0;       ///< position up
  double size = 0;    ///< the area's measure
};

/// An SVG bubble chart: one labelled bubble per configuration, area proportional to a third figure.
struct BubbleChart {
  std::string title;       ///< above the plot
  std::string x_label;     ///< under the x axis
  std::string y_label;     ///< beside the y axis
  std::string size_label;  ///< what a bubble's area shows
  bool log_x = false;      ///< log scale across
  std::vector<Bubble> bubbles;  ///< bubbles with a non-finite x or y are left out
  int width = 760;         ///< the plot area's width
  int height = 480;        ///< the plot area's height
};

/// Labels sit above their bubble, inside the plot area: shifted left or right at the side edges,
/// below the bubble at the top edge.
std::string render_svg(const BubbleChart& chart);
/// Renders and writes atomically; FileError names the path on failure.
void save_svg(const std::string& path, const BubbleChart& chart);

}  // namespace attnlab::plot
/// @}
