// `attnlab viz RUN_DIR [RUN_B]` (heads_commands.hpp): one self-contained HTML page to browse a
// run's attention maps, or two runs' maps side by side on the same examples. The page is an
// asset, experiments/cli/viz_page.html, embedded at build time as kVizPage (cmake/embed_text.cmake);
// the data is spliced in as JSON inside <script type="application/json">. Its inline script
// decodes the maps and draws every head of the chosen layer as a grid, the chosen head large,
// and a colour bar. No external resource is referenced (no fonts, no scripts, no images), so
// the file works offline and can be mailed around.
//
// Size: each map is n x n weights quantised to 16 bits (|error| <= 1/131070) and base64-coded,
// 2.67 bytes per weight: runs x examples x layers x heads x n^2 of them, bounded by --examples <= 8 and
// --max-tokens <= 256.
#include <algorithm>
#include <cmath>
#include <fstream>
#include <iostream>
#include <optional>
#include <sstream>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "autograd/ops.hpp"
#include "experiments/analysis/probe.hpp"
#include "experiments/cli/commands.hpp"
#include "experiments/cli/heads_commands.hpp"
#include "experiments/cli/viz_page.hpp"
#include "experiments/cli/viz_parts.hpp"
#include "experiments/plot/png.hpp"
#include "experiments/runner/config.hpp"
#include "tensor/io.hpp"
#include "experiments/runner/file_bounds.hpp"

