// The claims table, derived from the studies' committed data (experiments/runner/claims.hpp).
#include "experiments/runner/claims.hpp"

#include <algorithm>
#include <cmath>
#include <ctime>
#include <map>
#include <memory>
#include <set>

#include <fmt/format.h>

#include "experiments/runner/csv.hpp"
#include "experiments/runner/experiment.hpp"
#include "experiments/runner/marked_block.hpp"
#include "experiments/runner/report_parts.hpp"
#include "tensor/error.hpp"
#include "tensor/io.hpp"
#include "tensor/option_string.hpp"
#include "experiments/runner/file_bounds.hpp"

namespace attnlab::runner {
namespace fs = std::filesystem;
using namespace report_detail;
namespace {

constexpr const char* kBegin = "<!-- claims:begin -->";
constexpr const char* kCsvHeader =
    "claim,source,study,primary,observed,ci_low,ci_high,seeds,secondary,control,verdict,why,registration,run_minutes";

// ---- the committed data of one sweep copy

struct SweepData {
  std::string study, copy;  // folder and file name: "current_lm", "sweep.toml"
  const RegisteredSweep* registration = nullptr;
  ReportInput in;
  std::vector<Group> groups;
};

struct Studies {
  fs::path results;                                       // ROOT/docs/results
  std::vector<StudyClaims> folders;                       // every claims.toml, in folder order
  std::map<std::string, std::unique_ptr<SweepData>> data;  // "study/copy" -> its data, read once

  const StudyClaims* folder(const std::string& study) const {
    for (const auto& f : folders)
      if (f.study == study) return &f;
    return nullptr;
  }

