// `attnlab analyze RUN_DIR` (heads_commands.hpp): the head-analysis library run over a finished
// run's validation examples, written as a role table, heatmaps, attention maps and JSON. Also the
// helpers `viz` shares: checked run loading, the run's probe and its validation batches.
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
#include "experiments/analysis/heads.hpp"
#include "experiments/analysis/statistics.hpp"
#include "experiments/cli/analyze_parts.hpp"
#include "experiments/cli/commands.hpp"
#include "experiments/cli/heads_commands.hpp"
#include "experiments/data/listops.hpp"
#include "experiments/plot/png.hpp"
#include "tensor/io.hpp"
#include "experiments/runner/file_bounds.hpp"

namespace attnlab::cli {

namespace fs = std::filesystem;
using nlohmann::json;
using namespace analyze_detail;

// ---------------------------------------------------------------------------- shared helpers

models::LoadedRun load_run_checked(const fs::path& dir) {
  if (!fs::is_directory(dir)) fail<FileError>("{}: no such run directory", dir.string());
  for (const char* f : {"meta.json", "config.toml"})
    if (!fs::is_regular_file(dir / f)) fail<FileError>("{}: missing (not a run directory?)", (dir / f).string());
  if (!fs::is_regular_file(dir / "checkpoint.safetensors"))
    fail<FileError>("{}: missing (an incomplete run: it has not saved a checkpoint yet)",
                    (dir / "checkpoint.safetensors").string());
  return models::load_run(dir);
}

analysis::Probe run_probe(const models::LoadedRun& run) {
  if (auto lm = std::dynamic_pointer_cast<nn::CausalLM>(run.model)) return analysis::lm_probe(*lm);
  if (auto c = std::dynamic_pointer_cast<nn::EncoderClassifier>(run.model))
    return analysis::classifier_probe(*c, run.task.pad_id);
  fail<ValueError>("analyze: the run's model is neither an encoder classifier nor a causal LM (task '{}')", run.task.name);
}

int64_t validation_size(const models::LoadedRun& run) {
  const runner::TaskData& t = run.task;
  if (t.language_model) return t.val_tokens.defined() ? (t.val_tokens.numel() - 1) / t.seq_len : 0;
  return t.val.size();
}

void for_each_validation_batch(const models::LoadedRun& run, int64_t count, int64_t batch,
                               const std::function<void(const data::Batch&)>& fn) {
  const runner::TaskData& t = run.task;
  if (count > validation_size(run))
    fail<ValueError>("{} validation examples asked for, the run's task '{}' has {}", count, t.name, validation_size(run));
  for (int64_t i = 0; i < count; i += batch) {
    const int64_t b = std::min(batch, count - i);
    data::Batch out;
    if (t.language_model) {
      // Windows side by side: inputs val[o, o + N), targets val[o + 1, o + N + 1), o = (i + k) N.
      std::vector<Tensor> xs, ys;
      for (int64_t k = 0; k < b; ++k) {
        const int64_t o = (i + k) * t.seq_len;
        xs.push_back(narrow(t.val_tokens, 0, o, t.seq_len));      // (N)
        ys.push_back(narrow(t.val_tokens, 0, o + 1, t.seq_len));  // (N)
      }
      out.inputs = stack(xs);   // (b, N)
      out.targets = stack(ys);  // (b, N)
    } else {
      out.inputs = narrow(t.val.inputs, 0, i, b);    // (b, N) or (b, N, F)
      out.targets = narrow(t.val.targets, 0, i, b);  // (b)
    }
    fn(out);
  }
}

std::string axis_label(const models::LoadedRun& run, int64_t token, int64_t position) {
  if (token == -1) return "CLS";
  if (token < -1) return std::to_string(position);  // no tokens (feature inputs)
  return run.task.token(token);
}

// What the recorder measures for the run's task: ListOps structure and token classes, rare
// tokens against character counts of the training text for a language model, retrieval for
// associative recall.
analysis::StatsConfig analyze_detail::stats_config(const models::LoadedRun& run, int64_t keep) {
  analysis::StatsConfig cfg;
  cfg.keep_examples = keep;
  const runner::TaskData& t = run.task;
  if (t.name == "listops") {
    cfg.listops_structure = true;
    cfg.class_names = {"digit", "operator", "]"};
    cfg.token_class.assign(size_t(data::kListOpsVocab), 0);  // padding is never a key
    for (int64_t id = data::kListOpsMin; id <= data::kListOpsSum; ++id) cfg.token_class[size_t(id)] = 1;
    cfg.token_class[size_t(data::kListOpsEnd)] = 2;
  }
  if (t.language_model) {
    cfg.rare_tokens = true;
    cfg.token_frequency.assign(size_t(t.vocab_size), 0.0);
    for (int64_t id : t.train_tokens.to_vector<int64_t>()) cfg.token_frequency[size_t(id)] += 1;
  }
  if (t.name == "recall") cfg.recall_keys = run.config.get_int("task.num_keys");
  return cfg;
}

namespace {


// summary.json when the run has one: a JSON object whose "experiment" and "status" are strings and
// "metrics" an object, as run_experiment writes it; FileError naming the file otherwise.
std::optional<json> read_summary(const fs::path& dir) {
  const fs::path p = dir / "summary.json";
  if (!fs::exists(p)) return std::nullopt;
  json j = json::parse(read_text(p.string(), runner::kRecordFileBound), nullptr, false);
  if (j.is_discarded()) fail<FileError>("{}: not valid JSON", p.string());
  if (!j.is_object()) fail<FileError>("{}: expected a JSON object, got a JSON {}", p.string(), j.type_name());
  for (const char* key : {"experiment", "status"})
    if (j.contains(key) && !j[key].is_string())
      fail<FileError>("{}: \"{}\" must be a string, got a JSON {}", p.string(), key, j[key].type_name());
  if (j.contains("metrics") && !j["metrics"].is_object())
    fail<FileError>("{}: \"metrics\" must be an object, got a JSON {}", p.string(), j["metrics"].type_name());
  return j;
}

// The PNG font is ASCII: the visible-space sign of the character tasks becomes '_'.
std::string png_label(const std::string& s) {
  const std::string space = "\u2423";
  std::string out;
  for (size_t p = 0; p < s.size(); ++p) {
    if (s.compare(p, space.size(), space) == 0) {
      out += '_';
      p += space.size() - 1;
    } else {
      out += s[p];
    }
  }
  return out;
}

// ---------------------------------------------------------------------------- measuring
// Previous-token and induction scores (analysis/circuits.hpp) of a token model on 16 repeated
// random sequences as long as the task's inputs allow (2 K <= N), seed 0; not measured (examples
// 0) for feature inputs or inputs shorter than 4 tokens.
analysis::CircuitStats circuits(const models::LoadedRun& run, const analysis::Probe& probe) {
  const runner::TaskData& t = run.task;
  if (t.vocab_size <= 0 || !probe.axis_tokens) return {};
  int64_t n = t.seq_len;
  if (!t.language_model) n = t.val.inputs.dim() == 2 ? t.val.inputs.size(1) : 0;
  if (n < 4) return {};
  Generator gen(0);
  return analysis::measure_circuits(probe, 16, n / 2, t.vocab_size, gen);
}

// Streams n validation examples through the recorder, importance and relevance.
Measured measure(const models::LoadedRun& run, int64_t n, const AnalyzeOptions& o) {
  analysis::Probe probe = run_probe(run);
  analysis::AttentionRecorder recorder(probe, stats_config(run, std::min(o.maps, n)));
  // Importance and relevance need the head_mask buffer (and relevance a composed softmax); a
  // variant without them still gets its attention statistics.
  std::optional<analysis::HeadImportance> importance;
  std::optional<analysis::HeadRelevance> relevance;
  Measured m;
  auto guarded = [](std::string& why, auto&& f) {
    if (!why.empty()) return;
    try {
      f();
    } catch (const ValueError& e) {
      why = e.what();
    }
  };
  guarded(m.imp.unavailable, [&] { importance.emplace(probe); });
  guarded(m.rel.unavailable, [&] { relevance.emplace(probe); });
  for_each_validation_batch(run, n, o.batch, [&](const data::Batch& b) {
    recorder.add(b);
    guarded(m.imp.unavailable, [&] { importance->add(b); });
    guarded(m.rel.unavailable, [&] { relevance->add(b); });
  });
  if (m.imp.unavailable.empty()) m.imp.raw = importance->raw(), m.imp.normalized = importance->normalized();
  if (m.rel.unavailable.empty()) {
    m.rel.raw = relevance->raw(), m.rel.normalized = relevance->normalized();
    m.check = relevance->check();
  }
  m.stats = recorder.stats();
  m.stats.circuits = circuits(run, probe);
  m.roles = analysis::head_roles(m.stats, m.thresholds);
  return m;
}

// ---------------------------------------------------------------------------- plotting

// One PNG per kept example, layer and head: DIR/maps/layer<l>/attention_b<b>_h<i>.png, padding
// left out (neither query nor key). Returns the number written.
int64_t save_maps(const fs::path& dir, const models::LoadedRun& run, const analysis::AttentionStats& stats) {
  int64_t files = 0;
  for (size_t k = 0; k < stats.kept_tokens.size(); ++k) {
    const std::vector<int64_t>& tok = stats.kept_tokens[k];
    std::vector<int64_t> keep;
    std::vector<std::string> labels;
    const int64_t N = stats.layers[0].kept[k].size(1);
    for (int64_t p = 0; p < N; ++p) {
      const int64_t t = tok.empty() ? -2 : tok[size_t(p)];
      if (t == run.task.pad_id && t >= 0) continue;
      keep.push_back(p);
      labels.push_back(png_label(axis_label(run, t, p)));
    }
    Tensor index = from_vector(keep);
    const int n = int(keep.size());
    for (size_t l = 0; l < stats.layers.size(); ++l) {
      Tensor m = index_select(index_select(stats.layers[l].kept[k], 1, index), 2, index);  // (h, n, n)
      const std::vector<double> P = to(m, kFloat64).to_vector<double>();
      const fs::path sub = dir / "maps" / fmt::format("layer{}", l);
      fs::create_directories(sub);
      for (int64_t i = 0; i < m.size(0); ++i, ++files) {
        plot::Heatmap h;
        h.title = fmt::format("layer {} head {}, example {}", l, i, k);
        h.rows = h.cols = n;
        h.values.assign(P.begin() + i * n * n, P.begin() + (i + 1) * n * n);
        h.row_labels = h.col_labels = labels;
        h.row_axis = "query", h.col_axis = "key";
        h.vmin = 0;
        plot::save_heatmap((sub / fmt::format("attention_b{}_h{}.png", k, i)).string(), h);
      }
    }
  }
  return files;
}

// The (layers x heads) heatmaps; returns the names of the files written.
std::vector<std::string> save_figures(const fs::path& dir, const Measured& m) {
  std::vector<std::string> files = {"roles.md", "analysis.json", "confidence.png"};
  analysis::save_head_heatmap((dir / "confidence.png").string(), "confidence", analysis::confidence(m.stats));
  if (m.imp.unavailable.empty()) {
    analysis::save_head_heatmap((dir / "importance.png").string(), "importance (l2-normalised per layer)", m.imp.normalized);
    files.push_back("importance.png");
  }
  if (m.rel.unavailable.empty()) {
    analysis::save_head_heatmap((dir / "relevance.png").string(), "LRP relevance (per layer)", m.rel.normalized);
    files.push_back("relevance.png");
  }
  return files;
}

// ---------------------------------------------------------------------------- the command

int analyze(const AnalyzeOptions& o, std::ostream& out) {
  if (o.examples < 1) fail<ValueError>("--examples must be >= 1, got {}", o.examples);
  if (o.maps < 0) fail<ValueError>("--maps must be >= 0, got {}", o.maps);
  models::LoadedRun run = load_run_checked(o.run_dir);
  const fs::path dir = o.out.empty() ? o.run_dir / "analysis" : o.out;
  const int64_t available = validation_size(run);
  const int64_t n = std::min(o.examples, available);
  if (n < 1) fail<ValueError>("{}: the task '{}' has no validation examples", o.run_dir.string(), run.task.name);
  if (n < o.examples) out << fmt::format("note: --examples {} but the validation split has {}; using {}\n", o.examples, available, n);
  const auto summary = read_summary(o.run_dir);
  const bool complete = summary && summary->value("status", "") == "complete";
  if (!complete) out << fmt::format("note: {} has no complete summary.json; analysing its checkpoint at step {}\n",
                                    o.run_dir.string(), run.step);

  const Measured m = measure(run, n, o);
  fs::create_directories(dir);
  const std::vector<std::string> files = save_figures(dir, m);
  const int64_t map_files = save_maps(dir, run, m.stats);
  json j = analysis_json(o, run, summary, complete, m);
  j["files"] = files;
  j["attention_maps"] = map_files;
  const std::string md = roles_markdown(o, run, j, m);
  write_text_atomic((dir / "roles.md").string(), md);
  write_text_atomic((dir / "analysis.json").string(), j.dump(2) + "\n");

  out << md << "\n";
  out << fmt::format("wrote {}: {} and {} attention maps under maps/\n", dir.string(), fmt::join(files, ", "), map_files);
  return 0;
}

}  // namespace

int run_analyze(const AnalyzeOptions& o, std::ostream& out, std::ostream& err) {
  try {
    return analyze(o, out);
  } catch (...) {
    return exit_status(nullptr, "analyze", {o.run_dir.string()}, out, err);
  }
}

void add_analyze_command(CLI::App& app, int& status) {
  auto o = std::make_shared<AnalyzeOptions>();
  auto* cmd = app.add_subcommand("analyze", "head analysis of a finished run: roles, heatmaps, attention maps (docs/analysis.md)");
  cmd->add_option("run_dir", o->run_dir, "run directory (attnlab run ... --run-dir DIR)")->required();
  cmd->add_option("--examples", o->examples, "validation examples to analyse (default 256)")->check(CLI::PositiveNumber);
  cmd->add_option("--out", o->out, "output directory (default RUN_DIR/analysis)");
  cmd->add_option("--maps", o->maps, "examples whose attention maps are drawn (default 2)")->check(CLI::Range(0, 64));
  cmd->add_option("--batch", o->batch, "examples per forward pass (default 32)")->check(CLI::Range(1, 4096));
  cmd->callback([o, &status] { status = run_analyze(*o, std::cout, std::cerr); });
}

}  // namespace attnlab::cli
