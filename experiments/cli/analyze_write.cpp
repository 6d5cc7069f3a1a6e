// Writing for `attnlab analyze` (analyze_parts.hpp): analysis.json and roles.md from what
// analyze.cpp measured.
#include <cmath>

#include <fmt/format.h>

#include "experiments/cli/analyze_parts.hpp"

namespace attnlab::cli::analyze_detail {
namespace {

using nlohmann::json;

double at(const analysis::HeadMatrix& m, size_t l, size_t i) { return l < m.size() && i < m[l].size() ? m[l][i] : NAN; }
json number(double v) { return std::isfinite(v) ? json(v) : json(nullptr); }

struct Best {
  int64_t layer = -1, head = -1;
  double value = NAN;
};
Best best_of(const std::vector<std::vector<analysis::HeadRole>>& roles, double analysis::HeadRole::*field) {
  Best b;
  for (size_t l = 0; l < roles.size(); ++l)
    for (size_t i = 0; i < roles[l].size(); ++i) {
      const double v = roles[l][i].*field;
      if (!std::isnan(v) && (std::isnan(b.value) || v > b.value)) b = {int64_t(l), int64_t(i), v};
    }
  return b;
}

// ---------------------------------------------------------------------------- analysis.json

json head_json(const Measured& m, const analysis::StatsConfig& scfg, size_t l, size_t i) {
  const analysis::HeadRole& r = m.roles[l][i];
  const analysis::HeadStats& h = m.stats.layers[l].heads[i];
  json offsets = json::object();
  for (auto [off, c] : h.argmax_offsets) offsets[std::to_string(off)] = c;
  json classes = json::object();
  for (size_t c = 0; c < h.class_mass.size() && c < scfg.class_names.size(); ++c)
    classes[scfg.class_names[c]] = h.queries ? h.class_mass[c] / double(h.queries) : 0.0;
  return {{"layer", l},
          {"head", i},
          {"role", r.label()},
          {"confidence", number(r.confidence)},
          {"top_offset", r.offset},
          {"top_offset_share", r.offset_share},
          {"positional", r.positional},
          {"structural_share", number(r.structural)},
          {"structural", r.is_structural},
          {"rare_mass", number(r.rare_mass)},
          {"rare", r.is_rare},
          {"retrieval_mass", number(r.retrieval)},
          {"retrieval", r.is_retrieval},
          {"previous_token_mass", number(r.previous_token)},
          {"previous_token", r.is_previous_token},
          {"induction_mass", number(r.induction)},
          {"induction", r.is_induction},
          {"importance", number(at(m.imp.normalized, l, i))},
          {"importance_raw", number(at(m.imp.raw, l, i))},
          {"relevance", number(at(m.rel.normalized, l, i))},
          {"relevance_raw", number(at(m.rel.raw, l, i))},
          {"queries", h.queries},
          {"class_mass", classes},
          {"argmax_offsets", offsets}};
}

}  // namespace

json analysis_json(const AnalyzeOptions& o, const models::LoadedRun& run, const std::optional<json>& summary,
                   bool complete, const Measured& m) {
  const analysis::AttentionStats& stats = m.stats;
  const analysis::RoleThresholds& t = m.thresholds;
  json j;
  j["run_dir"] = o.run_dir.string();
  j["experiment"] = run.experiment;  // from meta.json: an unfinished run has no summary.json
  j["task"] = run.task.name;
  j["attention"] = run.config.get_string("model.attention");
  j["step"] = run.step;
  j["complete"] = complete;
  j["metrics"] = summary && summary->contains("metrics") ? (*summary)["metrics"] : json(nullptr);
  j["examples"] = stats.examples;
  j["thresholds"] = {{"positional", t.positional},         {"structural_margin", t.structural_margin},
                     {"rare_mass", t.rare_mass},           {"rare_margin", t.rare_margin},
                     {"retrieval_mass", t.retrieval_mass}, {"retrieval_margin", t.retrieval_margin},
                     {"previous_token", t.previous_token}, {"previous_margin", t.previous_margin},
                     {"induction", t.induction},           {"induction_margin", t.induction_margin}};
  j["baselines"] = {{"structural_fixed_offset", number(analysis::structural_baseline(stats))},
                    {"rare_uniform", number(analysis::rare_uniform_baseline(stats))},
                    {"retrieval_uniform", number(analysis::retrieval_uniform_baseline(stats))},
                    {"structural_queries", stats.structural_queries},
                    {"rare_queries", stats.rare_queries},
                    {"retrieval_queries", stats.retrieval_queries},
                    {"previous_token_uniform", stats.circuits.examples ? number(stats.circuits.previous_uniform) : json(nullptr)},
                    {"induction_uniform", stats.circuits.examples ? number(stats.circuits.induction_uniform) : json(nullptr)},
                    {"repeated_sequences", stats.circuits.examples},
                    {"repeated_half", stats.circuits.half}};
  j["importance"] = m.imp.unavailable.empty() ? json("computed") : json("unavailable: " + m.imp.unavailable);
  j["relevance"] = m.rel.unavailable.empty() ? json("computed") : json("unavailable: " + m.rel.unavailable);
  if (m.check)
    j["relevance_check"] = {{"explained", m.check->explained}, {"input_relevance", m.check->input_relevance},
                            {"branch", m.check->branch}};
  const analysis::StatsConfig scfg = stats_config(run, 0);
  json layers = json::array();
  int64_t n_positional = 0, n_structural = 0, n_rare = 0, n_retrieval = 0, n_previous = 0, n_induction = 0;
  for (size_t l = 0; l < m.roles.size(); ++l) {
    json heads = json::array();
    for (size_t i = 0; i < m.roles[l].size(); ++i) {
      const analysis::HeadRole& r = m.roles[l][i];
      n_positional += r.positional, n_structural += r.is_structural, n_rare += r.is_rare, n_retrieval += r.is_retrieval;
      n_previous += r.is_previous_token, n_induction += r.is_induction;
      heads.push_back(head_json(m, scfg, l, i));
    }
    layers.push_back({{"layer", l}, {"heads", heads}});
  }
  j["layers"] = layers;
  j["role_counts"] = {
      {"positional", n_positional}, {"structural", n_structural}, {"rare", n_rare}, {"retrieval", n_retrieval},
      {"previous_token", n_previous}, {"induction", n_induction}};
  const Best bs = best_of(m.roles, &analysis::HeadRole::structural), br = best_of(m.roles, &analysis::HeadRole::rare_mass),
             bq = best_of(m.roles, &analysis::HeadRole::retrieval),
             bp = best_of(m.roles, &analysis::HeadRole::previous_token), bi = best_of(m.roles, &analysis::HeadRole::induction);
  if (bs.layer >= 0)
    j["best_structural"] = {{"layer", bs.layer}, {"head", bs.head}, {"share", bs.value},
                            {"margin", bs.value - analysis::structural_baseline(stats)}};
  if (br.layer >= 0)
    j["best_rare"] = {{"layer", br.layer}, {"head", br.head}, {"mass", br.value},
                      {"margin", br.value - analysis::rare_uniform_baseline(stats)}};
  if (bq.layer >= 0)
    j["best_retrieval"] = {{"layer", bq.layer}, {"head", bq.head}, {"mass", bq.value},
                           {"margin", bq.value - analysis::retrieval_uniform_baseline(stats)}};
  if (bp.layer >= 0)
    j["best_previous_token"] = {{"layer", bp.layer}, {"head", bp.head}, {"mass", bp.value},
                                {"margin", bp.value - stats.circuits.previous_uniform}};
  if (bi.layer >= 0)
    j["best_induction"] = {{"layer", bi.layer}, {"head", bi.head}, {"mass", bi.value},
                           {"margin", bi.value - stats.circuits.induction_uniform}};
  return j;
}

// ---------------------------------------------------------------------------- roles.md

namespace {


std::string metrics_line(const json& metrics) {
  std::string m;
  for (auto& [k, v] : metrics.items())
    if (v.is_number_integer() || (v.is_number() && v.get<double>() == std::round(v.get<double>())))
      m += fmt::format("{}{} = {:.0f}", m.empty() ? "" : ", ", k, v.get<double>());
    else if (v.is_number())
      m += fmt::format("{}{} = {:.4g}", m.empty() ? "" : ", ", k, v.get<double>());
  return "Final metrics: " + m + ".\n";
}

// The best head of each measured role against its baseline, one sentence each.
std::string best_lines(const json& j, const analysis::RoleThresholds& t) {
  std::string md;
  if (j.contains("best_structural")) {
    const json& b = j["best_structural"];
    const double share = b["share"].get<double>(), margin = b["margin"].get<double>();
    md += fmt::format("Structural (ListOps): best head layer {} head {} puts its maximum on the enclosing operator for "
                      "{:.1f}% of tokens; the best fixed-offset baseline is {:.1f}%: {:+.1f} points (a structural head "
                      "needs >= +{:.0f}).\n",
                      b["layer"].get<int64_t>(), b["head"].get<int64_t>(), 100 * share, 100 * (share - margin),
                      100 * margin, 100 * t.structural_margin);
  }
  // The mass roles: "<what>: best head layer L head H puts a mean M of <whose> weight on <where>;
  // uniform attention would put U there (a <kind> head needs >= T and >= uniform + D)."
  auto mass_line = [&](const char* key, const char* what, const char* whose, const char* where, const char* kind,
                       double mass_threshold, double margin_threshold) {
    if (!j.contains(key)) return;
    const json& b = j[key];
    const double mass = b["mass"].get<double>();
    md += fmt::format("{}: best head layer {} head {} puts a mean {:.3f} of {} weight on {}; uniform attention would "
                      "put {:.3f} there (a {} head needs >= {:.2f} and >= uniform + {:.2f}).\n",
                      what, b["layer"].get<int64_t>(), b["head"].get<int64_t>(), mass, whose, where,
                      mass - b["margin"].get<double>(), kind, mass_threshold, margin_threshold);
  };
  mass_line("best_rare", "Rare tokens", "its", "the rarest visible characters", "rare-token", t.rare_mass, t.rare_margin);
  mass_line("best_retrieval", "Retrieval (associative recall)", "the query's", "the answer's position", "retrieval",
            t.retrieval_mass, t.retrieval_margin);
  mass_line("best_previous_token", "Previous token (repeated random sequence)", "each token's", "the token just before it",
            "previous-token", t.previous_token, t.previous_margin);
  mass_line("best_induction", "Induction (repeated random sequence)", "a second-half token's",
            "the token after its earlier occurrence", "induction", t.induction, t.induction_margin);
  return md;
}

}  // namespace

std::string roles_markdown(const AnalyzeOptions& o, const models::LoadedRun& run, const json& j, const Measured& m) {
  std::string md = fmt::format("# Head roles: {}\n\n", o.run_dir.string());
  md += fmt::format("Run: experiment `{}`, task `{}`, attention `{}`, checkpoint step {}{}.\n",
                    j["experiment"].get<std::string>(), run.task.name, j["attention"].get<std::string>(), run.step,
                    j["complete"].get<bool>() ? "" : " (run not complete)");
  if (j["metrics"].is_object()) md += metrics_line(j["metrics"]);
  md += fmt::format("Measured on the first {} validation examples.\n\n", m.stats.examples);
  size_t heads = 0;
  for (const auto& l : m.roles) heads += l.size();
  const json& c = j["role_counts"];
  md += fmt::format("Roles: {} positional, {} structural, {} rare-token, {} retrieval, {} previous-token, {} induction "
                    "heads of {}.\n",
                    c["positional"].get<int64_t>(), c["structural"].get<int64_t>(), c["rare"].get<int64_t>(),
                    c["retrieval"].get<int64_t>(), c["previous_token"].get<int64_t>(), c["induction"].get<int64_t>(),
                    heads);
  md += best_lines(j, m.thresholds);
  md += m.imp.unavailable.empty() ? "Importance: |dL/d head_mask| (Michel et al. 2019), l2-normalised per layer.\n"
                                  : "Importance: not computed: " + m.imp.unavailable + "\n";
  md += m.rel.unavailable.empty() ? "Relevance: LRP with the AH and LN rules (Ali et al. 2022), normalised per layer.\n"
                                  : "Relevance: not computed: " + m.rel.unavailable + "\n";
  md += "\n" + analysis::role_table(m.stats, m.imp.unavailable.empty() ? &m.imp.normalized : nullptr,
                                    m.rel.unavailable.empty() ? &m.rel.normalized : nullptr, m.thresholds);
  return md;
}

}  // namespace attnlab::cli::analyze_detail