  const SweepData& sweep(const std::string& study, const std::string& copy, const std::string& who) {
    const std::string key = study + "/" + copy;
    if (auto it = data.find(key); it != data.end()) return *it->second;
    const StudyClaims* f = folder(study);
    const RegisteredSweep* reg = nullptr;
    if (f)
      for (const auto& s : f->sweeps)
        if (s.copy == copy) reg = &s;
    if (!reg)
      fail<ValueError>("{}: names {}, but {} has no [[sweep]] with copy = \"{}\" that registers it", who, key,
                       (results / study / "claims.toml").string(), copy);
    auto d = std::make_unique<SweepData>();
    d->study = study;
    d->copy = copy;
    d->registration = reg;
    d->in = with_headline(read_results_csv(results / study / copy, results / study / reg->results, results.parent_path().parent_path()));
    d->groups = make_groups(d->in);
    return *(data[key] = std::move(d));
  }
};

// "name" -> (the claim's folder, sweep.toml, name); "COPY#name"; "../OTHER/COPY#name".
struct Ref {
  std::string study, copy, name;
};
Ref parse_ref(const std::string& ref, const std::string& study, const std::string& who) {
  const size_t hash = ref.find('#');
  if (hash == std::string::npos) return {study, "sweep.toml", ref};
  const std::string where = ref.substr(0, hash), name = ref.substr(hash + 1);
  if (where.rfind("../", 0) == 0) {
    const std::string rest = where.substr(3);
    const size_t slash = rest.find('/');
    if (slash == std::string::npos || slash == 0 || rest.find('/', slash + 1) != std::string::npos)
      fail<ValueError>("{}: '{}' names no sweep copy (expected ../STUDY/COPY#name)", who, ref);
    return {rest.substr(0, slash), rest.substr(slash + 1), name};
  }
  if (where.find('/') != std::string::npos)
    fail<ValueError>("{}: '{}' names no sweep copy (expected COPY#name or ../STUDY/COPY#name)", who, ref);
  return {study, where, name};
}

const ReportSpec::Expectation& find_expectation(const SweepSpec& sweep, const std::string& name, const std::string& who) {
  std::vector<std::string> names;
  for (const auto& e : sweep.report.expect) {
    if (e.name == name) return e;
    names.push_back("'" + e.name + "'");
  }
  fail<ValueError>("{}: no [[report.expect]] named '{}' in {} (it has {})", who, name, sweep.path,
                   names.empty() ? std::string("none") : fmt::format("{}", fmt::join(names, ", ")));
}

JudgedRef judge_ref(Studies& studies, const std::string& ref, const ClaimSpec& claim, const std::string& who) {
  const Ref r = parse_ref(ref, claim.study, who);
  const SweepData& d = studies.sweep(r.study, r.copy, who);
  const auto& e = find_expectation(*d.in.sweep, r.name, who);
  const JudgedExpectation j = judge_expectation(d.in, d.groups, e, d.in.spec.metric);
  return {ref, j.metric, j.relation, j.observed, j.interval, j.verdict.word, j.verdict.why, j.dense};
}

// The calibration's control on the folder's sweep.toml: the baseline's val_bpc below the n-gram
// order's bpc in the calibration file.
JudgedRef judge_calibration(Studies& studies, const StudyClaims& folder, const std::string& who) {
  const Calibration& c = *folder.calibration;
  const fs::path file = studies.results / folder.study / c.file;
  const std::string path = file.string();
  std::optional<double> bpc;
  const auto records = csv_records(read_text(path, kTableFileBound), path);
  if (records.empty() || records[0].second != std::vector<std::string>{"order", "bpc"})
    fail<ValueError>("{}:1: expected the header order,bpc", path);
  for (size_t r = 1; r < records.size(); ++r) {
    const auto& [line, f] = records[r];
    if (f.size() != 2 || !number_field(f[0]) || !number_field(f[1]))
      fail<ValueError>("{}:{}: expected ORDER,BPC (two numbers)", path, line);
    if (*number_field(f[0]) == c.order) bpc = *number_field(f[1]);
  }
  if (!bpc) fail<ValueError>("{}: no row for order {} (calibration.order of {})", path, c.order, who);
  const SweepData& d = studies.sweep(folder.study, "sweep.toml", who);
  ReportSpec::Expectation e;
  e.name = fmt::format("the baseline uses context beyond a {}-gram", c.order);
  e.metric = "val_bpc";
  for (const auto& [k, text] : c.baseline) {
    // Typed as the sweep's axis types it: the point value of a run with that text.
    Value v = text;
    for (const auto& run : d.in.runs)
      if (run.point.contains(k) && text_of(run.point[k]) == text && run.point[k].is_number_integer())
        v = run.point[k].get<int64_t>();
    e.a.emplace_back(k, v);
  }
  e.relation = Relation::Below;
  e.value = *bpc;
  const JudgedExpectation j = judge_expectation(d.in, d.groups, e, d.in.spec.metric);
  return {fmt::format("the baseline below the {}-gram ({:.3f} bpc)", c.order, *bpc), j.metric, j.relation, j.observed,
          j.interval, j.verdict.word, j.verdict.why, j.dense};
}

// ---- registration

std::optional<std::string> git(const fs::path& root, const std::string& args) {
  return command_output("git -C '" + root.string() + "' " + args + " 2>/dev/null");
}

std::optional<int64_t> commit_time(const fs::path& root, const std::string& commit) {
  const auto t = git(root, "show -s --format=%ct " + commit + "^{commit}");
  return t ? parse_integer(*t) : std::nullopt;
}

int64_t iso_seconds(const std::string& iso) {
  std::tm tm{};
  if (!strptime(iso.c_str(), "%Y-%m-%dT%H:%M:%SZ", &tm)) return -1;
  return int64_t(timegm(&tm));
}

std::string selector_key(const ReportSpec::Selector& s) {
  std::string out;
  for (const auto& [k, v] : s) out += k + "=" + to_toml_value(v) + ";";
  return out;
}

// The fields of an expectation that its verdict depends on.
bool same_expectation(const ReportSpec::Expectation& a, const ReportSpec::Expectation& b) {
  return a.metric == b.metric && a.minus == b.minus && selector_key(a.a) == selector_key(b.a) &&
         selector_key(a.b) == selector_key(b.b) && a.relation == b.relation && a.margin == b.margin &&
         a.value == b.value;
}

// How the registration of one sweep relates to its runs. Rank: 0 before, 1 not shown, 2 after,
// 3 not registered (the worst of a claim's sweeps is its column).
struct Registration {
  int rank = 0;
  std::string text;
};

Registration check_registration(const fs::path& root, const SweepData& d, const std::vector<std::string>& names) {
  const RegisteredSweep& reg = *d.registration;
  const std::string commit = reg.registered.substr(0, 7);
  const std::optional<int64_t> t_reg = commit_time(root, reg.registered);
  if (!t_reg) return {3, fmt::format("not registered: commit {} is not in this repository", commit)};
  const auto text = git(root, "show " + reg.registered + ":'" + reg.file + "'");
  if (!text) return {3, fmt::format("not registered: {} is not in commit {}", reg.file, commit)};
  const SweepSpec registered = parse_sweep(*text, reg.file + "@" + commit);
  for (const std::string& name : names) {
    const auto& now = find_expectation(*d.in.sweep, name, d.study + "/" + d.copy);
    auto it = std::find_if(registered.report.expect.begin(), registered.report.expect.end(),
                           [&](const auto& e) { return e.name == name; });
    if (it == registered.report.expect.end())
      return {3, fmt::format("not registered: '{}' is not in {} at {}", name, reg.file, commit)};
    if (!same_expectation(*it, now))
      return {3, fmt::format("not registered: '{}' differs from {} at {}", name, reg.file, commit)};
  }
  const size_t complete = d.in.runs.size();
  if (!d.in.start_times.empty()) {
    size_t before = 0, known = 0;
    for (const auto& run : d.in.runs)
      if (auto it = d.in.start_times.find(run.id); it != d.in.start_times.end()) {
        const int64_t t = iso_seconds(it->second);
        ++known;
        if (t < *t_reg) ++before;
      }
    if (before > 0)
      return {2, fmt::format("registered after the runs: {} of {} runs started before {}", before, complete, commit)};
    if (known == complete) return {0, fmt::format("registered before the runs ({})", commit)};
  }
  // No start times: the results' first commit bounds the runs' end; the study's wall clock, its
  // run seconds over its workers, bounds how long before that they started.
  double seconds = 0;
  for (const auto& run : d.in.runs)
    if (auto it = run.metrics.find("seconds"); it != run.metrics.end()) seconds += it->second;
  const double wall = seconds / std::max(1, d.in.sweep->workers);
  // git log lists the newest first: the last line is the commit that added the results.
  const auto added = git(root, "log --format=%ct --diff-filter=A -- 'docs/results/" + d.study + "/" + reg.results + "'");
  std::optional<int64_t> t_res;
  if (added && !added->empty()) t_res = parse_integer(added->substr(added->find_last_of('\n') + 1));
  if (!t_res) return {1, fmt::format("not shown: no run start times, and {} has no commit", reg.results)};
  const double gap = double(*t_res - *t_reg);
  if (gap < wall)
    return {2, fmt::format("registered after the runs: {} is {:.0f} min older than the results, which took {:.0f} min",
                           commit, gap / 60, wall / 60)};
  return {1, fmt::format("not shown: run start times not kept ({} is {:.0f} min older than the results, which took "
                         "{:.0f} min)",
                         commit, gap / 60, wall / 60)};
}

// ---- the table

std::string verdict_text(const std::string& v) { return v == "not_reproduced" ? "not reproduced" : v; }

std::string number(double x) { return std::isfinite(x) ? fmt::format("{:.6g}", x) : "nan"; }


std::string dense_note(const JudgedRef& j) {
  return j.dense.empty() ? "" : fmt::format(", dense at this N: {}", fmt::join(j.dense, ", "));
}

// "'name': holds, +0.017 [-0.003, +0.037]" for the table's cells.
std::string ref_summary(const JudgedRef& j) {
  return fmt::format("{}: {}, `{}` {}{}", j.ref, j.verdict, j.metric, j.observed, dense_note(j));
}

std::string joined(const std::vector<JudgedRef>& js, const std::string& prefix = "") {
  std::vector<std::string> parts;
  for (const auto& j : js) parts.push_back(prefix + ref_summary(j));
  return fmt::format("{}", fmt::join(parts, "; "));
}

std::string markdown_cell(std::string s) {
  std::string out;
  for (char c : s) out += c == '|' ? std::string("\\|") : std::string(1, c);
  return out;
}

std::string replace_registration(const std::string& csv_text, std::vector<ClaimRow>& rows, const std::string& path) {
  const auto records = csv_records(csv_text, path);
  if (records.empty()) return "no committed claims.csv to keep it from";
  const auto& header = records[0].second;
  const auto col = [&](const std::string& name) {
    return size_t(std::find(header.begin(), header.end(), name) - header.begin());
  };
  const size_t c_claim = col("claim"), c_reg = col("registration");
  if (c_claim == header.size() || c_reg == header.size()) return "the committed claims.csv has no registration column";
  for (auto& row : rows)
    for (size_t r = 1; r < records.size(); ++r)
      if (records[r].second.size() == header.size() && records[r].second[c_claim] == row.spec.text)
        row.registration = records[r].second[c_reg];
  return "";
}

}  // namespace

ClaimVerdict derive_verdict(const ClaimSpec& claim, const std::vector<JudgedRef>& primary,
                            const std::vector<JudgedRef>& secondary, const std::vector<JudgedRef>& control) {
  for (const auto& c : control)
    if (c.verdict != "holds")
      return {"inconclusive", fmt::format("the control '{}' is {} ({})", c.ref, c.verdict, c.why)};
  if (!claim.independent_seeds)
    return {"inconclusive", fmt::format("the seeds are not independent trainings: {}", claim.seeds_note)};
  for (const auto& p : primary)
    if (p.verdict == "contradicted") return {"not_reproduced", fmt::format("'{}' is contradicted ({})", p.ref, p.why)};
  for (const auto& p : primary) {
    if (p.verdict != "holds") return {"inconclusive", fmt::format("'{}' is {} ({})", p.ref, p.verdict, p.why)};
    if (!p.dense.empty())
      return {"inconclusive", fmt::format("'{}' compares {}, dense at the study's N", p.ref, fmt::join(p.dense, ", "))};
  }
  for (const auto& s : secondary) {
    if (s.verdict != "holds")
      return {"partially", fmt::format("the primary expectations hold; '{}' is {} ({})", s.ref, s.verdict, s.why)};
    if (!s.dense.empty())
      return {"partially", fmt::format("the primary expectations hold; '{}' compares {}, dense at the study's N", s.ref,
                                       fmt::join(s.dense, ", "))};
  }
  return {"reproduced", secondary.empty() ? "every primary expectation holds"
                                          : "every primary and secondary expectation holds"};
}

std::vector<ClaimRow> derive_claims(const fs::path& root, bool use_git) {
  Studies studies;
  studies.results = root / "docs/results";
  std::vector<fs::path> folders;
  for (const auto& e : fs::directory_iterator(studies.results))
    if (e.is_directory() && fs::is_regular_file(e.path() / "claims.toml")) folders.push_back(e.path());
  std::sort(folders.begin(), folders.end());
  for (const auto& f : folders) {
    const fs::path p = f / "claims.toml";
    studies.folders.push_back(parse_study_claims(read_text(p.string(), kTableFileBound), p.string(), f.filename().string()));
  }
  std::vector<ClaimRow> rows;
  for (const auto& folder : studies.folders)
    for (const auto& claim : folder.claims) {
      const std::string who = fmt::format("{}:{}", (studies.results / folder.study / "claims.toml").string(), claim.line);
      ClaimRow row;
      row.spec = claim;
      for (const auto& [names, out] : {std::pair{&claim.primary, &row.primary}, std::pair{&claim.secondary, &row.secondary},
                                       std::pair{&claim.control, &row.control}})
        for (const auto& ref : *names) out->push_back(judge_ref(studies, ref, claim, who));
      if (folder.calibration) row.control.push_back(judge_calibration(studies, folder, who));
      row.seeds = row.primary.front().interval.n;
      row.verdict = derive_verdict(claim, row.primary, row.secondary, row.control);
      // The sweeps the claim names: their run time, and the worst of their registrations.
      std::map<std::string, std::vector<std::string>> names_of;  // "study/copy" -> expectation names
      for (const auto* names : {&claim.primary, &claim.secondary, &claim.control})
        for (const auto& ref : *names) {
          const Ref r = parse_ref(ref, claim.study, who);
          names_of[r.study + "/" + r.copy].push_back(r.name);
        }
      Registration worst{-1, ""};
      for (const auto& [key, names] : names_of) {
        const SweepData& d = *studies.data.at(key);
        for (const auto& run : d.in.runs)
          if (auto it = run.metrics.find("seconds"); it != run.metrics.end()) row.run_minutes += it->second / 60;
        if (!use_git) continue;
        const Registration r = check_registration(root, d, names);
        if (r.rank > worst.rank) worst = r;
      }
      row.registration = use_git ? worst.text : "not checked (no git history)";
      rows.push_back(std::move(row));
    }
  return rows;
}

std::string claims_csv(const std::vector<ClaimRow>& rows) {
  std::string csv = std::string(kCsvHeader) + "\n";
  for (const auto& r : rows) {
    const JudgedRef& p = r.primary.front();
    std::vector<std::string> primaries;
    for (const auto& j : r.primary) primaries.push_back(fmt::format("{}: {} {}", j.ref, j.metric, j.verdict));
    csv += fmt::format("{},{},{},{},{},{},{},{},{},{},{},{},{},{:.0f}\n", csv_field(r.spec.text),
                       csv_field(r.spec.source), csv_field(r.spec.study),
                       csv_field(fmt::format("{}", fmt::join(primaries, "; "))), number(p.interval.mean),
                       number(p.interval.low), number(p.interval.high), r.seeds, csv_field(joined(r.secondary)),
                       csv_field(joined(r.control)), r.verdict.word, csv_field(r.verdict.why), csv_field(r.registration),
                       r.run_minutes);
  }
  return csv;
}

std::string claims_markdown(const std::vector<ClaimRow>& rows, const std::string& link_prefix) {
  std::string md =
      "| claim | study | primary expectation: observed [95% interval] | seeds | secondary and control | verdict | "
      "registration | run time |\n"
      "|---|---|---|---:|---|---|---|---:|\n";
  for (const auto& r : rows) {
    std::vector<std::string> primaries;
    for (const auto& j : r.primary)
      primaries.push_back(fmt::format("{}: `{}` {} ({}{})", j.ref, j.metric, j.observed, j.verdict, dense_note(j)));
    std::string others = joined(r.secondary);
    if (!r.control.empty()) others += (others.empty() ? "" : "; ") + joined(r.control, "control ");
    std::string seeds = std::to_string(r.seeds);
    if (!r.spec.independent_seeds) seeds += " (one training)";
    md += fmt::format("| {} | [{}]({}{}/README.md) | {} | {} | {} | **{}**: {} | {} | {:.0f} min |\n",
                      markdown_cell(r.spec.text), r.spec.study, link_prefix, r.spec.study,
                      markdown_cell(fmt::format("{}", fmt::join(primaries, "; "))), seeds,
                      markdown_cell(others.empty() ? "-" : others), verdict_text(r.verdict.word),
                      markdown_cell(r.verdict.why), markdown_cell(r.registration), r.run_minutes);
  }
  return md;
}

std::string replace_claims_block(const std::string& doc, const std::string& table, const std::string& path) {
  return replace_marked_block(doc, "claims", table, path, "the claims table");
}

bool sync_claims(const fs::path& root, bool check, std::ostream& out) {
  const auto csv_path = root / "docs/results/claims.csv";
  const auto md_path = root / "docs/results/claims.md";
  const auto readme_path = root / "README.md";
  // Registration needs the history: a checkout that is not shallow.
  const auto shallow = git(root, "rev-parse --is-shallow-repository");
  const bool use_git = shallow && *shallow == "false";
  std::vector<ClaimRow> rows = derive_claims(root, use_git);
  if (!use_git) {
    const std::string why = fs::is_regular_file(csv_path)
                                ? replace_registration(read_text(csv_path.string(), kTableFileBound), rows, csv_path.string())
                                : std::string("no committed claims.csv to keep it from");
    out << "attnlab claims: no git history here (not a checkout, or a shallow one): the registration column is "
        << (why.empty() ? "kept from the committed claims.csv" : "not checked: " + why) << "\n";
  }
  const std::string csv = claims_csv(rows);
  const std::string md =
      "# The seeds' claims, tested\n\n"
      "One row per claim, derived from the studies' committed data by `attnlab claims --write`: each expectation "
      "(declared in the study's sweep file) is judged on its 95% interval over seeds, and the claim's verdict follows "
      "from those judgements by the rule in [docs/experiments.md](../experiments.md#claims-and-verdicts). The "
      "registration column says whether git shows the expectations committed before the runs started. Each study's "
      "README has the design and the full table; [claims.csv](claims.csv) has the same rows.\n\n" +
      claims_markdown(rows, "");
  const std::string readme = read_text(readme_path.string(), kTableFileBound);
  // Every file the table goes into, with its derived text: claims.csv, claims.md, the README's
  // block, and the block of each study README that has the markers (that study's rows).
  std::vector<std::pair<fs::path, std::string>> files = {
      {csv_path, csv}, {md_path, md}, {readme_path, replace_claims_block(readme, claims_markdown(rows, "docs/results/"),
                                                                         readme_path.string())}};
  std::set<std::string> studies;
  for (const auto& r : rows) studies.insert(r.spec.study);
  for (const std::string& study : studies) {
    const fs::path p = root / "docs/results" / study / "README.md";
    if (!fs::is_regular_file(p)) continue;
    const std::string doc = read_text(p.string(), kTableFileBound);
    if (doc.find(kBegin) == std::string::npos) continue;
    std::vector<ClaimRow> own;
    std::copy_if(rows.begin(), rows.end(), std::back_inserter(own), [&](const ClaimRow& r) { return r.spec.study == study; });
    files.emplace_back(p, replace_claims_block(doc, claims_markdown(own, "../"), p.string()));
  }
  bool all_same = true;
  size_t written = 0;
  for (const auto& [p, text] : files) {
    const bool same = fs::is_regular_file(p) && read_text(p.string(), kTableFileBound) == text;
    all_same = all_same && same;
    if (same) continue;
    if (check) out << p.string() << " is not what the studies' data give (run attnlab claims --write and review the diff)\n";
    else write_text_atomic(p.string(), text), ++written;
  }
  if (check) return all_same;
  out << fmt::format("{} claims derived; {} of {} files written (claims.csv, claims.md, README.md, study READMEs)\n",
                     rows.size(), written, files.size());
  for (const auto& r : rows) out << fmt::format("  {}: {} ({})\n", verdict_text(r.verdict.word), r.spec.text, r.registration);
  return true;
}

}  // namespace attnlab::runner
