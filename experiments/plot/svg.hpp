// Plots as self-contained SVG files: line charts (linear or log axes) for the benchmark's time
// against N, training curves and metric-against-value sweeps; bubble charts for a sweep's
// accuracy against speed with memory as the bubble's area (the Long Range Arena summary figure). No plotting library: an SVG is a
// few hundred lines of text, and a browser or any image viewer shows it.
#pragma once
#include <string>
#include <vector>

namespace attnlab::plot {

struct Series {
  std::string name;
  std::vector<double> x, y;  // same length; points with a non-finite y (or <= 0 on a log axis) are gaps
};

struct LineChart {
  std::string title, x_label, y_label;
  bool log_x = false, log_y = false;
  std::vector<Series> series;
  int width = 760, height = 480;
};

// The chart as SVG text.
std::string render_svg(const LineChart& chart);
// Renders and writes atomically; FileError names the path on failure.
void save_svg(const std::string& path, const LineChart& chart);

// One labelled bubble: its area is proportional to `size`.
struct Bubble {
  std::string label;
  double x = 0, y = 0, size = 0;
};

struct BubbleChart {
  std::string title, x_label, y_label, size_label;
  bool log_x = false;
  std::vector<Bubble> bubbles;  // bubbles with a non-finite x or y are left out
  int width = 760, height = 480;
};

std::string render_svg(const BubbleChart& chart);
void save_svg(const std::string& path, const BubbleChart& chart);

}  // namespace attnlab::plot
