// Doctored checkpoints on every path that reads one: a CausalLM file whose metadata promises far
// more than its tensors hold (lm.layers = 999999999, lm.max_len = 200000000 over a 2-block model
// of width 16), and lm run directories whose config.toml or checkpoint disagree, are refused
// before any model is built, with a typed error naming the file, the key and the values, within a
// second: generate, inspect, analyze, viz, train.init_from and resume.
#include <chrono>
#include <filesystem>
#include <functional>
#include <sstream>

#include "cli/command_run.hpp"
#include "experiments/models/models.hpp"
#include "experiments/cli/commands.hpp"
#include "experiments/cli/heads_commands.hpp"
#include "experiments/runner/trainer.hpp"
#include "helpers.hpp"
#include "nn/lm_checkpoint.hpp"
#include "cli/lm_run.hpp"

using namespace attnlab;
using namespace attnlab::testing;
namespace fs = std::filesystem;

namespace {

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// Milliseconds `f` takes.
double millis(const std::function<void()>& f) {
  const auto t0 = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

fs::path scratch(const std::string& name) {
  const fs::path d = fresh_run_dir("doctored", name);
  fs::create_directories(d);
  return d;
}

// A 2-block CausalLM of width 16 over 4 token ids, max_len 32.
nn::LMConfig two_blocks(const std::string& positions = "learned") {
  nn::LMConfig c;
  c.block.d_model = 16;
  c.block.attention = "mha(heads=2)";
  c.layers = 2;
  c.vocab_size = 4;
  c.max_len = 32;
  c.positions = positions;
  return c;
}

// A real checkpoint of two_blocks(positions).
std::string two_block_file(const fs::path& dir, const std::string& positions = "learned") {
  manual_seed(0);
  nn::CausalLM model(two_blocks(positions));
  const std::string file = (dir / ("lm_" + positions + ".safetensors")).string();
  nn::save_causal_lm(file, model);
  return file;
}

// `file` with metadata `key` rewritten to `value`, tensors untouched, as a new file.
std::string doctored(const std::string& file, const std::string& key, const std::string& value) {
  Metadata m;
  const TensorMap weights = load_safetensors(file, &m);
  m[key] = value;
  const std::string out = file + "." + key + ".safetensors";
  save_safetensors(out, weights, m);
  return out;
}

fs::path tiny_lm_run(const std::string& name) { return testing::tiny_lm_run("doctored_run", name); }

// The run's checkpoint with a second block (a copy of block 0's tensors) that config.toml does not have.
void add_block(const fs::path& dir) {
  const std::string file = (dir / "checkpoint.safetensors").string();
  Metadata m;
  TensorMap state = load_safetensors(file, &m);
  TensorMap extra;
  for (const auto& [name, t] : state)
    if (name.rfind("model.blocks.0.", 0) == 0) extra["model.blocks.1." + name.substr(15)] = t;
  REQUIRE(!extra.empty());
  state.insert(extra.begin(), extra.end());
  save_safetensors(file, state, m);
}

}  // namespace

TEST_CASE("doctored CausalLM file: generate and load_causal_lm refuse lm.layers and lm.max_len at once") {
  const fs::path dir = scratch("generate");
  const std::string file = two_block_file(dir);
  CHECK(fs::file_size(file) < 64 * 1024);
  struct Case {
    std::string key, value, says;
  };
  for (const Case& c : {Case{"lm.layers", "999999999", "holds 2 blocks, but the metadata gives lm.layers = 999999999"},
                        Case{"lm.max_len", "200000000",
                             "'pos_emb.weight' has shape (32,16), but the metadata gives (200000000,16) (lm.max_len "
                             "200000000 rows)"},
                        Case{"lm.d_model", "1000000", "'tok_emb.weight' has shape (4,16), but the metadata gives "
                                                      "(4,1000000)"},
                        Case{"lm.ffn_hidden", "1000000000", "'blocks.0.ffn.fc1.weight' has shape (64,16), but the "
                                                            "metadata gives (1000000000,16)"},
                        Case{"lm.layers", "-3", "metadata gives lm.layers = -3; it must be >= 0"}}) {
    CAPTURE(c.key);
    const std::string bad = doctored(file, c.key, c.value);
    CommandRun r;
    const double ms = millis([&] { r = run_command(cli::run_generate, {"--checkpoint", bad, "--prompt-ids", "1"}); });
    CHECK(r.status == 1);
    CHECK(contains(r.err, "attnlab generate: " + bad + ": "));
    CHECK_MESSAGE(contains(r.err, c.says), r.err);
    CHECK(ms < 1000);
    MESSAGE(c.key << " = " << c.value << " refused by generate in " << ms << " ms");
    CHECK_THROWS_AS(nn::load_causal_lm(bad), FileError);
  }
  // A file that fits its metadata still loads and generates.
  CHECK(run_command(cli::run_generate, {"--checkpoint", file, "--prompt-ids", "1", "--tokens", "3"}).status == 0);
  fs::remove_all(dir);
}

TEST_CASE("doctored CausalLM file without learned positions: lm.max_len must fit the decoding caches in memory") {
  const fs::path dir = scratch("positions_none");
  const std::string file = two_block_file(dir, "none");
  const std::string bad = doctored(file, "lm.max_len", "200000000000");
  CommandRun r;
  const double ms = millis([&] { r = run_command(cli::run_generate, {"--checkpoint", bad, "--prompt-ids", "1"}); });
  CHECK(r.status == 1);
  CHECK_MESSAGE(contains(r.err, bad + ": the metadata gives lm.max_len = 200000000000 with positions none"), r.err);
  CHECK(contains(r.err, "GiB, above this machine's"));
  CHECK(ms < 1000);
  CHECK(run_command(cli::run_generate, {"--checkpoint", file, "--prompt-ids", "1", "--tokens", "3"}).status == 0);
  fs::remove_all(dir);
}

TEST_CASE("doctored CausalLM file: inspect --weights refuses it, naming the file") {
  const fs::path dir = scratch("inspect");
  const std::string bad = doctored(two_block_file(dir), "lm.layers", "999999999");
  CommandRun r;
  const double ms = millis([&] {
    r = run_command(cli::run_inspect, {"--spec", "mha(heads=2)", "--d-model", "16", "--weights", bad, "--save-weights",
                                       (dir / "out.safetensors").string()});
  });
  CHECK(r.status == 1);
  CHECK_MESSAGE(contains(r.err, "attnlab inspect: weights " + bad + ": "), r.err);
  CHECK(ms < 1000);
  fs::remove_all(dir);
}

TEST_CASE("doctored CausalLM file: train.init_from refuses it before reading its data") {
  const fs::path dir = scratch("init_from");
  const std::string file = two_block_file(dir);
  const std::string bad = doctored(file, "lm.layers", "999999999");
  nn::CausalLM model(two_blocks());
  std::string what;
  const double ms = millis([&] {
    try {
      runner::init_from_checkpoint(model, bad);
    } catch (const runner::ConfigError& e) {
      what = e.what();
    }
  });
  CHECK_MESSAGE(contains(what, "train.init_from: " + bad + " holds no 'model.' tensors"), what);
  CHECK(ms < 1000);
  // and through a run: the run fails with that message
  const fs::path run = fresh_run_dir("doctored_run", "init_from");
  std::string console;
  CHECK(run_catalog("lm", run,
                    {"task.length=24", "train.steps=1", "train.batch_size=2", "eval.batches=1", "model.d_model=16",
                     "model.layers=2", "model.attention=mha(heads=2)", "train.init_from=" + bad},
                    {}, &console) != 0);
  CHECK_MESSAGE(contains(console, "train.init_from: " + bad), console);
  fs::remove_all(run);
  fs::remove_all(dir);
}

TEST_CASE("doctored lm run: analyze, viz and generate refuse a config.toml or checkpoint that disagree") {
  const fs::path run = tiny_lm_run("analyze");
  // `says` follows "<file>: " in every command's error; the checkpoint unless another file is named.
  auto refused = [&](const std::string& says, const std::string& in = "") {
    cli::AnalyzeOptions a;
    a.run_dir = run;
    a.examples = 4;
    cli::VizOptions v;
    v.run_dir = run;
    std::ostringstream out, e1, e2;
    int s1 = 0, s2 = 0;
    const double analyze_ms = millis([&] { s1 = cli::run_analyze(a, out, e1); });
    const double viz_ms = millis([&] { s2 = cli::run_viz(v, out, e2); });
    CommandRun g;
    const double generate_ms = millis([&] { g = run_command(cli::run_generate, {"--checkpoint", run.string(), "--tokens", "3"}); });
    CHECK(s1 == 1);
    CHECK(s2 == 1);
    CHECK(g.status == 1);
    const std::string file = in.empty() ? (run / "checkpoint.safetensors").string() : in;
    for (const std::string& err : {e1.str(), e2.str(), g.err}) {
      // config.toml's errors name its line: "<file>:<line>: <says>".
      CHECK_MESSAGE(contains(err, in.empty() ? file + ": " + says : says), err);
      CHECK_MESSAGE(contains(err, file), err);
    }
    CHECK(analyze_ms < 1000);
    CHECK(viz_ms < 1000);
    CHECK(generate_ms < 1000);
    MESSAGE("refused in " << analyze_ms << " ms (analyze), " << viz_ms << " ms (viz), " << generate_ms << " ms (generate)");
  };
  // Out of the keys' ranges (docs/experiments.md, "Bounded counts"): config.toml itself is refused.
  const std::string config = (run / "config.toml").string();
  edit_config(run, "layers = 1", "layers = 999999999");
  refused("model.layers = 999999999 is out of its range [1, 4096]", config);
  edit_config(run, "layers = 999999999", "layers = 3");
  refused("holds 1 blocks, but the run's config.toml gives model.layers = 3");
  edit_config(run, "layers = 3", "layers = 1");
  edit_config(run, "d_model = 16", "d_model = 1000000");
  refused("model.d_model = 1000000 is out of its range [1, 65536]", config);
  edit_config(run, "d_model = 1000000", "d_model = 4096");
  refused("'model.tok_emb.weight' has shape");
  edit_config(run, "d_model = 4096", "d_model = 16");
  add_block(run);
  refused("holds 2 blocks, but the run's config.toml gives model.layers = 1");
  fs::remove_all(run);
}

TEST_CASE("doctored lm run: resuming refuses a checkpoint that holds other blocks than its config") {
  const fs::path run = tiny_lm_run("resume");
  fs::remove(run / "summary.json");  // unfinished: the next run resumes it
  add_block(run);
  std::string console;
  int status = 0;
  const double ms = millis([&] {
    status = run_catalog("lm", run, tiny_lm_sets(), {}, &console);
  });
  CHECK(status != 0);
  CHECK_MESSAGE(contains(console, (run / "checkpoint.safetensors").string() +
                                      ": holds 2 blocks, but the run's config gives model.layers = 1"),
                console);
  MESSAGE("resume refused in " << ms << " ms");
  fs::remove_all(run);
}
