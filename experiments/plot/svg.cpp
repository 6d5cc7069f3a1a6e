#include "experiments/plot/svg.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "tensor/error.hpp"
#include "tensor/io.hpp"

namespace attnlab::plot {
namespace {

// Twelve colours that stay distinguishable; series beyond that also get a dash pattern.
constexpr const char* kColours[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b",
                                    "#e377c2", "#7f7f7f", "#bcbd22", "#17becf", "#393b79", "#637939"};
constexpr int kNumColours = sizeof(kColours) / sizeof(kColours[0]);

std::string escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

// One axis: data range -> pixel range, linear or log10.
struct Axis {
  bool log = false;
  double lo = 0, hi = 1;  // in axis units (log10 of the data on a log axis)
  double p0 = 0, p1 = 1;  // pixels
  bool usable(double v) const { return std::isfinite(v) && (!log || v > 0); }
  double unit(double v) const { return log ? std::log10(v) : v; }
  double pixel(double v) const { return p0 + (unit(v) - lo) / (hi - lo) * (p1 - p0); }
};

// Tick values: decades on a log axis (with 2 and 5 when the range is short), about six round
// numbers on a linear one.
std::vector<double> ticks(const Axis& a) {
  std::vector<double> t;
  if (a.log) {
    const bool fine = a.hi - a.lo < 2.5;
    for (int e = static_cast<int>(std::floor(a.lo)); e <= static_cast<int>(std::ceil(a.hi)); ++e)
      for (double m : fine ? std::vector<double>{1, 2, 5} : std::vector<double>{1}) {
        const double v = m * std::pow(10.0, e), u = std::log10(v);
        if (u >= a.lo - 1e-9 && u <= a.hi + 1e-9) t.push_back(v);
      }
    return t;
  }
  const double raw = (a.hi - a.lo) / 6, mag = std::pow(10.0, std::floor(std::log10(raw)));
  const double step = raw / mag < 1.5 ? mag : raw / mag < 3.5 ? 2 * mag : raw / mag < 7.5 ? 5 * mag : 10 * mag;
  for (double v = std::ceil(a.lo / step) * step; v <= a.hi + step * 1e-9; v += step) t.push_back(v);
  return t;
}

std::string label(double v) {
  if (v != 0 && (std::abs(v) >= 1e5 || std::abs(v) < 1e-3)) return fmt::format("{:.0e}", v);
  return fmt::format("{:g}", v);
}

// The axes, frame, grid, tick labels, title and axis labels of a chart over the given points;
// `pad` is the fraction of each data range left free at both ends.
struct Frame {
  Axis ax, ay;
  std::string svg;
};

Frame frame(const std::string& title, const std::string& x_label, const std::string& y_label, bool log_x, bool log_y,
            int width, int height, double right, double pad_x, double pad_y,
            const std::vector<std::pair<double, double>>& points) {
  const double left = 70, top = 40, bottom = 55;
  Axis ax{log_x, 0, 0, left, width - right}, ay{log_y, 0, 0, height - bottom, top};
  double xlo = std::numeric_limits<double>::infinity(), xhi = -xlo, ylo = xlo, yhi = -xlo;
  for (const auto& [x, y] : points)
    if (ax.usable(x) && ay.usable(y)) {
      xlo = std::min(xlo, ax.unit(x)), xhi = std::max(xhi, ax.unit(x));
      ylo = std::min(ylo, ay.unit(y)), yhi = std::max(yhi, ay.unit(y));
    }
  if (!(xlo <= xhi)) xlo = 0, xhi = 1, ylo = 0, yhi = 1;  // nothing to draw: an empty frame
  auto pad = [](double& lo, double& hi, double frac) {
    const double span = hi > lo ? hi - lo : std::max(1.0, std::abs(lo));
    lo -= span * frac, hi += span * frac;
  };
  pad(xlo, xhi, pad_x), pad(ylo, yhi, pad_y);
  ax.lo = xlo, ax.hi = xhi, ay.lo = ylo, ay.hi = yhi;

  std::string out = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" viewBox=\"0 0 {} {}\" "
      "font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n",
      width, height, width, height);
  out += fmt::format("<text x=\"{}\" y=\"22\" text-anchor=\"middle\" font-size=\"15\">{}</text>\n",
                     (ax.p0 + ax.p1) / 2, escape(title));
  // grid and tick labels
  for (double v : ticks(ax)) {
    const double x = ax.pixel(v);
    out += fmt::format("<line x1=\"{:.1f}\" y1=\"{}\" x2=\"{:.1f}\" y2=\"{}\" stroke=\"#ddd\"/>\n", x, ay.p1, x, ay.p0);
    out += fmt::format("<text x=\"{:.1f}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n", x, ay.p0 + 16, label(v));
  }
  for (double v : ticks(ay)) {
    const double y = ay.pixel(v);
    out += fmt::format("<line x1=\"{}\" y1=\"{:.1f}\" x2=\"{}\" y2=\"{:.1f}\" stroke=\"#ddd\"/>\n", ax.p0, y, ax.p1, y);
    out += fmt::format("<text x=\"{}\" y=\"{:.1f}\" text-anchor=\"end\">{}</text>\n", ax.p0 - 6, y + 4, label(v));
  }
  out += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"#333\"/>\n", ax.p0,
                     ay.p1, ax.p1 - ax.p0, ay.p0 - ay.p1);
  out += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n", (ax.p0 + ax.p1) / 2,
                     height - 14, escape(x_label + (log_x ? " (log)" : "")));
  out += fmt::format("<text transform=\"translate(18 {}) rotate(-90)\" text-anchor=\"middle\">{}</text>\n",
                     (ay.p0 + ay.p1) / 2, escape(y_label + (log_y ? " (log)" : "")));
  return {ax, ay, out};
}

