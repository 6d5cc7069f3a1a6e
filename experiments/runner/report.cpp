// The report of a sweep directory (experiments/runner/report.hpp): merge, tabulate, plot.
#include "experiments/runner/report.hpp"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "experiments/plot/svg.hpp"
#include "experiments/runner/measured.hpp"
#include "experiments/runner/stats.hpp"
#include "experiments/runner/store.hpp"
#include "experiments/runner/sweep.hpp"
#include "tensor/io.hpp"

namespace attnlab::runner {
namespace fs = std::filesystem;
using nlohmann::json;
using nlohmann::ordered_json;
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

struct Run {
  int64_t id;
  ordered_json point;
  json config;
  std::map<std::string, double> metrics;
};

// Over a group's seeds: the mean and its 95% interval (experiments/runner/stats.hpp).
Interval stat(const std::vector<double>& xs) { return mean_interval(xs); }

bool integral(double x) { return std::isfinite(x) && std::abs(x) < 1e15 && x == std::round(x); }

std::string text_of(const json& v) { return v.is_string() ? v.get<std::string>() : v.dump(); }

// "3.812 ± 0.011" (mean ± half-width of its 95% interval); counts that agree over seeds print as
// integers ("33280"), a single run as its value.
std::string cell(const Interval& s) {
  if (s.n == 0) return "-";
  const bool exact = s.n == 1 || s.sd == 0;
  if (exact && integral(s.mean)) return fmt::format("{:.0f}", s.mean);
  if (s.n == 1) return fmt::format("{:.4g}", s.mean);
  const double h = s.half_width();
  // Two significant digits of the half-width, never in exponent form for widths of 10 or more.
  return h >= 10 ? fmt::format("{:.4g} ± {:.0f}", s.mean, h) : fmt::format("{:.4g} ± {:.2g}", s.mean, h);
}

// A TOML scalar as the JSON a run's point holds; numbers compare by value (16 == 16.0).
bool same_value(const json& point_value, const Value& v) {
  return std::visit(
      [&](const auto& x) {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, std::string>) return point_value.is_string() && point_value.get<std::string>() == x;
        else if constexpr (std::is_same_v<T, bool>) return point_value.is_boolean() && point_value.get<bool>() == x;
        else return point_value.is_number() && point_value.get<double>() == double(x);
      },
      v);
}

std::string selector_text(const ReportSpec::Selector& sel) {
  std::string out;
  for (const auto& [k, v] : sel) out += (out.empty() ? "" : ", ") + k + "=" + to_toml_value(v);
  return out;
}

// The runs that share every axis value but the seed.
struct Group {
  std::string label;                // "model.attention=mha(heads=4), train.lr=0.001"
  std::vector<std::string> values;  // one per non-seed axis, as text
  ordered_json point;               // the non-seed axis values
  std::vector<const Run*> runs;

  bool matches(const ReportSpec::Selector& sel) const {
    for (const auto& [k, v] : sel)
      if (!point.contains(k) || !same_value(point[k], v)) return false;
    return true;
  }
};

// A metric, else a numeric axis value, else a numeric config value, else NaN.
double lookup(const Run& r, const std::string& name) {
  if (auto it = r.metrics.find(name); it != r.metrics.end()) return it->second;
  if (r.point.contains(name) && r.point[name].is_number()) return r.point[name].get<double>();
  if (r.config.contains(name) && r.config[name].is_number()) return r.config[name].get<double>();
  return kNaN;
}

std::string label_of(const Run& r, const std::string& key) {
  if (r.point.contains(key)) return text_of(r.point[key]);
  if (r.config.contains(key)) return text_of(r.config[key]);
  return "";
}

std::string file_name(const std::string& s) {
  std::string out;
  for (char c : s) out += std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' ? c : '_';
  return out;
}

