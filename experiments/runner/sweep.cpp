// Sweep files: parsing and expansion into runs (experiments/runner/sweep.hpp). Resolving each
// run's config against the experiment registry, and running the child processes, is
// sweep_run.cpp, so that `attnlab report` reads sweep files without the registry.
#include "experiments/runner/sweep.hpp"
#include "experiments/runner/file_bounds.hpp"
#include "tensor/io.hpp"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>
#include <toml++/toml.h>


namespace attnlab::runner {
namespace {

int line_of(const toml::node& n) { return static_cast<int>(n.source().begin.line); }

// A scalar TOML value as a config value; SweepError for arrays, tables and dates.
Value to_value(const toml::node& n, const std::string& path, const std::string& key) {
  if (auto v = n.as_integer()) return v->get();
  if (auto v = n.as_floating_point()) return v->get();
  if (auto v = n.as_boolean()) return v->get();
  if (auto v = n.as_string()) return v->get();
  fail<SweepError>("{}:{}: '{}' must be an integer, float, bool or string, got a {}", path, line_of(n), key,
                   toml::impl::node_type_friendly_names[static_cast<int>(n.type())]);
}

// Leaves of a table with dotted keys: `model.attention = ...`, `"model.attention" = ...` and
// `[grid.model] attention = ...` all give "model.attention". Sorted by line, i.e. file order
// (toml::table itself keeps its keys sorted by name).
void flatten(const toml::table& t, const std::string& prefix, std::vector<std::pair<std::string, const toml::node*>>& out) {
  for (auto&& [k, v] : t) {
    const std::string key = prefix.empty() ? std::string(k.str()) : prefix + "." + std::string(k.str());
    if (auto sub = v.as_table())
      flatten(*sub, key, out);
    else
      out.emplace_back(key, &v);
  }
}

std::vector<std::pair<std::string, const toml::node*>> leaves(const toml::table& t) {
  std::vector<std::pair<std::string, const toml::node*>> out;
  flatten(t, "", out);
  std::stable_sort(out.begin(), out.end(), [](const auto& a, const auto& b) {
    const auto& sa = a.second->source().begin;
    const auto& sb = b.second->source().begin;
    return sa.line != sb.line ? sa.line < sb.line : sa.column < sb.column;
  });
  return out;
}

const toml::table& table_at(const toml::node& n, const std::string& path, const std::string& name) {
  if (auto t = n.as_table()) return *t;
  fail<SweepError>("{}:{}: '{}' must be a table", path, line_of(n), name);
}

std::vector<Axis> read_axes(const toml::table& t, const std::string& path, const std::string& section) {
  std::vector<Axis> axes;
  for (auto& [key, node] : leaves(t)) {
    const auto* arr = node->as_array();
    const int line = line_of(*node);
    if (!arr) fail<SweepError>("{}:{}: [{}] '{}' must be a list of values", path, line, section, key);
    if (arr->empty()) fail<SweepError>("{}:{}: [{}] '{}' is an empty list (give at least one value)", path, line, section, key);
    if (key == "seed")
      fail<SweepError>("{}:{}: [{}] 'seed' is swept by the top-level `seeds = [...]` list instead", path, line, section);
    Axis a{key, {}, line};
    for (const toml::node& v : *arr) {
      Value value = to_value(v, path, section + "." + key);
      // A repeated grid value would run the same config twice; zip lists may repeat a value
      // (their runs differ in the other zipped keys).
      if (section == "grid" && std::find(a.values.begin(), a.values.end(), value) != a.values.end())
        fail<SweepError>("{}:{}: [grid] '{}' lists {} twice (each value makes its own runs)", path, line_of(v), key,
                         to_toml_value(value));
      a.values.push_back(std::move(value));
    }
    axes.push_back(std::move(a));
  }
  return axes;
}

std::string string_at(const toml::node& n, const std::string& path, const std::string& name) {
  if (auto s = n.as_string()) return s->get();
  fail<SweepError>("{}:{}: '{}' must be a string", path, line_of(n), name);
}

ReportSpec::Selector read_selector(const toml::node& n, const std::string& path, const std::string& name) {
  ReportSpec::Selector sel;
  for (auto& [key, node] : leaves(table_at(n, path, name)))
    sel.emplace_back(key, to_value(*node, path, name + "." + key));
  return sel;
}

double number_at(const toml::node& n, const std::string& path, const std::string& name) {
  if (auto v = n.as_floating_point(); v && std::isfinite(v->get())) return v->get();
  if (auto v = n.as_integer()) return double(v->get());
  fail<SweepError>("{}:{}: '{}' must be a finite number", path, line_of(n), name);
}

ReportSpec::Expectation read_expectation(const toml::node& n, const std::string& path, size_t index) {
  const std::string where = fmt::format("report.expect[{}]", index);
  ReportSpec::Expectation e;
  e.line = line_of(n);
  bool has_relation = false, has_margin = false, has_value = false;
  for (auto&& [k, v] : table_at(n, path, where)) {
    const std::string key(k.str());
    if (key == "name") {
      e.name = string_at(v, path, where + ".name");
    } else if (key == "metric") {
      e.metric = string_at(v, path, where + ".metric");
    } else if (key == "minus") {
      e.minus = string_at(v, path, where + ".minus");
    } else if (key == "a") {
      e.a = read_selector(v, path, where + ".a");
    } else if (key == "b") {
      e.b = read_selector(v, path, where + ".b");
    } else if (key == "relation") {
      try {
        e.relation = relation_from(string_at(v, path, where + ".relation"));
      } catch (const ValueError& err) {
        fail<SweepError>("{}:{}: {}.{}", path, line_of(v), where, err.what());
      }
      has_relation = true;
    } else if (key == "margin") {
      e.margin = number_at(v, path, where + ".margin");
      if (e.margin < 0) fail<SweepError>("{}:{}: {}.margin must be >= 0, got {}", path, line_of(v), where, e.margin);
      has_margin = true;
    } else if (key == "value") {
      e.value = number_at(v, path, where + ".value");
      has_value = true;
    } else {
      fail<SweepError>("{}:{}: unknown key '{}.{}' (known: name, metric, minus, a, b, relation, margin, value)", path,
                       line_of(v), where, key);
    }
  }
  if (e.name.empty()) fail<SweepError>("{}:{}: {} needs a name (the claim in words)", path, e.line, where);
  if (!has_relation) fail<SweepError>("{}:{}: {} '{}' needs a relation (better, equal, below or above)", path, e.line, where, e.name);
  // An empty or missing `a` names the sweep's only configuration (an error at report time when there are several).
  const bool pair = e.relation == Relation::Better || e.relation == Relation::Equal;
  if (pair && e.b.empty())
    fail<SweepError>("{}:{}: {} '{}': relation '{}' compares two configurations and needs b = {{ ... }}", path, e.line,
                     where, e.name, relation_name(e.relation));
  if (!pair && !e.b.empty())
    fail<SweepError>("{}:{}: {} '{}': relation '{}' compares a with a value and takes no b", path, e.line, where, e.name,
                     relation_name(e.relation));
  if (!pair && !has_value)
    fail<SweepError>("{}:{}: {} '{}': relation '{}' needs value = NUMBER", path, e.line, where, e.name,
                     relation_name(e.relation));
  if (e.relation == Relation::Equal && !has_margin)
    fail<SweepError>("{}:{}: {} '{}': relation 'equal' needs margin = NUMBER (the largest difference counted as equal)",
                     path, e.line, where, e.name);
  return e;
}

ReportSpec read_report(const toml::table& t, const std::string& path) {
  ReportSpec r;
  for (auto&& [k, v] : t) {
    const std::string key(k.str());
    if (key == "metric") {
      r.metric = string_at(v, path, "report.metric");
    } else if (key == "x") {
      r.x = string_at(v, path, "report.x");
    } else if (key == "sort") {
      const std::string s = string_at(v, path, "report.sort");
      if (s != "asc" && s != "desc")
        fail<SweepError>("{}:{}: report.sort must be \"asc\" or \"desc\", got \"{}\"", path, line_of(v), s);
      r.ascending = s == "asc";
      r.sort_given = true;
    } else if (key == "curves") {
      const auto* arr = v.as_array();
      if (!arr) fail<SweepError>("{}:{}: report.curves must be a list of metric names", path, line_of(v));
      for (const toml::node& c : *arr) r.curves.push_back(string_at(c, path, "report.curves"));
    } else if (key == "bubble") {
      const toml::table& b = table_at(v, path, "report.bubble");
      r.has_bubble = true;
      for (auto&& [bk, bv] : b) {
        const std::string name(bk.str());
        std::string* slot = name == "x" ? &r.bubble.x : name == "y" ? &r.bubble.y : name == "size" ? &r.bubble.size
                          : name == "label" ? &r.bubble.label : nullptr;
        if (!slot)
          fail<SweepError>("{}:{}: unknown key 'report.bubble.{}' (known: x, y, size, label)", path, line_of(bv), name);
        *slot = string_at(bv, path, "report.bubble." + name);
      }
      if (r.bubble.x.empty() || r.bubble.y.empty() || r.bubble.size.empty())
        fail<SweepError>("{}:{}: report.bubble needs x, y and size", path, line_of(v));
    } else if (key == "measured") {
      const toml::table& m = table_at(v, path, "report.measured");
      r.has_measured = true;
      for (auto&& [mk, mv] : m) {
        const std::string name(mk.str());
        std::string* slot = name == "file" ? &r.measured.file : name == "key" ? &r.measured.key : nullptr;
        if (!slot) fail<SweepError>("{}:{}: unknown key 'report.measured.{}' (known: file, key)", path, line_of(mv), name);
        *slot = string_at(mv, path, "report.measured." + name);
      }
      if (r.measured.file.empty() || r.measured.key.empty())
        fail<SweepError>("{}:{}: report.measured needs file and key", path, line_of(v));
    } else if (key == "baseline") {
      r.baseline = read_selector(v, path, "report.baseline");
    } else if (key == "expect") {
      const auto* arr = v.as_array();
      if (!arr) fail<SweepError>("{}:{}: report.expect must be a list of tables ([[report.expect]])", path, line_of(v));
      for (size_t i = 0; i < arr->size(); ++i) r.expect.push_back(read_expectation((*arr)[i], path, i));
    } else {
      fail<SweepError>("{}:{}: unknown key 'report.{}' (known: metric, sort, x, curves, bubble, measured, baseline, expect)", path,
                       line_of(v), key);
    }
  }
  return r;
}

}  // namespace

SweepSpec parse_sweep(const std::string& text, const std::string& path) {
  toml::table root;
  try {
    root = toml::parse(text, path);
  } catch (const toml::parse_error& e) {
    fail<SweepError>("{}:{}: {}", path, e.source().begin.line, e.description());
  }
  SweepSpec s;
  s.path = path;
  s.text = text;
  bool has_experiment = false;
  for (auto&& [k, v] : root) {
    const std::string key(k.str());
    if (key == "experiment") {
      s.experiment = string_at(v, path, key);
      has_experiment = true;
    } else if (key == "preset") {
      s.preset = string_at(v, path, key);
    } else if (key == "workers") {
      const auto* w = v.as_integer();
      if (!w || w->get() < 1 || w->get() > 1024)
        fail<SweepError>("{}:{}: 'workers' must be an integer in [1, 1024]", path, line_of(v));
      s.workers = static_cast<int>(w->get());
    } else if (key == "seeds") {
      const auto* arr = v.as_array();
      if (!arr) fail<SweepError>("{}:{}: 'seeds' must be a list of integers", path, line_of(v));
      if (arr->empty()) fail<SweepError>("{}:{}: 'seeds' is an empty list (give at least one seed)", path, line_of(v));
      s.seeds.clear();
      for (const toml::node& n : *arr) {
        const auto* i = n.as_integer();
        if (!i) fail<SweepError>("{}:{}: 'seeds' must be a list of integers", path, line_of(n));
        if (std::find(s.seeds.begin(), s.seeds.end(), i->get()) != s.seeds.end())
          fail<SweepError>("{}:{}: 'seeds' lists seed {} twice (it would run the same runs twice)", path, line_of(n),
                           i->get());
        s.seeds.push_back(i->get());
      }
      s.seeds_line = line_of(v);
    } else if (key == "set") {
      for (auto& [sk, node] : leaves(table_at(v, path, key)))
        s.set.push_back({sk, to_value(*node, path, "set." + sk), line_of(*node)});
    } else if (key == "grid") {
      s.grid = read_axes(table_at(v, path, key), path, "grid");
    } else if (key == "zip") {
      s.zip = read_axes(table_at(v, path, key), path, "zip");
    } else if (key == "report") {
      s.report = read_report(table_at(v, path, key), path);
    } else {
      fail<SweepError>("{}:{}: unknown top-level key '{}' (known: experiment, preset, workers, seeds, set, grid, zip, report)",
                       path, line_of(v), key);
    }
  }
  if (!has_experiment) fail<SweepError>("{}: missing `experiment = \"NAME\"`", path);
  // A key may be varied or set in one place only: two sources would make the run's value depend
  // on an order the reader cannot see.
  std::map<std::string, std::string> where;
  auto claim = [&](const std::string& key, int line, const std::string& section) {
    auto [it, fresh] = where.emplace(key, fmt::format("[{}] (line {})", section, line));
    if (!fresh) fail<SweepError>("{}:{}: '{}' is in [{}] and in {}: give it in one place", path, line, key, section, it->second);
  };
  for (const auto& a : s.grid) claim(a.key, a.line, "grid");
  for (const auto& a : s.zip) claim(a.key, a.line, "zip");
  for (const auto& a : s.set) claim(a.key, a.line, "set");
  for (const auto& a : s.zip)
    if (a.values.size() != s.zip.front().values.size())
      fail<SweepError>("{}:{}: [zip] lists must have equal lengths: '{}' has {} values, '{}' has {}", path, a.line,
                       a.key, a.values.size(), s.zip.front().key, s.zip.front().values.size());
  size_t runs = s.seeds.size() * (s.zip.empty() ? 1 : s.zip.front().values.size());
  for (const auto& a : s.grid) runs = runs > kMaxSweepRuns ? runs : runs * a.values.size();
  if (runs > kMaxSweepRuns)
    fail<SweepError>("{}: the sweep names more than {} runs (seeds x [zip] length x every [grid] list's length); "
                     "split it into several sweep files",
                     path, kMaxSweepRuns);
  if (s.report.x.size()) {
    const auto keys = axis_keys(s);
    if (std::find(keys.begin(), keys.end(), s.report.x) == keys.end())
      fail<SweepError>("{}: report.x = \"{}\" is not a swept key (swept: {})", path, s.report.x, fmt::join(keys, ", "));
  }
  if (s.report.has_measured) {
    const auto keys = axis_keys(s);
    if (s.report.measured.key == "seed" || std::find(keys.begin(), keys.end(), s.report.measured.key) == keys.end())
      fail<SweepError>("{}: report.measured.key = \"{}\" is not a swept key (swept: {})", path, s.report.measured.key,
                       fmt::join(std::vector<std::string>(keys.begin(), keys.end() - 1), ", "));
  }
  // Selectors name configurations, so their keys must be swept (not the seed: pairs run over it).
  auto check_selector = [&](const ReportSpec::Selector& sel, const std::string& what) {
    const auto keys = axis_keys(s);
    for (const auto& [key, value] : sel)
      if (key == "seed" || std::find(keys.begin(), keys.end(), key) == keys.end())
        fail<SweepError>("{}: {} names '{}', which is not a swept key (swept: {})", path, what, key,
                         fmt::join(std::vector<std::string>(keys.begin(), keys.end() - 1), ", "));
  };
  check_selector(s.report.baseline, "report.baseline");
  for (const auto& e : s.report.expect) {
    check_selector(e.a, fmt::format("report.expect '{}' a", e.name));
    check_selector(e.b, fmt::format("report.expect '{}' b", e.name));
  }
  return s;
}

SweepSpec load_sweep(const std::string& path) {
  return parse_sweep(read_text(path, kConfigFileBound), path);
}

std::vector<std::string> axis_keys(const SweepSpec& spec) {
  std::vector<std::string> keys;
  for (const auto& a : spec.zip) keys.push_back(a.key);
  for (const auto& a : spec.grid) keys.push_back(a.key);
  keys.push_back("seed");
  return keys;
}

std::vector<Point> expand_sweep(const SweepSpec& spec) {
  // Mixed-radix counting: digit 0 is the zip position (slowest), then one digit per grid key,
  // then the seed (fastest).
  std::vector<size_t> radix;
  radix.push_back(spec.zip.empty() ? 1 : spec.zip.front().values.size());
  for (const auto& a : spec.grid) radix.push_back(a.values.size());
  radix.push_back(spec.seeds.size());
  size_t total = 1;
  for (size_t r : radix) total *= r;
  std::vector<Point> points;
  points.reserve(total);
  std::vector<size_t> digit(radix.size(), 0);
  for (size_t n = 0; n < total; ++n) {
    Point p;
    for (const auto& a : spec.zip) p.emplace_back(a.key, a.values[digit[0]]);
    for (size_t g = 0; g < spec.grid.size(); ++g) p.emplace_back(spec.grid[g].key, spec.grid[g].values[digit[g + 1]]);
    p.emplace_back("seed", spec.seeds[digit.back()]);
    points.push_back(std::move(p));
    for (size_t d = radix.size(); d-- > 0;) {
      if (++digit[d] < radix[d]) break;
      digit[d] = 0;
    }
  }
  return points;
}

std::string point_to_json(const Point& point) {
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  for (const auto& [k, v] : point) std::visit([&, &k = k](const auto& x) { j[k] = x; }, v);
  return j.dump();
}

std::string point_label(const Point& point) {
  std::string s;
  for (const auto& [k, v] : point) {
    if (!s.empty()) s += ", ";
    s += k + "=" + (std::holds_alternative<std::string>(v) ? std::get<std::string>(v) : to_toml_value(v));
  }
  return s;
}

std::vector<std::string> run_arguments(const SweepSpec& spec, const Point& point, const std::filesystem::path& run_dir) {
  std::vector<std::string> args = {"run", spec.experiment, "--run-dir", run_dir.string()};
  if (!spec.preset.empty()) args.insert(args.end(), {"--preset", spec.preset});
  for (const auto& a : spec.set) args.insert(args.end(), {"--set", a.key + "=" + to_toml_value(a.value)});
  for (const auto& [k, v] : point) args.insert(args.end(), {"--set", k + "=" + to_toml_value(v)});
  return args;
}

const std::set<std::string>& cost_metrics() {
  static const std::set<std::string> costs = {"density", "peak_rss_mb", "seconds", "steps_per_s"};
  return costs;
}

std::string headline_metric(const ReportSpec& report, const std::set<std::string>& metrics) {
  if (!report.metric.empty()) return report.metric;
  for (const char* prefix : {"val_", "test_"})
    for (const auto& name : metrics)
      if (name.rfind(prefix, 0) == 0) return name;
  for (const auto& name : metrics)
    if (!cost_metrics().count(name) && name != "params" && name.rfind("train_", 0) != 0) return name;
  for (const auto& name : metrics)
    if (!cost_metrics().count(name)) return name;
  return "";
}

bool lower_is_better(const std::string& metric) {
  for (const char* word : {"loss", "bpc", "ppl", "perplexity", "error"})
    if (metric.find(word) != std::string::npos) return true;
  return false;
}

std::string format_duration(double seconds) {
  if (seconds < 90) return fmt::format("{:.0f} s", seconds);
  if (seconds < 90 * 60) return fmt::format("{:.1f} min", seconds / 60);
  return fmt::format("{:.1f} h", seconds / 3600);
}

std::string done_line(const RunDone& d) {
  std::string metric;
  if (!d.metric.empty()) {
    auto it = d.metrics.find(d.metric);
    metric = it == d.metrics.end() ? fmt::format(": {} missing", d.metric) : fmt::format(": {} {:.4g}", d.metric, it->second);
  }
  const std::string eta =
      d.left > 0 ? fmt::format(", ETA {}", format_duration(d.mean_seconds * double(d.left) / std::max(1, d.workers))) : "";
  return fmt::format("done  {} in {:.1f} s{} ({}/{} to go{})", d.run, d.seconds, metric, d.left, d.total, eta);
}

std::string run_dir_name(int64_t index) { return fmt::format("runs/{:04d}", index); }

std::filesystem::path default_sweep_dir(const std::string& sweep_file) {
  return std::filesystem::path("sweeps") / std::filesystem::path(sweep_file).stem();
}

}  // namespace attnlab::runner
