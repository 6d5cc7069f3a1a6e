/// @file
/// `attnlab analyze RUN_DIR` and `attnlab viz RUN_DIR`: head analysis of a finished run
/// (docs/analysis.md, docs/cli.md). Both rebuild the run's model with models::load_run and read
/// examples of its validation split; main.cpp adds each with one line.
///
///   analyze  streams N validation examples through the head-analysis library (AttentionRecorder,
///            HeadImportance, HeadRelevance, head_roles) and writes DIR/roles.md, analysis.json,
///            confidence.png, importance.png, relevance.png and `maps/layer<l>/attention_b<b>_h<i>.png`
///   viz      writes one self-contained HTML page (inline CSS, JS and data; no network) to browse
///            every layer and head's attention map on a few examples (a grid of a layer's heads,
///            one head enlarged, a colour bar), of one run or of two side by side, with
///            analysis.json's per-head numbers when that file exists; with --serve, a local HTTP
///            server (viz_serve.cpp) serves the page and computes the maps of the student's own
///            input (typed text, or an edited example) on request
/// @ingroup cli
#pragma once
#include <filesystem>
#include <functional>
#include <ostream>
#include <string>
#include <vector>

// CLI11 is included only by the .cpp files that declare options: it is the costliest header to
// compile (docs/testing.md, "Build time").
namespace CLI {
class App;
}

#include "experiments/analysis/probe.hpp"
#include "experiments/models/models.hpp"

/// @addtogroup cli
/// @{
namespace attnlab::cli {

/// The options of `attnlab analyze RUN_DIR`.
struct AnalyzeOptions {
  std::filesystem::path run_dir;  ///< the run analysed
  std::filesystem::path out;  ///< empty: RUN_DIR/analysis
  int64_t examples = 256;     ///< validation examples streamed through the analysis
  int64_t maps = 2;           ///< examples whose attention maps are drawn as PNGs
  int64_t batch = 32;         ///< examples per forward pass
};
/// Returns the exit status (0 written, 1 failed: message on err naming the path or layer).
int run_analyze(const AnalyzeOptions& options, std::ostream& out, std::ostream& err);

/// The options of `attnlab viz RUN_DIR [OTHER_RUN]`.
struct VizOptions {
  std::filesystem::path run_dir;  ///< the run shown
  std::filesystem::path other;  ///< a second run shown side by side on the same examples; empty: none
  std::filesystem::path out;    ///< empty: RUN_DIR/viz.html
  int64_t examples = 3;       ///< 1..8
  int64_t max_tokens = 64;    ///< 2..256: longest example shown (the page grows as examples x tokens^2)
  bool serve = false;         ///< serve the page over HTTP instead of writing it (one run only)
  std::string host = "127.0.0.1";  ///< the address --serve binds
  int port = 8000;            ///< 0: any free port (printed)
};
/// `attnlab viz`: writes the page; the exit status (0 written, 1 failed: message on err).
int run_viz(const VizOptions& options, std::ostream& out, std::ostream& err);
/// `viz --serve`: serves the page until SIGINT or SIGTERM (viz_serve.cpp). Prints
/// "serving http://HOST:PORT/" on `out` once listening; returns 0 after a signal stopped it, 1
/// when the run cannot be loaded, the address cannot be bound, or the program was built without
/// cpp-httplib.
int run_viz_serve(const VizOptions& options, std::ostream& out, std::ostream& err);

/// Adds `analyze` to the tool; its callback stores the exit status in `status`.
void add_analyze_command(CLI::App& app, int& status);
/// Adds `viz` to the tool; its callback stores the exit status in `status`.
void add_viz_command(CLI::App& app, int& status);

// ---- shared by analyze and viz ----

/// load_run after checking that RUN_DIR is a directory holding meta.json, config.toml and
/// checkpoint.safetensors (FileError naming the missing path otherwise).
models::LoadedRun load_run_checked(const std::filesystem::path& run_dir);

/// The analysis probe of a loaded run: classifier_probe (with the task's padding id) or lm_probe.
analysis::Probe run_probe(const models::LoadedRun& run);

/// The validation examples a run offers: val split examples, or windows of val_tokens.
int64_t validation_size(const models::LoadedRun& run);
/// Validation examples of a run as batches of at most `batch`, given to `fn`: the first `count`
/// examples of the val split (classifiers), or `count` consecutive, non-overlapping windows of
/// task.seq_len tokens of val_tokens with their next-token targets (language models). ValueError
/// when the split holds fewer than `count`.
void for_each_validation_batch(const models::LoadedRun& run, int64_t count, int64_t batch,
                               const std::function<void(const data::Batch&)>& fn);

/// Display text of an axis token: the task's token text, "CLS" for -1, the index when the
/// inputs are not tokens.
std::string axis_label(const models::LoadedRun& run, int64_t token, int64_t position);

}  // namespace attnlab::cli
/// @}
