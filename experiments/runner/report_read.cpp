// Reading for `attnlab report` (report_parts.hpp): a sweep directory through its results store,
// or ad-hoc run directories directly.
#include <algorithm>
#include <set>

#include "experiments/runner/csv.hpp"
#include "experiments/runner/measured.hpp"
#include "experiments/runner/report_parts.hpp"
#include "experiments/runner/store.hpp"
#include "tensor/io.hpp"
#include "tensor/option_string.hpp"
#include "experiments/runner/file_bounds.hpp"

namespace attnlab::runner::report_detail {
namespace fs = std::filesystem;
using nlohmann::json;
using nlohmann::ordered_json;
namespace {

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
      // Run directories are named by their number (run_dir_name); anything else is not one.
      const std::optional<int64_t> parsed = parse_integer(name);
      if (!parsed || *parsed < 0 || !std::all_of(name.begin(), name.end(), ::isdigit)) continue;
      const int64_t id = *parsed;
      if (fs::exists(e.path() / "summary.json") && !std::binary_search(stored.begin(), stored.end(), id))
        missing.push_back(read_run_dir(id, e.path()));
    }
  store.put(missing);
  if (!missing.empty()) out << fmt::format("added {} complete run(s) missing from the database\n", missing.size());
}

// Figures measured outside the sweep join each run as metrics named by their columns; returns
// the key values without a row.
std::vector<std::string> join_measured(const ReportSpec::Measured& m, std::vector<ReportRun>& runs) {
  const MeasuredTable table = read_measured_table(m.file);
  std::vector<std::string> unmatched;
  for (ReportRun& r : runs) {
    const std::string value = label_of(r, m.key);
    if (const std::vector<double>* row = measured_row(table, value)) {
      for (size_t c = 0; c < table.columns.size(); ++c) r.metrics[table.columns[c]] = (*row)[c];
    } else if (std::find(unmatched.begin(), unmatched.end(), value) == unmatched.end()) {
      unmatched.push_back(value);
    }
  }
  return unmatched;
}

std::string sweep_intro(const SweepSpec& spec, size_t planned, size_t complete, const std::vector<std::string>& unmatched) {
  std::string md = fmt::format("Experiment `{}`{}; {} runs planned, {} complete, {} failed or unfinished.\n\n",
                               spec.experiment, spec.preset.empty() ? "" : fmt::format(", preset `{}`", spec.preset),
                               planned, complete, planned - complete);
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
  return md;
}

// The experiment a run directory's summary names, "" when it names none (or not as a string).
std::string experiment_of(const fs::path& dir) {
  const json s = json::parse(read_text((dir / "summary.json").string(), kRecordFileBound), nullptr, false);
  return s.is_object() && s.contains("experiment") && s["experiment"].is_string() ? s["experiment"].get<std::string>()
                                                                                  : "";
}

// The config keys (and "experiment") whose values are not the same in every run, seed aside.
std::vector<std::string> differing_keys(const std::vector<json>& configs) {
  std::vector<std::string> keys;
  std::set<std::string> seen;
  for (const json& c : configs)
    for (auto& [k, v] : c.items())
      if (k != "seed" && seen.insert(k).second) keys.push_back(k);
  std::vector<std::string> out;
  for (const std::string& k : keys) {
    std::set<std::string> texts;
    for (const json& c : configs) texts.insert(c.contains(k) ? c[k].dump() : "(absent)");
    if (texts.size() > 1) out.push_back(k);
  }
  return out;
}

// A point value as results.csv writes it (Store::export_csv): strings bare, others as JSON.
std::string csv_text(const json& v) { return v.is_string() ? v.get<std::string>() : v.dump(); }

}  // namespace

ReportInput read_results_csv(const fs::path& sweep_copy, const fs::path& results_csv, const fs::path& root) {
  ReportInput in;
  in.sweep = parse_sweep(read_text(sweep_copy.string(), kConfigFileBound), sweep_copy.string());
  in.spec = in.sweep->report;
  const std::vector<std::string> axes = axis_keys(*in.sweep);
  in.group_keys.assign(axes.begin(), axes.end() - 1);
  const std::vector<Point> points = numbered_points(*in.sweep, sweep_copy);
  const std::string path = results_csv.string();
  const auto records = csv_records(read_text(path, kTableFileBound), path);
  if (records.empty()) fail<ValueError>("{}: empty (expected the header id,status,{})", path, fmt::join(axes, ","));
  const std::vector<std::string>& header = records[0].second;
  if (header.size() < 2 + axes.size() || header[0] != "id" || header[1] != "status" ||
      !std::equal(axes.begin(), axes.end(), header.begin() + 2))
    fail<ValueError>("{}:1: header '{}' does not start with id,status,{} (the axes of {})", path, fmt::join(header, ","),
                     fmt::join(axes, ","), sweep_copy.string());
  for (size_t r = 1; r < records.size(); ++r) {
    const auto& [line, f] = records[r];
    if (f.size() != header.size())
      fail<ValueError>("{}:{}: {} fields, expected {} (the header's)", path, line, f.size(), header.size());
    const std::optional<int64_t> id = parse_integer(f[0]);
    if (!id || *id < 0 || size_t(*id) >= points.size())
      fail<ValueError>("{}:{}: id '{}' is not a run of {} (0 ... {})", path, line, f[0], sweep_copy.string(),
                       points.size() - 1);
    // The run's point, typed as the sweep file types it; the CSV's axis cells must agree with it.
    const ordered_json point = ordered_json::parse(point_to_json(points[*id]));
    for (size_t a = 0; a < axes.size(); ++a)
      if (csv_text(point[axes[a]]) != f[2 + a])
        fail<ValueError>("{}:{}: {} = '{}', but run {} of {} has {}", path, line, axes[a], f[2 + a], *id,
                         sweep_copy.string(), csv_text(point[axes[a]]));
    if (f[1] != "complete") {
      in.failed.emplace_back(run_dir_name(*id), point.dump());
      continue;
    }
    ReportRun run{*id, run_dir_name(*id), point, json::object(), {}, {}};
    for (size_t c = 2 + axes.size(); c < header.size(); ++c)
      if (header[c] == "start_time") {
        if (!f[c].empty()) in.start_times[*id] = f[c];
      } else if (const std::optional<double> x = number_field(f[c])) {
        run.metrics[header[c]] = *x;
      }
    in.runs.push_back(std::move(run));
  }
  if (in.spec.has_measured) {
    in.spec.measured.file = (root / in.spec.measured.file).string();
    join_measured(in.spec.measured, in.runs);
  }
  in.heading = fmt::format("Study `{}`", results_csv.parent_path().filename().string());
  return in;
}

