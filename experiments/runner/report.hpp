// `attnlab report DIR`: one Markdown page and its SVG plots for a sweep directory
// (docs/sweeps.md).
//
// First the results are gathered: every shard database (DIR/shards/*.sqlite) and every complete
// run directory missing from DIR/results.sqlite are merged into it, so a sweep run as N shards on
// a cluster, or killed before its last insert, reports every run exactly once. Then it writes:
//   results.csv       one row per run: id, status, axis values, final metrics
//   report.md         the sweep's description; a table of final metrics per configuration (the
//                     non-seed axes), mean ± sample standard deviation over seeds with n, sorted by
//                     the headline metric; the plots below, linked relatively
//   plots/curve_NAME.svg      training curves (mean over seeds at each step), one chart per metric
//   plots/METRIC_vs_KEY.svg   the headline metric against [report] x, one series per configuration
//                             of the other axes
//   plots/bubble.svg          [report] bubble: x, y, area ∝ size, one labelled bubble per
//                             configuration (the Long Range Arena summary figure)
// Every file is written atomically.
#pragma once
#include <filesystem>
#include <ostream>

namespace attnlab::runner {

// Writes the report of sweep directory `dir`; returns the path of report.md. FileError when `dir`
// holds no sweep.toml; ValueError when the headline metric is in no run.
std::filesystem::path write_report(const std::filesystem::path& dir, std::ostream& out);

}  // namespace attnlab::runner
