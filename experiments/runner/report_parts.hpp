/// @file
/// The pieces of `attnlab report` (report.hpp), one job per file:
///   report_read.cpp   reading: a sweep directory, or ad-hoc run directories, into ReportInput
///   report_stats.cpp  statistics: groups over seeds, metric columns and their order, table cells,
///                     paired differences and declared expectations
///   report_plots.cpp  plotting: training curves (mean and min-max band over seeds), the headline
///                     metric against a key, the bubble chart
///   report.cpp        writing: report.md, assembled from the above
/// @ingroup runner
#pragma once
#include <filesystem>
#include <map>
#include <optional>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "experiments/runner/sweep.hpp"

/// @addtogroup runner
/// @{
namespace attnlab::runner::report_detail {

using Curves = std::map<std::string, std::vector<std::pair<int64_t, double>>>;  ///< name -> (step, value)

/// One complete run: its configuration point (the keys that tell configurations apart, and
/// "seed"), its resolved config, final metrics and training curves.
struct ReportRun {
  int64_t id = 0;
  std::string name;  ///< how the report refers to the run ("runs/0003", or its directory)
  nlohmann::ordered_json point;
  nlohmann::json config;
  std::map<std::string, double> metrics;
  Curves curves;
};

/// What a report is made of, read from disk.
struct ReportInput {
  std::string heading;                  ///< report.md's title line, without "# "
  std::string intro;                    ///< Markdown: what was run, and where the data are
  std::vector<std::string> group_keys;  ///< the configuration columns (every point key but seed)
  std::vector<ReportRun> runs;          ///< complete runs, in run order
  std::vector<std::pair<std::string, std::string>> failed;  ///< (run name, point) of the others
  ReportSpec spec;                      ///< metric, sort order, curves, x, bubble, comparisons
  std::optional<SweepSpec> sweep;       ///< the sweep, when the runs come from one
  std::map<int64_t, std::string> start_times;  ///< run id -> start (ISO 8601 UTC), where results.csv has them
};

// ---- reading (report_read.cpp)
/// The committed data of a study: the copy of its sweep file and the results.csv `attnlab report`
/// exported (docs/results/STUDY/), with report.measured files read relative to `root`. Axis
/// values are typed by the sweep's own axis lists; every other numeric column is a metric.
/// FileError or ValueError naming the file, line and column of what does not fit the sweep.
ReportInput read_results_csv(const std::filesystem::path& sweep_copy, const std::filesystem::path& results_csv,
                             const std::filesystem::path& root);
/// A sweep directory: merges shard stores and complete run directories into results.sqlite and
/// exports results.csv first (report.hpp). FileError when `dir` holds no sweep.toml.
ReportInput read_sweep(const std::filesystem::path& dir, std::ostream& out);
/// Run directories made by `attnlab run ... --run-dir`: the config keys whose values differ
/// between them (seed aside) are the configuration columns. FileError naming a directory that
/// holds no complete run; ValueError for fewer than one directory.
ReportInput read_run_dirs(const std::vector<std::filesystem::path>& dirs);

// ---- statistics (report_stats.cpp)
/// The runs that share every configuration value but the seed.
struct Group {
  std::string label;                ///< "model.attention=mha(heads=4), train.lr=0.001"
  std::vector<std::string> values;  ///< one per group key, as text
  nlohmann::ordered_json point;     ///< the group key values
  std::vector<const ReportRun*> runs;
  bool matches(const ReportSpec::Selector& sel) const;
};

std::string text_of(const nlohmann::json& v);
/// A metric, else a numeric point value, else a numeric config value, else NaN.
double lookup(const ReportRun& r, const std::string& name);
/// A point value, else a config value, as text; "" when neither.
std::string label_of(const ReportRun& r, const std::string& key);

std::vector<Group> make_groups(const ReportInput& in);
/// The headline metric first, then the experiment's own, then the cost figures. ValueError when
/// the headline (spec.metric) is no metric of any run.
std::vector<std::string> metric_columns(const ReportInput& in, const std::string& where);
/// Group indices, best headline mean first; groups without a value last.
std::vector<size_t> rank(const std::vector<Group>& groups, const std::string& headline, bool ascending);
std::vector<double> values(const Group& g, const std::string& name);
double group_mean(const Group& g, const std::string& name);
/// A number as text without exponent notation: integers whole, others to 4 significant digits.
std::string number_text(double x);
/// A table cell over a group's seeds: "-" (none), "33280" (counts that agree, or one run),
/// "0.6 ± 0.25" (mean ± half-width of the 95% interval).
std::string cell(const std::vector<double>& xs);
/// `in` with its headline metric named and, without [report] sort, its direction chosen by the
/// metric's name (lower_is_better).
ReportInput with_headline(ReportInput in);

/// A configuration is "dense at this N" when its runs' mean `density` metric (allowed query-key
/// pairs / N·M, recorded by experiments whose variant restricts the pairs) is at least this: a
/// sparse pattern that covers every pair is the dense attention it approximates.
inline constexpr double kDenseAtN = 0.95;
bool dense_at_n(const Group& g);

/// One [[report.expect]] judged on the complete runs (docs/sweeps.md, "Intervals and verdicts").
struct JudgedExpectation {
  std::string metric;    ///< "val_bpc", or "metric - minus"
  std::string relation;  ///< "`a` better `b`", "`a` below 2.6", with the margin for equal
  std::string observed;  ///< "+0.017 [-0.003, +0.037]", or "2.52 [2.5, 2.54]" for one configuration
  Interval interval;
  Verdict verdict;
  bool pending = false;            ///< a configuration the sweep plans has no complete run yet
  std::vector<std::string> dense;  ///< the compared configurations that are dense at this N
};
/// ValueError naming the expectation when a selector names no planned configuration, or several.
JudgedExpectation judge_expectation(const ReportInput& in, const std::vector<Group>& groups,
                                    const ReportSpec::Expectation& e, const std::string& headline);

/// The report.md sections of report.baseline's paired differences and of [[report.expect]];
/// writes the verdicts to DIR/expectations.csv.
std::string comparisons(const ReportInput& in, const std::vector<Group>& groups, const std::vector<size_t>& order,
                        const std::string& headline, const std::filesystem::path& dir);

// ---- plotting (report_plots.cpp)
/// Writes DIR/plots/*.svg and returns the report.md sections that show them.
std::string plot_sections(const ReportInput& in, const std::vector<Group>& groups, const std::vector<size_t>& order,
                          const std::string& headline, const std::filesystem::path& dir);

}  // namespace attnlab::runner::report_detail
/// @}