// Merges the shard stores and any complete run directory not yet stored into `store`.
void gather(const fs::path& dir, Store& store, std::ostream& out) {
  if (fs::is_directory(dir / "shards")) {
    std::vector<fs::path> shards;
    for (const auto& e : fs::directory_iterator(dir / "shards"))
      if (e.path().extension() == ".sqlite") shards.push_back(e.path());
    std::sort(shards.begin(), shards.end());
    for (const auto& p : shards) store.merge_from(p);
    if (!shards.empty()) out << fmt::format("merged {} shard database(s)\n", shards.size());
  }
  const auto stored = store.complete_ids();
  std::vector<RunRecord> missing;
  if (fs::is_directory(dir / "runs"))
    for (const auto& e : fs::directory_iterator(dir / "runs")) {
      const std::string name = e.path().filename().string();
      if (name.empty() || !std::all_of(name.begin(), name.end(), ::isdigit)) continue;
      const int64_t id = std::stoll(name);
      if (fs::exists(e.path() / "summary.json") && !std::binary_search(stored.begin(), stored.end(), id))
        missing.push_back(read_run_dir(id, e.path()));
    }
  store.put(missing);
  if (!missing.empty()) out << fmt::format("added {} complete run(s) missing from the database\n", missing.size());
}

// The one group a selector names; ValueError naming `what` when it names none or several.
const Group& select(const std::vector<Group>& groups, const ReportSpec::Selector& sel, const std::string& what) {
  const Group* found = nullptr;
  std::vector<std::string> labels;
  for (const Group& g : groups) {
    labels.push_back(g.label);
    if (!g.matches(sel)) continue;
    if (found)
      fail<ValueError>("{} = {{{}}} names more than one configuration ('{}' and '{}'); add axis values", what,
                       selector_text(sel), found->label, g.label);
    found = &g;
  }
  if (!found)
    fail<ValueError>("{} = {{{}}} names no configuration with complete runs (configurations: {})", what,
                     selector_text(sel), fmt::join(labels, "; "));
  return *found;
}

// A run's metric, or metric - minus when minus names a second metric of the same run.
double judged(const Run& r, const std::string& metric, const std::string& minus) {
  return minus.empty() ? lookup(r, metric) : lookup(r, metric) - lookup(r, minus);
}

bool has_complete(const std::vector<Group>& groups, const ReportSpec::Selector& sel) {
  return std::any_of(groups.begin(), groups.end(), [&](const Group& g) { return g.matches(sel); });
}

// ValueError naming `what` when no planned run of the sweep has the selector's values.
void check_planned(const SweepSpec& spec, const ReportSpec::Selector& sel, const std::string& what) {
  for (const Point& p : expand_sweep(spec)) {
    bool all = true;
    for (const auto& [k, v] : sel) {
      auto it = std::find_if(p.begin(), p.end(), [&](const auto& kv) { return kv.first == k; });
      all = all && it != p.end() && same_value(json::parse(point_to_json({*it}))[k], v);
    }
    if (all) return;
  }
  fail<ValueError>("{} = {{{}}} names no configuration of the sweep", what, selector_text(sel));
}

// A metric of a and b on the seeds both ran, in seed order.
std::pair<std::vector<double>, std::vector<double>> paired_values(const Group& a, const Group& b, const std::string& metric,
                                                                  const std::string& minus = "") {
  std::map<int64_t, double> of_b;
  for (const Run* r : b.runs) of_b[r->point.value("seed", int64_t(0))] = judged(*r, metric, minus);
  std::vector<double> xs, ys;
  for (const Run* r : a.runs)
    if (auto it = of_b.find(r->point.value("seed", int64_t(0))); it != of_b.end())
      xs.push_back(judged(*r, metric, minus)), ys.push_back(it->second);
  return {xs, ys};
}

std::string interval_text(const Interval& in) {
  if (in.n < 2) return in.n == 1 ? fmt::format("{:.4g} (one pair)", in.mean) : "-";
  return fmt::format("{:+.4g} [{:+.4g}, {:+.4g}]", in.mean, in.low, in.high);
}

