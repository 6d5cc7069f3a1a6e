/// @file
/// The pieces of `attnlab analyze` (heads_commands.hpp) that analyze.cpp (measuring, plotting,
/// the command) and analyze_write.cpp (analysis.json, roles.md) share.
/// @ingroup cli
#pragma once
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "experiments/analysis/heads.hpp"
#include "experiments/analysis/statistics.hpp"
#include "experiments/cli/heads_commands.hpp"

/// @addtogroup cli
/// @{
namespace attnlab::cli::analyze_detail {

/// What the recorder measures for the run's task: ListOps structure and token classes, rare
/// tokens against character counts of the training text for a language model, retrieval for
/// associative recall.
analysis::StatsConfig stats_config(const models::LoadedRun& run, int64_t keep);

/// One of the gradient scores, or why it could not be computed for this variant.
struct Scores {
  analysis::HeadMatrix raw, normalized;
  std::string unavailable;  ///< empty when computed
};

/// Everything analyze measures on a run: attention statistics, roles and the gradient scores.
struct Measured {
  analysis::AttentionStats stats;
  analysis::RoleThresholds thresholds;
  std::vector<std::vector<analysis::HeadRole>> roles;
  Scores imp, rel;
  std::optional<analysis::RelevanceCheck> check;
};

/// analysis.json: the run, thresholds, baselines and every head's numbers and role.
nlohmann::json analysis_json(const AnalyzeOptions& o, const models::LoadedRun& run,
                             const std::optional<nlohmann::json>& summary, bool complete, const Measured& m);
/// roles.md: the run, the role counts, the best head of each measured role, the role table.
std::string roles_markdown(const AnalyzeOptions& o, const models::LoadedRun& run, const nlohmann::json& j,
                           const Measured& m);

}  // namespace attnlab::cli::analyze_detail
/// @}
