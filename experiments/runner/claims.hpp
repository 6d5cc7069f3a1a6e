/// @file
/// The claims table: one row per research claim the project tests, derived from the studies'
/// committed data, never typed (docs/experiments.md, "Claims and verdicts").
///
/// A study folder docs/results/STUDY/ holds what its sweeps produced (sweep.toml, the copy of the
/// sweep file the runs used; results.csv, every run's final metrics) and a claims.toml beside them:
///
///   [[sweep]]                                    # each sweep of the folder whose expectations count
///   copy = "sweep.toml"                          # the copy the runs used (default "sweep.toml")
///   results = "results.csv"                      # its runs' metrics (default "results.csv")
///   file = "experiments/sweeps/current/study_lm.toml"   # the sweep file as it was committed
///   registered = "1b8f925"                       # the commit that registered its expectations
///
///   [[claim]]
///   text = "Ye 2024: differential attention improves the language model over mha"
///   source = "Ye et al. 2024, Differential Transformer"
///   primary = ["differential attention beats mha"]      # [[report.expect]] names
///   secondary = []                                       # optional
///   control = ["the mha baseline is past the n-gram level"]  # optional
///   independent_seeds = true                             # optional; false: the seeds share a training
///   seeds_note = "..."                                   # with independent_seeds = false: how
///
///   [calibration]                    # optional, for char LMs: where the baseline stands
///   file = "ngram.csv"               # order,bpc of smoothed n-gram models on the study's split
///   baseline = { "model.attention" = "mha(heads=4)" }   # a configuration of sweep.toml
///   order = 5                        # the control: the baseline's val_bpc is below this order's
///
/// The calibration adds a control to every claim of the folder: "the baseline uses context beyond
/// a 5-gram", judged like an expectation (`val_bpc` below the 5-gram's bpc) on the folder's
/// sweep.toml. A control declared after the runs can only withdraw a verdict, never grant one.
///
/// An expectation is named by its `name` in the folder's sweep.toml, by "COPY#name" for another
/// copy in the folder (sweep_fit.toml#...), or by "../OTHER/sweep.toml#name" for another study
/// folder, whose own claims.toml registers that sweep.
///
/// The verdict of a claim follows from its expectations' verdicts by one rule (derive_verdict):
///   1. a control that does not hold                -> inconclusive (the study cannot decide)
///   2. the seeds are not independent trainings      -> inconclusive (the interval is not the
///                                                      training variance the claim is about)
///   3. a primary contradicted                       -> not_reproduced
///   4. a primary inconclusive, or comparing a configuration that is dense at the study's N
///                                                   -> inconclusive
///   5. every primary holds, a secondary does not (or is dense at N) -> partially
///   6. every primary and secondary holds            -> reproduced
///
/// Registration is checked against git: every expectation the claim names must be in the named
/// commit's sweep file, unchanged, and that commit must be older than every run. The runs' start
/// times are the start_time column of results.csv; where a study's results.csv has none, the
/// earliest commit of results.csv bounds them: the runs started no later than that commit minus
/// the study's wall-clock time.
/// @ingroup runner
#pragma once
#include <filesystem>
#include <optional>
#include <utility>
#include <ostream>
#include <string>
#include <vector>

#include "experiments/runner/stats.hpp"

