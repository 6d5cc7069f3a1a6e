// Writing for `attnlab report` (report.hpp): report.md from the pieces of report_parts.hpp.
#include "experiments/runner/report.hpp"

#include "experiments/runner/report_parts.hpp"
#include "tensor/io.hpp"

namespace attnlab::runner {
namespace fs = std::filesystem;
using namespace report_detail;
namespace {

// The table of final metrics: one row per configuration, best headline first.
std::string metrics_table(const ReportInput& in, const std::vector<Group>& groups, const std::vector<size_t>& order,
                          const std::vector<std::string>& columns) {
  std::string md = "## Final metrics\n\n";
  md += fmt::format("Mean ± half-width of its 95% interval over seeds (Student t, n runs), sorted by `{}` ({} is "
                    "better). Counts that agree over seeds, and single runs, show their value.\n\n",
                    columns[0], in.spec.ascending ? "lower" : "higher");
  std::string head = "|", rule = "|";
  for (const auto& k : in.group_keys) head += fmt::format(" {} |", k), rule += "---|";
  head += " n |", rule += "---:|";
  for (const auto& c : columns) head += fmt::format(" {} |", c), rule += "---:|";
  md += head + "\n" + rule + "\n";
  for (size_t gi : order) {
    const Group& g = groups[gi];
    std::string line = "|";
    for (const auto& v : g.values) line += fmt::format(" `{}` |", v);
    line += fmt::format(" {} |", g.runs.size());
    for (const auto& c : columns) line += fmt::format(" {} |", cell(values(g, c)));
    md += line + "\n";
  }
  return md + "\n";
}

std::string failed_section(const ReportInput& in) {
  if (in.failed.empty()) return "";
  std::string md = "## Failed runs\n\n";
  const char* log = in.sweep ? "stdout.txt" : "log.txt";
  for (const auto& [name, point] : in.failed) md += fmt::format("- `{}` {}: see `{}/{}`\n", name, point, name, log);
  return md + "\n";
}

// Writes DIR/report.md (and the plots and expectations it links) for `in`.
fs::path write_markdown(const ReportInput& given, const fs::path& dir, const std::string& where, std::ostream& out) {
  const ReportInput in = with_headline(given);
  const std::vector<Group> groups = make_groups(in);
  const std::vector<std::string> columns = metric_columns(in, where);
  const std::vector<size_t> order = rank(groups, columns[0], in.spec.ascending);
  std::string md = fmt::format("# {}\n\n{}", in.heading, in.intro);
  md += metrics_table(in, groups, order, columns);
  md += comparisons(in, groups, order, columns[0], dir);
  md += plot_sections(in, groups, order, columns[0], dir);
  md += failed_section(in);
  const fs::path report = dir / "report.md";
  write_text_atomic(report.string(), md);
  out << fmt::format("wrote {} ({} complete runs in {} configurations)\n", report.string(), in.runs.size(), groups.size());
  return report;
}

}  // namespace

fs::path write_report(const fs::path& dir, std::ostream& out) {
  const ReportInput in = read_sweep(dir, out);
  return write_markdown(in, dir, (dir / "sweep.toml").string(), out);
}

fs::path write_comparison(const std::vector<fs::path>& run_dirs, const fs::path& dir, const std::string& metric,
                          std::ostream& out) {
  ReportInput in = read_run_dirs(run_dirs);
  in.spec.metric = metric;
  fs::create_directories(dir);
  return write_markdown(in, dir, "--metric", out);
}

}  // namespace attnlab::runner
