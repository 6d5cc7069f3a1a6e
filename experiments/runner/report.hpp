/// @file
/// `attnlab report DIR`: one Markdown page and its SVG plots for a sweep directory
/// (docs/sweeps.md), or for ad-hoc run directories compared (write_comparison). The work is split
/// by job into report_read.cpp, report_stats.cpp, report_plots.cpp and report.cpp
/// (report_parts.hpp).
///
/// First the results are gathered: every shard database (DIR/shards/*.sqlite) and every complete
/// run directory missing from DIR/results.sqlite are merged into it, so a sweep run as N shards on
/// a cluster, or killed before its last insert, reports every run exactly once. Then it writes:
///   results.csv       one row per run: id, status, axis values, final metrics
///   report.md         the sweep's description; a table of final metrics per configuration (the
///                     non-seed axes), mean ± half-width of the 95% interval over seeds with n, sorted by
///                     the headline metric; the plots below, linked relatively
///   plots/curve_NAME.svg      training curves (mean over seeds at each step, a band from the
///                             seeds' minimum to maximum), one chart per metric
///   plots/METRIC_vs_KEY.svg   the headline metric against [report] x, one series per configuration
///                             of the other axes
///   plots/bubble.svg          [report] bubble: x, y, area ∝ size, one labelled bubble per
///                             configuration (the Long Range Arena summary figure)
/// Every file is written atomically.
/// @ingroup runner
#pragma once
#include <filesystem>
#include <ostream>
#include <string>
#include <vector>

/// @addtogroup runner
/// @{
namespace attnlab::runner {

/// Writes the report of sweep directory `dir`; returns the path of report.md. FileError when `dir`
/// holds no sweep.toml; ValueError when the headline metric is in no run.
std::filesystem::path write_report(const std::filesystem::path& dir, std::ostream& out);

/// `attnlab report RUN_DIR...`: the same report.md and plots (no results.csv, baseline or
/// expectations) for run directories made by `attnlab run ... --run-dir`, written to `dir`. The
/// config keys whose values differ between the runs, seed aside, are the configuration columns;
/// runs that differ only in their seed are one configuration. `metric` is the headline (empty:
/// the first metric by name). FileError naming a directory without a complete run.
std::filesystem::path write_comparison(const std::vector<std::filesystem::path>& run_dirs,
                                       const std::filesystem::path& dir, const std::string& metric,
                                       std::ostream& out);

}  // namespace attnlab::runner
/// @}
