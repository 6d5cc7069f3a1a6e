// Plotting for `attnlab report` (report_parts.hpp): the SVG charts and the report.md sections
// that show them.
#include <algorithm>
#include <cmath>
#include <set>

#include "experiments/plot/svg.hpp"
#include "experiments/runner/report_parts.hpp"
#include "experiments/runner/stats.hpp"

namespace attnlab::runner::report_detail {
namespace fs = std::filesystem;
namespace {

std::string file_name(const std::string& s) {
  std::string out;
  for (char c : s) out += std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' ? c : '_';
  return out;
}

// One group's curve: at every step any of its seeds logged, the mean over those seeds and, with
// two or more seeds, the band from their minimum to their maximum.
plot::Series group_curve(const Group& g, const std::string& name) {
  std::map<int64_t, std::vector<double>> at;  // step -> one value per seed
  for (const ReportRun* r : g.runs)
    if (auto it = r->curves.find(name); it != r->curves.end())
      for (const auto& [step, v] : it->second) at[step].push_back(v);
  plot::Series s{g.label, {}, {}};
  const bool band = g.runs.size() >= 2;
  for (const auto& [step, vs] : at) {
    s.x.push_back(double(step));
    s.y.push_back(mean_interval(vs).mean);
    if (!band) continue;
    s.lo.push_back(*std::min_element(vs.begin(), vs.end()));
    s.hi.push_back(*std::max_element(vs.begin(), vs.end()));
  }
  return s;
}

// The curve names: [report] curves, else every metrics.jsonl column but time.
std::vector<std::string> curve_names(const ReportInput& in) {
  if (!in.spec.curves.empty()) return in.spec.curves;
  std::set<std::string> all;
  for (const ReportRun& r : in.runs)
    for (const auto& [n, pts] : r.curves)
      if (n != "time") all.insert(n);
  return {all.begin(), all.end()};
}

std::string curve_section(const std::vector<Group>& groups, const std::vector<size_t>& order,
                          const std::vector<std::string>& names, const fs::path& dir) {
  std::string md;
  const bool seeds = std::any_of(groups.begin(), groups.end(), [](const Group& g) { return g.runs.size() >= 2; });
  md += seeds ? "## Training curves\n\nMean over seeds at each step; the shaded band spans the seeds' minimum to "
                "maximum (configurations with one run have no band).\n\n"
              : "## Training curves\n\nOne run per configuration.\n\n";
  for (const auto& name : names) {
    plot::LineChart chart{name, "step", name, false, false, {}, 760, 480};
    if (seeds) chart.note = "line: mean; shaded: min-max over seeds";
    for (size_t gi : order)
      if (plot::Series s = group_curve(groups[gi], name); !s.x.empty()) chart.series.push_back(std::move(s));
    if (chart.series.empty()) {
      md += fmt::format("No run logged `{}`.\n\n", name);
      continue;
    }
    const std::string file = "plots/curve_" + file_name(name) + ".svg";
    plot::save_svg((dir / file).string(), chart);
    md += fmt::format("![{}]({})\n\n", name, file);
  }
  return md;
}

// The headline metric against a swept value, one series per configuration of the other keys.
std::string x_section(const ReportInput& in, const std::vector<Group>& groups, const std::string& headline,
                      const fs::path& dir) {
  const std::string& x = in.spec.x;
  std::string md = fmt::format("## `{}` against `{}`\n\n", headline, x);
  std::map<std::string, plot::Series> series;
  std::vector<std::string> series_order;
  // The keys zipped with x vary with it: they belong to the x axis, not to the series' names.
  std::set<std::string> with_x = {x};
  if (in.sweep && std::any_of(in.sweep->zip.begin(), in.sweep->zip.end(), [&](const Axis& a) { return a.key == x; }))
    for (const Axis& a : in.sweep->zip) with_x.insert(a.key);
  for (const Group& g : groups) {
    if (!g.point.contains(x) || !g.point[x].is_number())
      return md + fmt::format("`{}` takes non-numeric values: see the table above.\n\n", x);
    std::string rest;
    for (const auto& k : in.group_keys)
      if (!with_x.count(k) && g.point.contains(k)) rest += (rest.empty() ? "" : ", ") + k + "=" + text_of(g.point[k]);
    if (rest.empty()) rest = headline;
    if (!series.count(rest)) series_order.push_back(rest), series[rest].name = rest;
    series[rest].x.push_back(g.point[x].get<double>());
    series[rest].y.push_back(group_mean(g, headline));
  }
  plot::LineChart chart{fmt::format("{} against {} (mean over seeds)", headline, x), x, headline, false, false, {}, 760, 480};
  for (const auto& k : series_order) {
    const plot::Series& s = series[k];
    std::vector<size_t> idx(s.x.size());
    for (size_t i = 0; i < idx.size(); ++i) idx[i] = i;
    std::sort(idx.begin(), idx.end(), [&](size_t a, size_t b) { return s.x[a] < s.x[b]; });
    plot::Series sorted{s.name, {}, {}};
    for (size_t i : idx) sorted.x.push_back(s.x[i]), sorted.y.push_back(s.y[i]);
    chart.series.push_back(std::move(sorted));
  }
  const std::string file = "plots/" + file_name(headline) + "_vs_" + file_name(x) + ".svg";
  plot::save_svg((dir / file).string(), chart);
  return md + fmt::format("![{} against {}]({})\n\n", headline, x, file);
}

// Accuracy, speed and memory in one picture, one bubble per configuration.
std::string bubble_section(const ReportInput& in, const std::vector<Group>& groups, const std::vector<size_t>& order,
                           const fs::path& dir) {
  const auto& b = in.spec.bubble;
  plot::BubbleChart chart{fmt::format("{} against {} (area: {})", b.y, b.x, b.size), b.x, b.y, b.size, false, {}, 760, 480};
  for (size_t gi : order) {
    const Group& g = groups[gi];
    const std::string label = b.label.empty() ? g.label : label_of(*g.runs.front(), b.label);
    chart.bubbles.push_back({label, group_mean(g, b.x), group_mean(g, b.y), group_mean(g, b.size)});
  }
  plot::save_svg((dir / "plots/bubble.svg").string(), chart);
  return fmt::format("## {}, {} and {}\n\nOne bubble per configuration (mean over seeds); its area is proportional to "
                     "`{}`.\n\n![bubble chart](plots/bubble.svg)\n\n",
                     b.y, b.x, b.size, b.size);
}

}  // namespace

std::string plot_sections(const ReportInput& in, const std::vector<Group>& groups, const std::vector<size_t>& order,
                          const std::string& headline, const fs::path& dir) {
  if (in.runs.empty()) return "";
  fs::create_directories(dir / "plots");
  std::string md;
  const std::vector<std::string> names = curve_names(in);
  if (!names.empty()) md += curve_section(groups, order, names, dir);
  if (!in.spec.x.empty()) md += x_section(in, groups, headline, dir);
  if (in.spec.has_bubble) md += bubble_section(in, groups, order, dir);
  return md;
}

}  // namespace attnlab::runner::report_detail