/// @addtogroup runner
/// @{
namespace attnlab::runner {

/// One registered sweep of a study folder (claims.toml [[sweep]]).
struct RegisteredSweep {
  std::string copy = "sweep.toml";      ///< the copy the runs used, in the folder
  std::string results = "results.csv";  ///< its runs' metrics, in the folder
  std::string file;                     ///< the sweep file as committed (repository path)
  std::string registered;               ///< the commit that registered its expectations
  int line = 0;                         ///< where the [[sweep]] starts in claims.toml
};

/// One [[claim]] of a claims.toml.
struct ClaimSpec {
  std::string study;  ///< the folder's name under docs/results/
  std::string text;                    ///< the claim, in words
  std::string source;                  ///< the paper it comes from
  std::vector<std::string> primary;    ///< expectations that decide the claim
  std::vector<std::string> secondary;  ///< expectations that make it partial when they fail
  std::vector<std::string> control;    ///< expectations without which the study cannot decide
  bool independent_seeds = true;       ///< false: the seeds share a training (the claim is inconclusive)
  std::string seeds_note;              ///< with independent_seeds = false: how the seeds relate
  int line = 0;                        ///< where the [[claim]] starts in claims.toml
};

/// claims.toml [calibration].
struct Calibration {
  std::string file;  ///< order,bpc of n-gram models on the study's split, in the folder
  std::vector<std::pair<std::string, std::string>> baseline;  ///< key -> value as TOML text
  int order = 5;     ///< the control: the baseline's val_bpc is below this order's
  int line = 0;      ///< where [calibration] starts in claims.toml
};

/// A study folder's claims.toml: its registered sweeps, the calibration and the claims.
struct StudyClaims {
  std::string study;                       ///< the folder's name under docs/results/
  std::vector<RegisteredSweep> sweeps;     ///< the [[sweep]] tables
  std::optional<Calibration> calibration;  ///< [calibration], when present
  std::vector<ClaimSpec> claims;           ///< the [[claim]] tables
};

/// Parses docs/results/STUDY/claims.toml; ValueError naming the file and line of an unknown key,
/// a missing field, a claim without a primary expectation, or text with a newline or '|'.
StudyClaims parse_study_claims(const std::string& text, const std::string& path, const std::string& study);

/// An expectation of a claim, judged on the committed data.
struct JudgedRef {
  std::string ref;       ///< as the claim names it
  std::string metric;    ///< "val_bpc" or "a - b"
  std::string relation;  ///< "`a` better `b`"
  std::string observed;  ///< "+0.017 [-0.003, +0.037]"
  Interval interval;     ///< the estimate and its 95% interval
  std::string verdict;   ///< holds | contradicted | inconclusive
  std::string why;       ///< the clause that decided the verdict
  std::vector<std::string> dense;  ///< compared configurations that are dense at the study's N
};

/// The claim's verdict by the rule above, and the clause that decided it.
struct ClaimVerdict {
  std::string word;  ///< reproduced | partially | not_reproduced | inconclusive
  std::string why;   ///< the clause that decided it
};
/// The verdict of a claim from its expectations' verdicts, by the rule above.
ClaimVerdict derive_verdict(const ClaimSpec& claim, const std::vector<JudgedRef>& primary,
                            const std::vector<JudgedRef>& secondary, const std::vector<JudgedRef>& control);

/// A derived row of the table.
struct ClaimRow {
  ClaimSpec spec;                   ///< the claim as registered
  std::vector<JudgedRef> primary;   ///< its primary expectations, judged
  std::vector<JudgedRef> secondary; ///< its secondary expectations, judged
  std::vector<JudgedRef> control;   ///< its controls (the calibration's included), judged
  size_t seeds = 0;  ///< the pairs (or runs) behind the first primary expectation
  ClaimVerdict verdict;      ///< derive_verdict's
  std::string registration;  ///< "registered before the runs", "registered after the runs: ...", ...
  double run_minutes = 0;    ///< the sum of the study's run times (every sweep the claim names)
};

/// Every claims.toml under ROOT/docs/results, in folder order; each claim derived from the data.
/// `git`: check registration against the repository's history (false: the registration column
/// says "not checked").
std::vector<ClaimRow> derive_claims(const std::filesystem::path& root, bool git);

/// claims.csv, the Markdown table (studies linked as link_prefix + study + "/README.md").
std::string claims_csv(const std::vector<ClaimRow>& rows);
/// The Markdown table of the rows (see claims_csv).
std::string claims_markdown(const std::vector<ClaimRow>& rows, const std::string& link_prefix);

/// Replaces what lies between a line that is exactly "<!-- claims:begin -->" and the next line
/// that is exactly "<!-- claims:end -->" in `doc` with `table`; ValueError naming `path` when
/// the marker lines are missing, repeated or out of order (nothing is written then).
std::string replace_claims_block(const std::string& doc, const std::string& table, const std::string& path);

/// `attnlab claims`: derives the rows and compares (check = true) or writes (false)
/// ROOT/docs/results/claims.csv, claims.md, the README's block and the block of every study README
/// that has the markers (that study's rows); returns false when a committed file differs from what
/// the data give. Without git history (not a checkout, or a shallow one
/// that lacks a registering commit) the registration column is kept from the committed
/// claims.csv and a note says so.
bool sync_claims(const std::filesystem::path& root, bool check, std::ostream& out);

}  // namespace attnlab::runner
/// @}