// The paired differences against report.baseline and the verdict of each [[report.expect]], as
// report.md sections; the verdicts also go to expectations.csv.
std::string comparisons(const SweepSpec& spec, const std::vector<Group>& groups, const std::vector<size_t>& order,
                        const std::string& headline, const fs::path& dir) {
  std::string md;
  if (!spec.report.baseline.empty() && !groups.empty()) {
    const Group& base = select(groups, spec.report.baseline, "report.baseline");
    md += fmt::format("## Paired differences against `{}`\n\n", base.label);
    md += fmt::format("`{}` of each configuration minus the baseline's, seed by seed; mean and 95% interval (Student t) "
                      "over the seeds both ran. An interval that excludes 0 is a difference the seeds resolve.\n\n",
                      headline);
    md += "| configuration | pairs | difference [95% interval] |\n|---|---:|---|\n";
    for (size_t gi : order) {
      const Group& g = groups[gi];
      if (&g == &base) continue;
      const auto [xs, ys] = paired_values(g, base, headline);
      const Interval d = paired_interval(xs, ys);
      md += fmt::format("| `{}` | {} | {} |\n", g.label, d.n, interval_text(d));
    }
    md += "\n";
  }
  if (spec.report.expect.empty()) return md;
  md += "## Expectations\n\nDeclared in the sweep file before the runs; judged on 95% intervals (Student t over seeds; "
        "paired by seed where two configurations are compared). holds: the whole interval is on the expected side; "
        "contradicted: the whole interval is on the other side; inconclusive: the interval reaches both.\n\n";
  md += "| expectation | metric | relation | observed [95% interval] | pairs | verdict |\n|---|---|---|---|---:|---|\n";
  std::string csv = "name,metric,relation,a,b,observed,ci_low,ci_high,n,verdict\n";
  auto quoted = [](const std::string& t) {
    std::string q = "\"";
    for (char c : t) q += c == '"' ? std::string("\"\"") : std::string(1, c);
    return q + "\"";
  };
  for (const auto& e : spec.report.expect) {
    const std::string metric = (e.metric.empty() ? headline : e.metric) + (e.minus.empty() ? "" : " - " + e.minus);
    const std::string& base_metric = e.metric.empty() ? headline : e.metric;
    const std::string what = fmt::format("report.expect '{}'", e.name);
    // A configuration the sweep plans but has not completed yet gives an open verdict, so that a
    // report of an unfinished sweep still judges the rest; a selector naming nothing planned is a
    // typo and an error.
    if (!has_complete(groups, e.a) || (!e.b.empty() && !has_complete(groups, e.b))) {
      check_planned(spec, e.a, what + " a");
      if (!e.b.empty()) check_planned(spec, e.b, what + " b");
      md += fmt::format("| {} | `{}` | {} | - | 0 | **inconclusive** (no complete runs yet) |\n", e.name, metric,
                        relation_name(e.relation));
      csv += fmt::format("{},{},{},{},{},nan,nan,nan,0,inconclusive\n", quoted(e.name), quoted(metric),
                         relation_name(e.relation), quoted(selector_text(e.a)), quoted(selector_text(e.b)));
      continue;
    }
    const Group& a = select(groups, e.a, what + " a");
    Interval in;
    std::string relation = relation_name(e.relation);
    if (e.b.empty()) {
      std::vector<double> xs;
      for (const Run* r : a.runs) xs.push_back(judged(*r, base_metric, e.minus));
      in = mean_interval(xs);
      relation += fmt::format(" {:.4g}", e.value);
    } else {
      const Group& b = select(groups, e.b, what + " b");
      const auto [xs, ys] = paired_values(a, b, base_metric, e.minus);
      in = paired_interval(xs, ys);
      relation = fmt::format("`{}` {} `{}`", a.label, relation, b.label);
      if (e.relation == Relation::Equal) relation += fmt::format(" (±{:.4g})", e.margin);
    }
    const Verdict v = judge(e.relation, in, spec.report.ascending, e.margin, e.value);
    const std::string observed = e.b.empty() && in.n >= 2
                                     ? fmt::format("{:.4g} [{:.4g}, {:.4g}]", in.mean, in.low, in.high)
                                     : interval_text(in);
    md += fmt::format("| {} | `{}` | {} | {} | {} | **{}** ({}) |\n", e.name, metric,
                      e.b.empty() ? fmt::format("`{}` {}", a.label, relation) : relation, observed, in.n, v.word, v.why);
    csv += fmt::format("{},{},{},{},{},{},{},{},{},{}\n", quoted(e.name), quoted(metric), relation_name(e.relation),
                       quoted(selector_text(e.a)), quoted(selector_text(e.b)), in.mean, in.low, in.high, in.n, v.word);
  }
  write_text_atomic((dir / "expectations.csv").string(), csv);
  return md + "\n";
}

}  // namespace

