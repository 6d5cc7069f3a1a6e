/// @file
/// The pieces of `attnlab viz` (heads_commands.hpp) that viz.cpp (the static page) and
/// viz_serve.cpp (the page served with --serve, which computes maps of the student's input) share:
/// a run's model and probe, one example's maps encoded for the page, and the page itself.
/// @ingroup cli
#pragma once
#include <filesystem>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "experiments/cli/heads_commands.hpp"

/// @addtogroup cli
/// @{
namespace attnlab::cli::viz_detail {

/// One run on the page: its model, the maps of every example and what it predicted.
struct PageRun {
  std::filesystem::path dir;
  models::LoadedRun run;
  analysis::Probe probe;
  std::vector<int64_t> heads_per_layer;
  nlohmann::json maps = nlohmann::json::array();   ///< [example][layer][head]
  nlohmann::json notes = nlohmann::json::array();  ///< per example: what this run predicted
};
PageRun load_page_run(const std::filesystem::path& dir);

/// The positions of an example the page shows (padding is neither query nor key) and their labels.
struct Axis {
  std::vector<int64_t> keep;
  nlohmann::json labels = nlohmann::json::array();
};
Axis example_axis(const models::LoadedRun& run, const analysis::Probe& probe, const data::Batch& one, int64_t N);

/// Every layer and head's map of one example (maps: per layer (1, h, N, N)) restricted to `keep`:
/// [layer][head] base64 strings of n x n little-endian uint16 weights (w * 65535), n = keep.size().
nlohmann::json maps_json(const std::vector<Tensor>& maps, const std::vector<int64_t>& keep);

/// The examples of the static page: validation windows (language models) or whole validation
/// examples of at most o.max_tokens tokens (classifiers), with every run's maps of each.
nlohmann::json collect_examples(const VizOptions& o, std::vector<PageRun>& runs);

/// The page's description of one run: title, task, attention, layers, maps, notes, and the head
/// summary of analysis.json when `attnlab analyze` wrote one.
nlohmann::json run_json(const PageRun& r, const std::string& title);

/// The page's data ({"viridis", "examples", "runs"} plus, when served, "serve") spliced into the
/// asset experiments/cli/viz_page.html.
nlohmann::json page_data(const nlohmann::json& examples, const std::vector<PageRun>& runs);
std::string page_of(const nlohmann::json& data);

}  // namespace attnlab::cli::viz_detail

namespace attnlab::cli::viz_detail {

/// What `viz --serve` answers (viz_serve.cpp), apart from the HTTP server: the page, and the maps
/// of one input. One model serves every request, so attend() holds a mutex while it runs the
/// model.
class VizService {
 public:
  /// Loads o.run_dir and captures the page's validation examples; the same errors as `viz`.
  explicit VizService(const VizOptions& o);

  /// The page: the static page's data plus "serve" (the API, the input limits and mode, and the
  /// classifiers' examples as editable text).
  const std::string& page() const { return page_; }

  struct Reply {
    int status;        ///< 200, or RequestError's 400 / 404 / 413, or 500
    std::string body;  ///< JSON: the example (tokens, note, prediction, layers, maps) or {"error": message}
  };
  /// GET /api/attend?QUERY (viz_request.hpp). Never throws.
  Reply attend(std::string_view query);

  int64_t max_tokens() const { return max_tokens_; }  // min(--max-tokens, the task's sequence length)

 private:
  nlohmann::json example_json(const data::Batch& batch, const std::string& input, std::optional<int64_t> target);
  std::vector<PageRun> runs_;  ///< one
  int64_t max_tokens_;
  size_t max_input_bytes_;
  std::string page_;
  std::mutex model_mutex_;
};

}  // namespace attnlab::cli::viz_detail
/// @}
