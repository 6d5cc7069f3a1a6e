// The claims table (experiments/runner/claims.hpp).
#include "experiments/runner/claims.hpp"

#include <cmath>
#include <ostream>

#include <fmt/format.h>

#include "experiments/runner/csv.hpp"
#include "tensor/error.hpp"
#include "tensor/io.hpp"

namespace attnlab::runner {
namespace {

constexpr const char* kHeader = "claim,study,metric,expected,observed,ci_low,ci_high,seeds,verdict,compute_minutes";
constexpr const char* kBegin = "<!-- claims:begin -->";
constexpr const char* kEnd = "<!-- claims:end -->";

}  // namespace

std::vector<ClaimRow> parse_claims_csv(const std::string& text, const std::string& path) {
  const auto records = csv_records(text, path);
  if (records.empty()) fail<ValueError>("{}: empty (expected the header '{}')", path, kHeader);
  std::string header;
  for (const auto& f : records[0].second) header += (header.empty() ? "" : ",") + f;
  if (header != kHeader) fail<ValueError>("{}:1: header '{}', expected '{}'", path, header, kHeader);
  std::vector<ClaimRow> rows;
  for (size_t r = 1; r < records.size(); ++r) {
    const auto& [line, f] = records[r];
    if (f.size() != 10) fail<ValueError>("{}:{}: {} fields, expected 10 ({})", path, line, f.size(), kHeader);
    ClaimRow row{f[0], f[1], f[2], f[3], f[4], f[5], f[6], f[7], f[8], f[9]};
    if (row.verdict != "reproduced" && row.verdict != "partially" && row.verdict != "not_reproduced")
      fail<ValueError>("{}:{}: verdict '{}', expected reproduced, partially or not_reproduced", path, line, row.verdict);
    for (const auto& [name, value] : {std::pair<const char*, const std::string*>{"observed", &row.observed},
                                      {"ci_low", &row.ci_low}, {"ci_high", &row.ci_high}, {"seeds", &row.seeds},
                                      {"compute_minutes", &row.compute_minutes}})
      if (!is_number(*value)) fail<ValueError>("{}:{}: {} '{}' is not a number", path, line, name, *value);
    if (row.claim.empty() || row.study.empty()) fail<ValueError>("{}:{}: claim and study must not be empty", path, line);
    rows.push_back(std::move(row));
  }
  return rows;
}

std::string claims_markdown(const std::vector<ClaimRow>& rows, const std::string& link_prefix) {
  std::string md =
      "| claim | study | expected | observed [95% interval] | seeds | verdict | compute |\n"
      "|---|---|---|---|---:|---|---:|\n";
  for (const auto& r : rows)
    md += fmt::format("| {} | [{}]({}{}/README.md) | {} | `{}` {} [{}, {}] | {} | **{}** | {} min |\n", r.claim, r.study,
                      link_prefix, r.study, r.expected, r.metric, r.observed, r.ci_low, r.ci_high, r.seeds,
                      r.verdict == "not_reproduced" ? "not reproduced" : r.verdict, r.compute_minutes);
  return md;
}

std::string replace_claims_block(const std::string& doc, const std::string& table, const std::string& path) {
  const size_t b = doc.find(kBegin), e = doc.find(kEnd);
  if (b == std::string::npos || e == std::string::npos || e < b)
    fail<ValueError>("{}: no '{}' ... '{}' block to hold the claims table", path, kBegin, kEnd);
  const size_t after_begin = doc.find('\n', b);
  return doc.substr(0, after_begin + 1) + table + doc.substr(e);
}

bool sync_claims(const std::filesystem::path& root, bool check, std::ostream& out) {
  const auto csv_path = root / "docs/results/claims.csv";
  const auto rows = parse_claims_csv(read_text(csv_path.string()), csv_path.string());
  const auto md_path = root / "docs/results/claims.md";
  const auto readme_path = root / "README.md";
  const std::string md =
      "# The seeds' claims, tested\n\n"
      "One row per claim: the expectation written in the study's sweep file before its runs, the observed paired "
      "difference (or value) with its 95% interval over seeds, and the verdict the data give. Generated from "
      "[claims.csv](claims.csv) by `attnlab claims --write`; each study's README has the design, the control and the "
      "full table.\n\n" +
      claims_markdown(rows, "");
  const std::string readme = read_text(readme_path.string());
  const std::string new_readme = replace_claims_block(readme, claims_markdown(rows, "docs/results/"), readme_path.string());
  const bool md_same = std::filesystem::exists(md_path) && read_text(md_path.string()) == md;
  const bool readme_same = readme == new_readme;
  if (check) {
    if (!md_same) out << md_path.string() << " is not the table of " << csv_path.string() << " (run attnlab claims --write)\n";
    if (!readme_same) out << readme_path.string() << "'s claims block is not the table of " << csv_path.string() << "\n";
    return md_same && readme_same;
  }
  if (!md_same) write_text_atomic(md_path.string(), md);
  if (!readme_same) write_text_atomic(readme_path.string(), new_readme);
  out << fmt::format("{} claims: {} {}, {} {}\n", rows.size(), md_path.string(), md_same ? "unchanged" : "written",
                     readme_path.string(), readme_same ? "unchanged" : "written");
  return true;
}

}  // namespace attnlab::runner