namespace attnlab::cli {
namespace viz_detail {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

std::string base64(const std::vector<uint8_t>& bytes) {
  static constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  for (size_t i = 0; i < bytes.size(); i += 3) {
    const uint32_t v = uint32_t(bytes[i]) << 16 | (i + 1 < bytes.size() ? uint32_t(bytes[i + 1]) << 8 : 0) |
                       (i + 2 < bytes.size() ? uint32_t(bytes[i + 2]) : 0);
    out += kAlphabet[v >> 18 & 63];
    out += kAlphabet[v >> 12 & 63];
    out += i + 1 < bytes.size() ? kAlphabet[v >> 6 & 63] : '=';
    out += i + 2 < bytes.size() ? kAlphabet[v & 63] : '=';
  }
  return out;
}

// One head's map restricted to `keep` positions, row-major, as little-endian uint16 (w * 65535).
std::string encode_map(const std::vector<double>& p, int64_t N, int64_t offset, const std::vector<int64_t>& keep) {
  std::vector<uint8_t> bytes;
  bytes.reserve(keep.size() * keep.size() * 2);
  for (int64_t q : keep)
    for (int64_t k : keep) {
      const auto v = uint16_t(std::lround(std::clamp(p[size_t(offset + q * N + k)], 0.0, 1.0) * 65535));
      bytes.push_back(uint8_t(v & 255));
      bytes.push_back(uint8_t(v >> 8));
    }
  return base64(bytes);
}

}  // namespace

Axis example_axis(const models::LoadedRun& run, const analysis::Probe& probe, const data::Batch& one, int64_t N) {
  Tensor tokens = probe.axis_tokens ? probe.axis_tokens(one) : Tensor();  // (1, N)
  const std::vector<int64_t> tok = tokens.defined() ? tokens.to_vector<int64_t>() : std::vector<int64_t>(size_t(N), -2);
  Axis a;
  for (int64_t p = 0; p < N; ++p) {
    if (run.task.pad_id >= 0 && tok[size_t(p)] == run.task.pad_id) continue;
    a.keep.push_back(p);
    a.labels.push_back(axis_label(run, tok[size_t(p)], p));
  }
  return a;
}

json maps_json(const std::vector<Tensor>& maps, const std::vector<int64_t>& keep) {
  json layers = json::array();
  for (const Tensor& m : maps) {  // (1, h, N, N)
    const int64_t N = m.size(2);
    const std::vector<double> p = to(m, kFloat64).to_vector<double>();
    json heads = json::array();
    for (int64_t i = 0; i < m.size(1); ++i) heads.push_back(encode_map(p, N, i * N * N, keep));
    layers.push_back(heads);
  }
  return layers;
}

namespace {

// analysis.json's per-head numbers, when `attnlab analyze` has written it next to the run.
json head_summary(const fs::path& run_dir) {
  if (!fs::exists(run_dir / "analysis" / "analysis.json")) return nullptr;
  json a = json::parse(read_text((run_dir / "analysis" / "analysis.json").string(), runner::kRecordFileBound), nullptr,
                       false);
  if (a.is_discarded() || !a.contains("layers")) return nullptr;
  json heads = json::array();
  for (const json& l : a["layers"])
    for (const json& h : l["heads"])
      heads.push_back({{"layer", h["layer"]}, {"head", h["head"]}, {"role", h["role"]}, {"confidence", h["confidence"]},
                       {"importance", h["importance"]}, {"relevance", h["relevance"]}, {"offset", h["top_offset"]},
                       {"offset_share", h["top_offset_share"]},
                       {"retrieval_mass", h.value("retrieval_mass", json(nullptr))},
                       {"previous_token_mass", h.value("previous_token_mass", json(nullptr))},
                       {"induction_mass", h.value("induction_mass", json(nullptr))}});
  return {{"heads", heads}, {"examples", a.value("examples", 0)}, {"importance", a.value("importance", "")},
          {"relevance", a.value("relevance", "")}};
}

}  // namespace

PageRun load_page_run(const fs::path& dir) {
  PageRun r{dir, load_run_checked(dir), {}, {}};
  r.probe = run_probe(r.run);
  return r;
}

namespace {

// Two runs are shown on the same examples (drawn from the first run's validation split), so
// every task.* key must agree; ValueError naming the first that does not.
void check_same_task(const PageRun& a, const PageRun& b) {
  for (const auto& field : a.run.config.schema().fields()) {
    if (field.key.rfind("task.", 0) != 0) continue;
    const std::string va = runner::to_toml_value(a.run.config.get(field.key));
    const std::string vb = b.run.config.schema().find(field.key) ? runner::to_toml_value(b.run.config.get(field.key)) : "(absent)";
    if (va != vb)
      fail<ValueError>("{} and {} differ in {} ({} vs {}); viz compares two runs on the same examples, so their tasks "
                       "must be the same",
                       a.dir.string(), b.dir.string(), field.key, va, vb);
  }
}

// Captures every run's maps of one example; `label` (classifiers) is the example's target.
void add_example(std::vector<PageRun>& runs, json& examples, const data::Batch& b, const std::string& note,
                 const std::optional<int64_t>& target) {
  Axis axis;
  for (size_t r = 0; r < runs.size(); ++r) {
    PageRun& pr = runs[r];
    auto [logits, maps] = analysis::capture_attention(pr.probe, b);
    if (r == 0) axis = example_axis(pr.run, pr.probe, b, maps[0].size(2));
    pr.maps.push_back(maps_json(maps, axis.keep));
    pr.notes.push_back(target ? fmt::format("predicted {}", pr.run.task.label(argmax(logits, -1).item<int64_t>()))
                              : std::string("next-token prediction at every position"));
    pr.heads_per_layer.clear();
    for (const Tensor& m : maps) pr.heads_per_layer.push_back(m.size(1));
  }
  examples.push_back({{"tokens", axis.labels}, {"note", note}});
}

}  // namespace

json collect_examples(const VizOptions& o, std::vector<PageRun>& runs) {
  const models::LoadedRun& run = runs[0].run;
  json examples = json::array();
  const int64_t available = validation_size(run);
  if (run.task.language_model) {
    // Causal: the first T positions of a window attend only among themselves, so a window cut
    // to --max-tokens shows exactly what the model computes on them.
    const int64_t T = std::min(o.max_tokens, run.task.seq_len), n = std::min(o.examples, available);
    for_each_validation_batch(run, n, 1, [&](const data::Batch& b) {
      data::Batch cut{narrow(b.inputs, 1, 0, T), narrow(b.targets, 1, 0, T)};  // (1, T), (1, T)
      add_example(runs, examples, cut, fmt::format("validation window {}", examples.size()), std::nullopt);
    });
    return examples;
  }
  // Bidirectional: an example is shown whole or not at all.
  const int64_t scan = std::min<int64_t>(available, 2000);
  int64_t index = 0;
  for_each_validation_batch(run, scan, 1, [&](const data::Batch& b) {
    const int64_t i = index++;
    if (int64_t(examples.size()) >= o.examples) return;
    int64_t real = b.inputs.size(1);
    if (run.task.pad_id >= 0 && b.inputs.dim() == 2) real = sum(ne(b.inputs, double(run.task.pad_id))).item<int64_t>();
    if (real > o.max_tokens) return;
    const int64_t target = b.targets.item<int64_t>();
    add_example(runs, examples, b, fmt::format("validation example {}: label {}", i, run.task.label(target)), target);
  });
  if (examples.empty())
    fail<ValueError>("none of the first {} validation examples has <= {} tokens; raise --max-tokens (up to 256)", scan,
                     o.max_tokens);
  return examples;
}

json run_json(const PageRun& r, const std::string& title) {
  return {{"title", title},
          {"run",
           {{"task", r.run.task.name},
            {"attention", r.run.config.get_string("model.attention")},
            {"step", r.run.step},
            {"causal", r.probe.causal}}},
          {"layers", r.heads_per_layer},
          {"maps", r.maps},
          {"notes", r.notes},
          {"summary", head_summary(r.dir)}};
}

json page_data(const json& examples, const std::vector<PageRun>& runs) {
  json viridis = json::array();
  for (int k = 0; k <= 8; ++k) {
    const plot::Rgb c = plot::viridis(k / 8.0);
    viridis.push_back({c[0], c[1], c[2]});
  }
  json page_runs = json::array();
  for (const PageRun& r : runs) page_runs.push_back(run_json(r, r.dir.string()));
  return {{"viridis", viridis}, {"examples", examples}, {"runs", page_runs}};
}

std::string page_of(const json& data) {
  // "</" would end the <script> element early; "<\/" is the same JSON string.
  std::string text = data.dump();
  for (size_t p = 0; (p = text.find("</", p)) != std::string::npos; p += 3) text.replace(p, 2, "<\\/");
  std::string page = kVizPage;
  const std::string marker = "@DATA@";
  page.replace(page.find(marker), marker.size(), text);
  return page;
}

}  // namespace viz_detail