fs::path write_report(const fs::path& dir, std::ostream& out) {
  const fs::path sweep_copy = dir / "sweep.toml";
  if (!fs::exists(sweep_copy)) fail<FileError>("{}: not a sweep directory (no sweep.toml)", dir.string());
  const SweepSpec spec = parse_sweep(read_text(sweep_copy), sweep_copy.string());
  const std::vector<std::string> axes = axis_keys(spec);
  const std::vector<std::string> group_axes(axes.begin(), axes.end() - 1);  // all but "seed"
  const size_t planned = expand_sweep(spec).size();

  Store store(dir / "results.sqlite");
  gather(dir, store, out);
  store.export_csv(dir / "results.csv", axes);

  // Complete runs into groups, in run order (the expansion order).
  std::vector<Run> runs;
  std::vector<std::pair<int64_t, std::string>> failed;
  for (const Store::Row& row : store.runs()) {
    if (row.status != "complete") {
      failed.emplace_back(row.id, row.point_json);
      continue;
    }
    runs.push_back({row.id, ordered_json::parse(row.point_json),
                    row.config_json.empty() ? json::object() : json::parse(row.config_json), row.metrics});
  }
  // Figures measured outside the sweep join each run as metrics named by their columns.
  std::vector<std::string> unmatched;
  if (spec.report.has_measured) {
    const MeasuredTable table = read_measured_table(spec.report.measured.file);
    for (Run& r : runs) {
      const std::string value = label_of(r, spec.report.measured.key);
      if (const std::vector<double>* row = measured_row(table, value)) {
        for (size_t c = 0; c < table.columns.size(); ++c) r.metrics[table.columns[c]] = (*row)[c];
      } else if (std::find(unmatched.begin(), unmatched.end(), value) == unmatched.end()) {
        unmatched.push_back(value);
      }
    }
  }
  std::vector<Group> groups;
  std::map<std::string, size_t> group_of;
  for (const Run& r : runs) {
    Group g;
    for (const auto& k : group_axes) {
      const std::string v = r.point.contains(k) ? text_of(r.point[k]) : "";
      g.values.push_back(v);
      g.label += (g.label.empty() ? "" : ", ") + k + "=" + v;
      if (r.point.contains(k)) g.point[k] = r.point[k];
    }
    if (g.label.empty()) g.label = spec.experiment;
    auto [it, fresh] = group_of.emplace(g.label, groups.size());
    if (fresh) groups.push_back(std::move(g));
    groups[it->second].runs.push_back(&r);
  }

  // Metric columns: the headline first, then the experiment's own, then the cost figures.
  std::set<std::string> names;
  for (const Run& r : runs)
    for (const auto& [n, v] : r.metrics) names.insert(n);
  const std::set<std::string>& costs = cost_metrics();
  const std::string headline = headline_metric(spec.report, names);
  if (!runs.empty() && !names.count(headline))
    fail<ValueError>("{}: report.metric '{}' is not a metric of any run (metrics: {})", sweep_copy.string(), headline,
                     fmt::join(names, ", "));
  std::vector<std::string> columns = {headline};
  for (const auto& n : names)
    if (n != headline && !costs.count(n)) columns.push_back(n);
  for (const auto& n : costs)
    if (n != headline && names.count(n)) columns.push_back(n);

  auto group_stat = [](const Group& g, const std::string& name) {
    std::vector<double> xs;
    for (const Run* r : g.runs) xs.push_back(lookup(*r, name));
    return stat(xs);
  };
  std::vector<size_t> order(groups.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const double ma = group_stat(groups[a], headline).mean, mb = group_stat(groups[b], headline).mean;
    if (std::isnan(ma) || std::isnan(mb)) return !std::isnan(ma) && std::isnan(mb);
    return spec.report.ascending ? ma < mb : ma > mb;
  });

  std::string md = fmt::format("# Sweep `{}`\n\n", fs::absolute(dir).lexically_normal().filename().string());
  md += fmt::format("Experiment `{}`{}; {} runs planned, {} complete, {} failed or unfinished.\n\n", spec.experiment,
                    spec.preset.empty() ? "" : fmt::format(", preset `{}`", spec.preset), planned, runs.size(),
                    planned - runs.size());
  md += "Axes:\n\n";
  for (const auto* list : {&spec.zip, &spec.grid})
    for (const Axis& a : *list) {
      std::vector<std::string> vs;
      for (const auto& v : a.values) vs.push_back(to_toml_value(v));
      md += fmt::format("- `{}` ({}): {}\n", a.key, list == &spec.zip ? "zip" : "grid", fmt::join(vs, ", "));
    }
  md += fmt::format("- `seed`: {}\n", fmt::join(spec.seeds, ", "));
  for (const auto& a : spec.set) md += fmt::format("- fixed `{}` = {}\n", a.key, to_toml_value(a.value));
  md += "\nThe sweep file is [sweep.toml](sweep.toml); every run's final metrics are in [results.csv](results.csv) "
        "and, with the training curves, in `results.sqlite`.\n\n";
  if (spec.report.has_measured) {
    md += fmt::format("Measured outside the sweep and joined by `{}`: the columns of `{}`.", spec.report.measured.key,
                      spec.report.measured.file);
    if (!unmatched.empty()) md += fmt::format(" No row for: `{}`.", fmt::join(unmatched, "`, `"));
    md += "\n\n";
  }

  md += "## Final metrics\n\n";
  md += fmt::format("Mean ± half-width of its 95% interval over seeds (Student t, n runs), sorted by `{}` ({} is "
                    "better).\n\n",
                    headline, spec.report.ascending ? "lower" : "higher");
  std::string head = "|", rule = "|";
  for (const auto& k : group_axes) head += fmt::format(" {} |", k), rule += "---|";
  head += " n |", rule += "---:|";
  for (const auto& c : columns) head += fmt::format(" {} |", c), rule += "---:|";
  md += head + "\n" + rule + "\n";
  for (size_t gi : order) {
    const Group& g = groups[gi];
    std::string line = "|";
    for (const auto& v : g.values) line += fmt::format(" `{}` |", v);
    line += fmt::format(" {} |", g.runs.size());
    for (const auto& c : columns) line += fmt::format(" {} |", cell(group_stat(g, c)));
    md += line + "\n";
  }
  md += "\n";
  md += comparisons(spec, groups, order, headline, dir);

  fs::create_directories(dir / "plots");
  // Training curves: each group's mean over its seeds at every step any of them logged.
  std::vector<std::string> curve_names = spec.report.curves;
  std::map<int64_t, std::map<std::string, std::vector<std::pair<int64_t, double>>>> curves;
  for (const Run& r : runs) curves[r.id] = store.curves(r.id);
  if (curve_names.empty()) {
    std::set<std::string> all;
    for (const auto& [id, c] : curves)
      for (const auto& [n, pts] : c)
        if (n != "time") all.insert(n);
    curve_names.assign(all.begin(), all.end());
  }
  if (!curve_names.empty() && !runs.empty()) md += "## Training curves\n\nMean over seeds at each step.\n\n";
  for (const auto& name : curve_names) {
    if (runs.empty()) break;
    plot::LineChart chart{name, "step", name, false, false, {}, 760, 480};
    for (size_t gi : order) {
      std::map<int64_t, std::vector<double>> at;
      for (const Run* r : groups[gi].runs)
        if (auto it = curves[r->id].find(name); it != curves[r->id].end())
          for (const auto& [step, v] : it->second) at[step].push_back(v);
      plot::Series s{groups[gi].label, {}, {}};
      for (const auto& [step, vs] : at) s.x.push_back(double(step)), s.y.push_back(stat(vs).mean);
      if (!s.x.empty()) chart.series.push_back(std::move(s));
    }
    if (chart.series.empty()) {
      md += fmt::format("No run logged `{}`.\n\n", name);
      continue;
    }
    const std::string file = "plots/curve_" + file_name(name) + ".svg";
    plot::save_svg((dir / file).string(), chart);
    md += fmt::format("![{}]({})\n\n", name, file);
  }

  // The headline metric against a swept value, one series per configuration of the other axes.
  if (!spec.report.x.empty() && !runs.empty()) {
    const std::string& x = spec.report.x;
    md += fmt::format("## `{}` against `{}`\n\n", headline, x);
    std::map<std::string, plot::Series> series;
    std::vector<std::string> series_order;
    bool numeric = true;
    for (const Group& g : groups) {
      std::string rest;
      for (const auto& k : group_axes)
        if (k != x && g.point.contains(k)) rest += (rest.empty() ? "" : ", ") + k + "=" + text_of(g.point[k]);
      if (rest.empty()) rest = headline;
      if (!g.point.contains(x) || !g.point[x].is_number()) {
        numeric = false;
        break;
      }
      if (!series.count(rest)) series_order.push_back(rest), series[rest].name = rest;
      series[rest].x.push_back(g.point[x].get<double>());
      series[rest].y.push_back(group_stat(g, headline).mean);
    }
    if (!numeric) {
      md += fmt::format("`{}` takes non-numeric values: see the table above.\n\n", x);
    } else {
      plot::LineChart chart{fmt::format("{} against {} (mean over seeds)", headline, x), x, headline, false, false, {}, 760, 480};
      for (const auto& k : series_order) {
        plot::Series s = series[k];
        std::vector<size_t> idx(s.x.size());
        for (size_t i = 0; i < idx.size(); ++i) idx[i] = i;
        std::sort(idx.begin(), idx.end(), [&](size_t a, size_t b) { return s.x[a] < s.x[b]; });
        plot::Series sorted{s.name, {}, {}};
        for (size_t i : idx) sorted.x.push_back(s.x[i]), sorted.y.push_back(s.y[i]);
        chart.series.push_back(std::move(sorted));
      }
      const std::string file = "plots/" + file_name(headline) + "_vs_" + file_name(x) + ".svg";
      plot::save_svg((dir / file).string(), chart);
      md += fmt::format("![{} against {}]({})\n\n", headline, x, file);
    }
  }

  // Accuracy, speed and memory in one picture, one bubble per configuration.
  if (spec.report.has_bubble && !runs.empty()) {
    const auto& b = spec.report.bubble;
    plot::BubbleChart chart{fmt::format("{} against {} (area: {})", b.y, b.x, b.size), b.x, b.y, b.size, false, {}, 760, 480};
    for (size_t gi : order) {
      const Group& g = groups[gi];
      const std::string label = b.label.empty() ? g.label : label_of(*g.runs.front(), b.label);
      chart.bubbles.push_back({label, group_stat(g, b.x).mean, group_stat(g, b.y).mean, group_stat(g, b.size).mean});
    }
    plot::save_svg((dir / "plots/bubble.svg").string(), chart);
    md += fmt::format("## {}, {} and {}\n\nOne bubble per configuration (mean over seeds); its area is proportional to "
                      "`{}`.\n\n![bubble chart](plots/bubble.svg)\n\n",
                      b.y, b.x, b.size, b.size);
  }

  if (!failed.empty()) {
    md += "## Failed runs\n\n";
    for (const auto& [id, point] : failed)
      md += fmt::format("- `{}` {}: see `{}/stdout.txt`\n", run_dir_name(id), point, run_dir_name(id));
    md += "\n";
  }
  const fs::path report = dir / "report.md";
  write_text_atomic(report.string(), md);
  out << fmt::format("wrote {} ({} complete runs in {} configurations)\n", report.string(), runs.size(), groups.size());
  return report;
}

}  // namespace attnlab::runner
