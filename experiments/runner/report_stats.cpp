// Statistics for `attnlab report` (report_parts.hpp): groups over seeds, metric columns, table
// cells, paired differences and declared expectations.
#include <algorithm>
#include <cmath>
#include <limits>
#include <set>

#include "experiments/runner/csv.hpp"
#include "experiments/runner/report_parts.hpp"
#include "experiments/runner/stats.hpp"
#include "tensor/io.hpp"

namespace attnlab::runner::report_detail {
namespace fs = std::filesystem;
using nlohmann::json;
using nlohmann::ordered_json;
namespace {

bool integral(double x) { return std::isfinite(x) && std::abs(x) < 1e15 && x == std::round(x); }

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
double judged(const ReportRun& r, const std::string& metric, const std::string& minus) {
  return minus.empty() ? lookup(r, metric) : lookup(r, metric) - lookup(r, minus);
}

bool has_complete(const std::vector<Group>& groups, const ReportSpec::Selector& sel) {
  return std::any_of(groups.begin(), groups.end(), [&](const Group& g) { return g.matches(sel); });
}

// ValueError naming `what` when no planned run of the sweep has the selector's values.
void check_planned(const ReportInput& in, const ReportSpec::Selector& sel, const std::string& what) {
  if (!in.sweep) fail<ValueError>("{} = {{{}}} names no configuration of the runs", what, selector_text(sel));
  for (const Point& p : expand_sweep(*in.sweep)) {
    bool all = true;
    for (const auto& [k, v] : sel) {
      auto it = std::find_if(p.begin(), p.end(), [&, &k = k](const auto& kv) { return kv.first == k; });
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
  for (const ReportRun* r : b.runs) of_b[r->point.value("seed", int64_t(0))] = judged(*r, metric, minus);
  std::vector<double> xs, ys;
  for (const ReportRun* r : a.runs)
    if (auto it = of_b.find(r->point.value("seed", int64_t(0))); it != of_b.end())
      xs.push_back(judged(*r, metric, minus)), ys.push_back(it->second);
  return {xs, ys};
}

std::string interval_text(const Interval& in) {
  if (in.n < 2) return in.n == 1 ? fmt::format("{:.4g} (one pair)", in.mean) : "-";
  return fmt::format("{:+.4g} [{:+.4g}, {:+.4g}]", in.mean, in.low, in.high);
}

}  // namespace

ReportInput with_headline(ReportInput in) {
  std::set<std::string> names;
  for (const auto& run : in.runs)
    for (const auto& [name, value] : run.metrics) names.insert(name);
  in.spec.metric = headline_metric(in.spec, names);
  if (!in.spec.sort_given) in.spec.ascending = lower_is_better(in.spec.metric);
  return in;
}

std::string text_of(const json& v) { return v.is_string() ? v.get<std::string>() : v.dump(); }

double lookup(const ReportRun& r, const std::string& name) {
  if (auto it = r.metrics.find(name); it != r.metrics.end()) return it->second;
  if (r.point.contains(name) && r.point[name].is_number()) return r.point[name].get<double>();
  if (r.config.contains(name) && r.config[name].is_number()) return r.config[name].get<double>();
  return std::numeric_limits<double>::quiet_NaN();
}

std::string label_of(const ReportRun& r, const std::string& key) {
  if (r.point.contains(key)) return text_of(r.point[key]);
  if (r.config.contains(key)) return text_of(r.config[key]);
  return "";
}

bool Group::matches(const ReportSpec::Selector& sel) const {
  for (const auto& [k, v] : sel)
    if (!point.contains(k) || !same_value(point[k], v)) return false;
  return true;
}

std::vector<Group> make_groups(const ReportInput& in) {
  std::vector<Group> groups;
  std::map<std::string, size_t> group_of;
  for (const ReportRun& r : in.runs) {
    Group g;
    for (const auto& k : in.group_keys) {
      const std::string v = r.point.contains(k) ? text_of(r.point[k]) : "";
      g.values.push_back(v);
      g.label += (g.label.empty() ? "" : ", ") + k + "=" + v;
      if (r.point.contains(k)) g.point[k] = r.point[k];
    }
    if (g.label.empty()) g.label = in.sweep ? in.sweep->experiment : label_of(r, "experiment");
    auto [it, fresh] = group_of.emplace(g.label, groups.size());
    if (fresh) groups.push_back(std::move(g));
    groups[it->second].runs.push_back(&r);
  }
  return groups;
}

std::vector<std::string> metric_columns(const ReportInput& in, const std::string& where) {
  std::set<std::string> names;
  for (const ReportRun& r : in.runs)
    for (const auto& [n, v] : r.metrics) names.insert(n);
  const std::set<std::string>& costs = cost_metrics();
  const std::string headline = headline_metric(in.spec, names);
  if (!in.runs.empty() && !names.count(headline))
    fail<ValueError>("{}: report.metric '{}' is not a metric of any run (metrics: {})", where, headline,
                     fmt::join(names, ", "));
  std::vector<std::string> columns = {headline};
  for (const auto& n : names)
    if (n != headline && !costs.count(n)) columns.push_back(n);
  for (const auto& n : costs)
    if (n != headline && names.count(n)) columns.push_back(n);
  return columns;
}

std::vector<double> values(const Group& g, const std::string& name) {
  std::vector<double> xs;
  for (const ReportRun* r : g.runs) xs.push_back(lookup(*r, name));
  return xs;
}

double group_mean(const Group& g, const std::string& name) { return mean_interval(values(g, name)).mean; }

std::vector<size_t> rank(const std::vector<Group>& groups, const std::string& headline, bool ascending) {
  std::vector<double> means;
  for (const Group& g : groups) means.push_back(group_mean(g, headline));
  std::vector<size_t> order(groups.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const double ma = means[a], mb = means[b];
    if (std::isnan(ma) || std::isnan(mb)) return !std::isnan(ma) && std::isnan(mb);
    return ascending ? ma < mb : ma > mb;
  });
  return order;
}

std::string number_text(double x) {
  if (integral(x)) return fmt::format("{:.0f}", x);
  if (std::isfinite(x) && std::abs(x) >= 1e4 && std::abs(x) < 1e15) return fmt::format("{:.0f}", x);
  return fmt::format("{:.4g}", x);
}

std::string cell(const std::vector<double>& all) {
  std::vector<double> xs;
  std::copy_if(all.begin(), all.end(), std::back_inserter(xs), [](double x) { return std::isfinite(x); });
  const Interval s = mean_interval(xs);
  if (s.n == 0) return "-";
  const bool counts = std::all_of(xs.begin(), xs.end(), integral);
  const bool agree = std::adjacent_find(xs.begin(), xs.end(), std::not_equal_to<>()) == xs.end();
  if (s.n == 1 || (counts && agree)) return number_text(s.mean);
  const double h = s.half_width();
  // Two significant digits of the half-width, never in exponent form for widths of 10 or more.
  return fmt::format("{} ± {}", number_text(s.mean), h >= 10 ? fmt::format("{:.0f}", h) : fmt::format("{:.2g}", h));
}

bool dense_at_n(const Group& g) {
  const std::vector<double> d = values(g, "density");
  const Interval in = mean_interval(d);
  return in.n > 0 && in.mean >= kDenseAtN;
}

JudgedExpectation judge_expectation(const ReportInput& in, const std::vector<Group>& groups,
                                    const ReportSpec::Expectation& e, const std::string& headline) {
  JudgedExpectation j;
  j.metric = (e.metric.empty() ? headline : e.metric) + (e.minus.empty() ? "" : " - " + e.minus);
  const std::string& base_metric = e.metric.empty() ? headline : e.metric;
  const std::string what = fmt::format("report.expect '{}'", e.name);
  // A configuration the sweep plans but has not completed yet gives an open verdict, so that a
  // report of an unfinished sweep still judges the rest; a selector naming nothing planned is a
  // typo and an error.
  if (!has_complete(groups, e.a) || (!e.b.empty() && !has_complete(groups, e.b))) {
    check_planned(in, e.a, what + " a");
    if (!e.b.empty()) check_planned(in, e.b, what + " b");
    j.pending = true;
    j.interval = {std::nan(""), std::nan(""), std::nan(""), std::nan(""), 0};
    j.verdict = {"inconclusive", "no complete runs yet"};
    j.relation = relation_name(e.relation);
    return j;
  }
  const Group& a = select(groups, e.a, what + " a");
  if (dense_at_n(a)) j.dense.push_back(a.label);
  std::string relation = relation_name(e.relation);
  if (e.b.empty()) {
    std::vector<double> xs;
    for (const ReportRun* r : a.runs) xs.push_back(judged(*r, base_metric, e.minus));
    j.interval = mean_interval(xs);
    j.relation = fmt::format("`{}` {} {:.4g}", a.label, relation, e.value);
  } else {
    const Group& b = select(groups, e.b, what + " b");
    if (dense_at_n(b)) j.dense.push_back(b.label);
    const auto [xs, ys] = paired_values(a, b, base_metric, e.minus);
    j.interval = paired_interval(xs, ys);
    j.relation = fmt::format("`{}` {} `{}`", a.label, relation, b.label);
    if (e.relation == Relation::Equal) j.relation += fmt::format(" (±{:.4g})", e.margin);
  }
  j.verdict = judge(e.relation, j.interval, in.spec.ascending, e.margin, e.value);
  const Interval& iv = j.interval;
  j.observed = e.b.empty() && iv.n >= 2 ? fmt::format("{:.4g} [{:.4g}, {:.4g}]", iv.mean, iv.low, iv.high)
                                        : interval_text(iv);
  return j;
}

// The paired differences against report.baseline and the verdict of each [[report.expect]], as
// report.md sections; the verdicts also go to expectations.csv.
std::string comparisons(const ReportInput& in, const std::vector<Group>& groups, const std::vector<size_t>& order,
                        const std::string& headline, const fs::path& dir) {
  const ReportSpec& report = in.spec;
  std::string md;
  if (!report.baseline.empty() && !groups.empty()) {
    const Group& base = select(groups, report.baseline, "report.baseline");
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
      md += fmt::format("| `{}`{} | {} | {} |\n", g.label, dense_at_n(g) ? " (dense at this N)" : "", d.n,
                        interval_text(d));
    }
    md += "\n";
  }
  if (report.expect.empty()) return md;
  md += "## Expectations\n\nDeclared in the sweep file before the runs; judged on 95% intervals (Student t over seeds; "
        "paired by seed where two configurations are compared). holds: the whole interval is on the expected side; "
        "contradicted: the whole interval is on the other side; inconclusive: the interval reaches both.\n\n";
  md += "| expectation | metric | relation | observed [95% interval] | pairs | verdict |\n|---|---|---|---|---:|---|\n";
  std::string csv = "name,metric,relation,a,b,observed,ci_low,ci_high,n,verdict\n";
  for (const auto& e : report.expect) {
    const JudgedExpectation j = judge_expectation(in, groups, e, headline);
    const std::string dense = j.dense.empty() ? "" : fmt::format("; dense at this N: `{}`", fmt::join(j.dense, "`, `"));
    if (j.pending) {
      md += fmt::format("| {} | `{}` | {} | - | 0 | **inconclusive** (no complete runs yet) |\n", e.name, j.metric,
                        relation_name(e.relation));
      csv += fmt::format("{},{},{},{},{},nan,nan,nan,0,inconclusive\n", csv_field(e.name), csv_field(j.metric),
                         relation_name(e.relation), csv_field(selector_text(e.a)), csv_field(selector_text(e.b)));
      continue;
    }
    md += fmt::format("| {} | `{}` | {} | {} | {} | **{}** ({}{}) |\n", e.name, j.metric, j.relation, j.observed,
                      j.interval.n, j.verdict.word, j.verdict.why, dense);
    csv += fmt::format("{},{},{},{},{},{},{},{},{},{}\n", csv_field(e.name), csv_field(j.metric), relation_name(e.relation),
                       csv_field(selector_text(e.a)), csv_field(selector_text(e.b)), j.interval.mean, j.interval.low,
                       j.interval.high, j.interval.n, j.verdict.word);
  }
  write_text_atomic((dir / "expectations.csv").string(), csv);
  return md + "\n";
}

}  // namespace attnlab::runner::report_detail