namespace {

using namespace viz_detail;

int viz(const VizOptions& o, std::ostream& out) {
  if (o.examples < 1 || o.examples > 8) fail<ValueError>("--examples must be in [1, 8], got {}", o.examples);
  if (o.max_tokens < 2 || o.max_tokens > 256) fail<ValueError>("--max-tokens must be in [2, 256], got {}", o.max_tokens);
  std::vector<PageRun> runs;
  runs.push_back(load_page_run(o.run_dir));
  if (!o.other.empty()) {
    runs.push_back(load_page_run(o.other));
    check_same_task(runs[0], runs[1]);
  }
  const fs::path path = o.out.empty() ? o.run_dir / "viz.html" : o.out;
  const json examples = collect_examples(o, runs);

  const json data = page_data(examples, runs);
  const std::string page = page_of(data);
  if (!path.parent_path().empty()) fs::create_directories(path.parent_path());
  write_text_atomic(path.string(), page);
  int64_t heads = 0;
  for (int64_t h : runs[0].heads_per_layer) heads += h;
  out << fmt::format("wrote {} ({} KB): {} examples, {} run(s), {} layers, {} heads{}\n", path.string(), page.size() / 1024,
                     examples.size(), runs.size(), runs[0].heads_per_layer.size(), heads,
                     data["runs"][0]["summary"].is_null() ? " (no analysis.json: run attnlab analyze for the head summary)" : "");
  return 0;
}

}  // namespace

int run_viz(const VizOptions& o, std::ostream& out, std::ostream& err) {
  try {
    return viz(o, out);
  } catch (...) {
    return exit_status(nullptr, "viz", {o.run_dir.string()}, out, err);
  }
}

void add_viz_command(CLI::App& app, int& status) {
  auto o = std::make_shared<VizOptions>();
  auto* cmd = app.add_subcommand("viz", "write a self-contained HTML page to browse a run's attention maps (docs/cli.md)");
  auto dirs = std::make_shared<std::vector<fs::path>>();
  cmd->add_option("run_dirs", *dirs, "one run directory, or two to show side by side on the same examples")
      ->required()
      ->expected(1, 2);
  auto* out = cmd->add_option("--out", o->out, "HTML file (default RUN_DIR/viz.html)");
  cmd->add_option("--examples", o->examples, "validation examples on the page (1..8, default 3)")->check(CLI::Range(1, 8));
  cmd->add_option("--max-tokens", o->max_tokens, "longest example shown (2..256, default 64)")->check(CLI::Range(2, 256));
  auto* serve = cmd->add_flag("--serve", o->serve,
                               "serve the page on a local HTTP server where you type your own input (one run; "
                               "SIGINT/SIGTERM stop it)")
                    ->excludes(out);
  cmd->add_option("--port", o->port, "with --serve: the TCP port (default 8000; 0 = any free port, printed)")
      ->check(CLI::Range(0, 65535))
      ->needs(serve);
  cmd->add_option("--host", o->host, "with --serve: the address to listen on (default 127.0.0.1, this machine only)")
      ->needs(serve);
  cmd->callback([o, dirs, &status] {
    o->run_dir = dirs->at(0);
    o->other = dirs->size() > 1 ? dirs->at(1) : fs::path();
    status = o->serve ? run_viz_serve(*o, std::cout, std::cerr) : run_viz(*o, std::cout, std::cerr);
  });
}

}  // namespace attnlab::cli