// Text widths are estimated: 7 px per character at the 12 px font, an upper bound for the
// sans-serif fonts browsers pick.
constexpr double kCharWidth = 7, kLegendWidth = 190, kLegendLine = 15;
constexpr size_t kLegendChars = 24;  // a legend line wraps after this many characters, where it can

double text_width(const std::string& s) { return kCharWidth * double(s.size()); }

// A series name as legend lines: broken after the ", " that separate its top-level parts, so
// that nothing is cut and no line breaks inside parentheses.
std::vector<std::string> legend_lines(const std::string& name) {
  std::vector<std::string> parts;
  int depth = 0;
  size_t from = 0;
  for (size_t i = 0; i < name.size(); ++i) {
    depth += name[i] == '(' || name[i] == '[' || name[i] == '{';
    depth -= name[i] == ')' || name[i] == ']' || name[i] == '}';
    if (depth == 0 && name.compare(i, 2, ", ") == 0) parts.push_back(name.substr(from, i + 1 - from)), from = i + 2;
  }
  parts.push_back(name.substr(from));
  std::vector<std::string> lines;
  for (const std::string& p : parts) {
    if (!lines.empty() && lines.back().size() + 1 + p.size() <= kLegendChars) lines.back() += " " + p;
    else lines.push_back(p);
  }
  return lines;
}

struct Legend {
  std::vector<std::vector<std::string>> lines;  // per series
  double width = kLegendWidth;                   // the right margin that holds it
};

Legend legend_of(const LineChart& c) {
  Legend l;
  double widest = text_width(c.note) - 30;
  for (const Series& s : c.series) {
    l.lines.push_back(legend_lines(s.name));
    for (const std::string& line : l.lines.back()) widest = std::max(widest, text_width(line));
  }
  l.width = std::max(kLegendWidth, 44 + widest + 10);
  return l;
}

// A series' band as one shaded polygon per unbroken run of usable (x, lo, hi).
std::string band(const Series& s, const Axis& ax, const Axis& ay, const char* colour) {
  if (s.lo.size() != s.x.size() || s.hi.size() != s.x.size()) return "";
  std::string out;
  std::vector<std::pair<double, double>> upper, lower;
  auto flush = [&] {
    if (upper.size() >= 2) {
      std::string pts;
      for (const auto& [x, y] : upper) pts += fmt::format("{:.1f},{:.1f} ", x, y);
      for (auto it = lower.rbegin(); it != lower.rend(); ++it) pts += fmt::format("{:.1f},{:.1f} ", it->first, it->second);
      out += fmt::format("<polygon class=\"band\" points=\"{}\" fill=\"{}\" fill-opacity=\"0.18\" stroke=\"none\"/>\n",
                         pts, colour);
    }
    upper.clear(), lower.clear();
  };
  for (size_t i = 0; i < s.x.size(); ++i) {
    if (!ax.usable(s.x[i]) || !ay.usable(s.lo[i]) || !ay.usable(s.hi[i])) {
      flush();
      continue;
    }
    upper.emplace_back(ax.pixel(s.x[i]), ay.pixel(s.hi[i]));
    lower.emplace_back(ax.pixel(s.x[i]), ay.pixel(s.lo[i]));
  }
  flush();
  return out;
}

// A bubble's label above it, kept inside the plot area: anchored at the left or right edge when
// centring would cross it, below the bubble when above would cross the top.
std::string bubble_label(const std::string& label, double x, double y, double r, const Axis& ax, const Axis& ay) {
  const double w = text_width(label), left = ax.p0 + 4, right = ax.p1 - 4;
  std::string anchor = "middle";
  if (x - w / 2 < left) anchor = "start", x = left;
  else if (x + w / 2 > right) anchor = "end", x = right;
  double ty = y - r - 4;
  if (ty - 12 < ay.p1) ty = std::min(y + r + 14, ay.p0 - 4);
  return fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"{}\">{}</text>\n", x, ty, anchor, escape(label));
}

}  // namespace

