// The claims table: one row per research claim the project tests (docs/results/claims.csv), and
// the Markdown made from it for docs/results/claims.md and the README (docs/sweeps.md, "The claims
// table").
//
// claims.csv has exactly the columns
//   claim,study,metric,expected,observed,ci_low,ci_high,seeds,verdict,compute_minutes
// one row per claim; `study` is a folder of docs/results/, `verdict` is reproduced, partially or
// not_reproduced, ci_low/ci_high bound the 95% interval of `observed` (a number), `seeds` counts
// the seeds behind it and compute_minutes the study's wall-clock minutes on the machine it ran on.
#pragma once
#include <filesystem>
#include <string>
#include <vector>

namespace attnlab::runner {

struct ClaimRow {
  std::string claim, study, metric, expected, observed, ci_low, ci_high, seeds, verdict, compute_minutes;
};

// Parses claims.csv (RFC 4180 quoting); ValueError naming the file, the line and the column for a
// wrong header, a wrong field count, an unknown verdict or a non-numeric number column.
std::vector<ClaimRow> parse_claims_csv(const std::string& text, const std::string& path);

// The table: claim, expected, observed [95% interval] (seeds), verdict, compute, with each study
// linked as `link_prefix + study + "/README.md"`.
std::string claims_markdown(const std::vector<ClaimRow>& rows, const std::string& link_prefix);

// Replaces what lies between the lines "<!-- claims:begin -->" and "<!-- claims:end -->" in `doc`
// with `table`; ValueError naming `path` when the markers are missing or out of order.
std::string replace_claims_block(const std::string& doc, const std::string& table, const std::string& path);

// `attnlab claims`: reads ROOT/docs/results/claims.csv, writes ROOT/docs/results/claims.md and the
// README's block (check = true: writes nothing and returns false when either differs).
bool sync_claims(const std::filesystem::path& root, bool check, std::ostream& out);

}  // namespace attnlab::runner