ReportInput read_sweep(const fs::path& dir, std::ostream& out) {
  const fs::path sweep_copy = dir / "sweep.toml";
  if (!fs::exists(sweep_copy)) fail<FileError>("{}: not a sweep directory (no sweep.toml)", dir.string());
  ReportInput in;
  in.sweep = parse_sweep(read_text(sweep_copy, kConfigFileBound), sweep_copy.string());
  in.spec = in.sweep->report;
  const std::vector<std::string> axes = axis_keys(*in.sweep);
  in.group_keys.assign(axes.begin(), axes.end() - 1);  // all but "seed"

  Store store(dir / "results.sqlite");
  gather(dir, store, out);
  store.export_csv(dir / "results.csv", axes, [&](int64_t id) { return run_start_time(dir / run_dir_name(id)); });
  for (const Store::Row& row : store.runs()) {
    if (row.status != "complete") {
      in.failed.emplace_back(run_dir_name(row.id), row.point_json);
      continue;
    }
    in.runs.push_back({row.id, run_dir_name(row.id), ordered_json::parse(row.point_json),
                       row.config_json.empty() ? json::object() : json::parse(row.config_json), row.metrics,
                       store.curves(row.id)});
  }
  const std::vector<std::string> unmatched =
      in.spec.has_measured ? join_measured(in.spec.measured, in.runs) : std::vector<std::string>{};
  in.heading = fmt::format("Sweep `{}`", fs::absolute(dir).lexically_normal().filename().string());
  in.intro = sweep_intro(*in.sweep, expand_sweep(*in.sweep).size(), in.runs.size(), unmatched);
  return in;
}

ReportInput read_run_dirs(const std::vector<fs::path>& dirs) {
  if (dirs.empty()) fail<ValueError>("report: no run directory given");
  std::vector<RunRecord> records;
  std::vector<json> configs;
  for (size_t i = 0; i < dirs.size(); ++i) {
    if (!fs::exists(dirs[i] / "summary.json"))
      fail<FileError>("{}: not a complete run directory (no summary.json; a sweep directory holds sweep.toml)",
                      dirs[i].string());
    records.push_back(read_run_dir(int64_t(i), dirs[i]));
    configs.push_back(json::parse(records.back().config_json));
    if (!configs.back().contains("experiment")) configs.back()["experiment"] = experiment_of(dirs[i]);
  }
  ReportInput in;
  in.group_keys = differing_keys(configs);
  in.heading = fmt::format("{} runs compared", dirs.size());
  in.intro = "Run directories, each with the values of the config keys that differ between them (seed aside); runs "
             "that differ only in their seed form one configuration.\n\n";
  for (size_t i = 0; i < dirs.size(); ++i) {
    ordered_json point = ordered_json::object();
    for (const std::string& k : in.group_keys)
      if (configs[i].contains(k)) point[k] = configs[i][k];
    point["seed"] = configs[i].value("seed", json(nullptr));
    std::vector<std::string> kv;
    for (auto& [k, v] : point.items()) kv.push_back(fmt::format("{}={}", k, text_of(v)));
    in.intro += fmt::format("- `{}`: {}{}\n", dirs[i].string(), fmt::join(kv, ", "),
                            records[i].status == "complete" ? "" : " (not complete)");
    if (records[i].status != "complete") {
      in.failed.emplace_back(dirs[i].string(), point.dump());
      continue;
    }
    // By step; a step logged twice (a resumed run) keeps its last value, as the store does.
    std::map<std::string, std::map<int64_t, double>> by_step;
    for (const auto& c : records[i].curves) by_step[c.name][c.step] = c.value;
    Curves curves;
    for (const auto& [name, points] : by_step) curves[name].assign(points.begin(), points.end());
    in.runs.push_back({int64_t(i), dirs[i].string(), point, configs[i], records[i].metrics, curves});
  }
  in.intro += "\n";
  return in;
}

}  // namespace attnlab::runner::report_detail