std::string render_svg(const LineChart& c) {
  const double top = 40;
  const Legend legend = legend_of(c);
  std::vector<std::pair<double, double>> points;
  for (const Series& s : c.series)
    for (size_t i = 0; i < s.x.size() && i < s.y.size(); ++i) {
      points.emplace_back(s.x[i], s.y[i]);
      if (i < s.lo.size() && i < s.hi.size()) points.emplace_back(s.x[i], s.lo[i]), points.emplace_back(s.x[i], s.hi[i]);
    }
  const int width = c.width + int(legend.width - kLegendWidth);
  Frame f = frame(c.title, c.x_label, c.y_label, c.log_x, c.log_y, width, c.height, legend.width, 0.03, 0.06, points);
  const Axis &ax = f.ax, &ay = f.ay;
  std::string out = std::move(f.svg);
  for (size_t k = 0; k < c.series.size(); ++k) out += band(c.series[k], ax, ay, kColours[k % kNumColours]);
  // series: a polyline per unbroken run of usable points, a dot per point, a legend entry
  double ly = top + 10;
  for (size_t k = 0; k < c.series.size(); ++k) {
    const Series& s = c.series[k];
    const char* colour = kColours[k % kNumColours];
    const std::string dash = k >= kNumColours ? " stroke-dasharray=\"6 3\"" : "";
    std::string run;
    auto flush = [&] {
      if (!run.empty())
        out += fmt::format("<polyline points=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"2\"{}/>\n", run, colour,
                           dash);
      run.clear();
    };
    for (size_t i = 0; i < s.x.size() && i < s.y.size(); ++i) {
      if (!ax.usable(s.x[i]) || !ay.usable(s.y[i])) {
        flush();
        continue;
      }
      const double x = ax.pixel(s.x[i]), y = ay.pixel(s.y[i]);
      run += fmt::format("{:.1f},{:.1f} ", x, y);
      out += fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"3\" fill=\"{}\"/>\n", x, y, colour);
    }
    flush();
    out += fmt::format("<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"{}\" stroke-width=\"2\"{}/>\n",
                       ax.p1 + 14, ly, ax.p1 + 38, ly, colour, dash);
    out += fmt::format("<text x=\"{}\" y=\"{}\">", ax.p1 + 44, ly + 4);
    for (size_t i = 0; i < legend.lines[k].size(); ++i)
      out += fmt::format("<tspan x=\"{}\" dy=\"{}\">{}</tspan>", ax.p1 + 44, i == 0 ? 0 : kLegendLine,
                         escape(legend.lines[k][i]));
    out += "</text>\n";
    ly += kLegendLine * double(legend.lines[k].size()) + 4;
  }
  if (!c.note.empty())
    out += fmt::format("<text x=\"{}\" y=\"{}\" fill=\"#555\" font-size=\"11\">{}</text>\n", ax.p1 + 14, ly + 8,
                       escape(c.note));
  return out + "</svg>\n";
}

void save_svg(const std::string& path, const LineChart& chart) { write_text_atomic(path, render_svg(chart)); }

std::string render_svg(const BubbleChart& c) {
  // Area, not radius, is proportional to size: the eye reads a bubble's area.
  const double right = 40, max_radius = 30;
  double max_size = 0;
  std::vector<std::pair<double, double>> points;
  for (const Bubble& b : c.bubbles) {
    points.emplace_back(b.x, b.y);
    if (std::isfinite(b.size)) max_size = std::max(max_size, b.size);
  }
  Frame f = frame(c.title, c.x_label, c.y_label, c.log_x, false, c.width, c.height, right, 0.12, 0.15, points);
  std::string out = std::move(f.svg);
  for (size_t k = 0; k < c.bubbles.size(); ++k) {
    const Bubble& b = c.bubbles[k];
    if (!f.ax.usable(b.x) || !f.ay.usable(b.y)) continue;
    const double r = max_size > 0 && std::isfinite(b.size) && b.size > 0 ? max_radius * std::sqrt(b.size / max_size) : 3;
    const double x = f.ax.pixel(b.x), y = f.ay.pixel(b.y);
    const char* colour = kColours[k % kNumColours];
    out += fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"{:.1f}\" fill=\"{}\" fill-opacity=\"0.45\" stroke=\"{}\"/>\n",
                       x, y, std::max(r, 2.0), colour, colour);
    out += bubble_label(b.label, x, y, std::max(r, 2.0), f.ax, f.ay);
  }
  if (!c.size_label.empty())
    out += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"end\" fill=\"#555\">bubble area \u221d {} (largest {})</text>\n",
                       f.ax.p1 - 6, f.ay.p0 - 8, escape(c.size_label), label(max_size));
  return out + "</svg>\n";
}

void save_svg(const std::string& path, const BubbleChart& chart) { write_text_atomic(path, render_svg(chart)); }

}  // namespace attnlab::plot
