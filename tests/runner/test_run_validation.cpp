// `attnlab run` before it runs (experiments/runner/experiment.hpp): the whole config validated
// before the run directory exists (the catalog's check_model builds the attention), a complete
// run asked with another config refused with every differing key, --force setting the old
// directory aside as DIR.old-N, --dry-run printing the resolved config and creating nothing, and
// the sweep's validation applying the same check.
#include <filesystem>
#include <fstream>
#include <sstream>

#include "experiments/models/models.hpp"
#include "experiments/runner/experiment.hpp"
#include "experiments/runner/sweep.hpp"
#include "runner/run_helpers.hpp"

using namespace attnlab;
using namespace attnlab::runner;
using namespace attnlab::testing;
namespace fs = std::filesystem;

namespace {

// The catalog's `example` (a one-layer encoder on recall) for two steps, plus `sets`.
RunResult run_example(const fs::path& dir, std::vector<std::string> sets, bool force = false) {
  sets.insert(sets.begin(), "train.steps=2");
  std::ostringstream console;
  RunRequest r{"example", "quick", "", std::move(sets), dir, "test", force};
  int status = run_experiment(r, console, false);
  return {status, console.str()};
}

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("run: a bad attention spec is refused before the run directory exists; the corrected command runs") {
  fs::path dir = fresh_run_dir("bad_spec");
  RunResult typo = run_example(dir, {"model.attention=mha(head=4)"});
  CHECK(typo.status == kExitUsage);
  CHECK(has(typo.console, "model.attention = \"mha(head=4)\" (from --set)"));
  CHECK(has(typo.console, "head"));
  CHECK_FALSE(fs::exists(dir));

  RunResult shape = run_example(dir, {"model.attention=mha(heads=3)"});  // 3 does not divide d_model 32
  CHECK(shape.status == kExitUsage);
  CHECK(has(shape.console, "d_model = 32"));
  CHECK_FALSE(fs::exists(dir));

  RunResult pooling = run_example(dir, {"model.pooling=max"});
  CHECK(pooling.status == kExitUsage);
  CHECK(has(pooling.console, "model.pooling must be cls or mean, got 'max'"));
  CHECK_FALSE(fs::exists(dir));

  CHECK(run_example(dir, {"model.attention=mha(heads=4)"}).status == kExitComplete);
  CHECK(fs::exists(dir / "summary.json"));
  fs::remove_all(dir);
}

TEST_CASE("run: a complete run asked with another config is refused, naming every differing key") {
  fs::path dir = fresh_run_dir("complete_changed");
  REQUIRE(run_example(dir, {"task.train_size=256"}).status == kExitComplete);
  const std::string summary = read_file(dir / "summary.json"), config = read_file(dir / "config.toml");

  RunResult same = run_example(dir, {"task.train_size=256"});
  CHECK(same.status == kExitComplete);
  CHECK(has(same.console, "nothing to do"));

  RunResult changed = run_example(dir, {"task.train_size=256", "model.layers=3", "train.lr=0.01"});
  CHECK(changed.status == kExitUsage);
  CHECK(has(changed.console, "holds a complete run of another config"));
  CHECK(has(changed.console, "'model.layers' (run directory: 2, now: 3)"));
  CHECK(has(changed.console, "'train.lr' (run directory: 0.003, now: 0.01)"));
  CHECK(has(changed.console, "--force"));

  RunResult dropped = run_example(dir, {});  // the --set task.train_size left out
  CHECK(dropped.status == kExitUsage);
  CHECK(has(dropped.console, "'task.train_size' (run directory: 256, now:"));

  CHECK(read_file(dir / "summary.json") == summary);
  CHECK(read_file(dir / "config.toml") == config);
  fs::remove_all(dir);
}

TEST_CASE("run: --force sets the old run aside as DIR.old-N and starts afresh; it never moves a non-run directory") {
  fs::path dir = fresh_run_dir("force");
  fs::path old1 = dir, old2 = dir;
  old1 += ".old-1";
  old2 += ".old-2";
  fs::remove_all(old1);
  fs::remove_all(old2);
  REQUIRE(run_example(dir, {}).status == kExitComplete);
  const std::string summary = read_file(dir / "summary.json");

  RunResult forced = run_example(dir, {"model.layers=2"}, true);
  CHECK(forced.status == kExitComplete);
  CHECK(has(forced.console, "--force: moved " + dir.string() + " to " + old1.string()));
  CHECK(read_file(old1 / "summary.json") == summary);  // the old run, untouched
  CHECK(has(read_file(dir / "config.toml"), "layers = 2"));
  CHECK(fs::exists(dir / "summary.json"));

  CHECK(run_example(dir, {"model.layers=2"}, true).status == kExitComplete);  // same config, forced: afresh
  CHECK(fs::exists(old2 / "summary.json"));
  CHECK(fs::exists(old1 / "summary.json"));

  fs::path other = fresh_run_dir("force_not_a_run");
  fs::create_directories(other);
  std::ofstream(other / "notes.txt") << "not a run";
  RunResult refused = run_example(other, {}, true);
  CHECK(refused.status == kExitUsage);
  CHECK(has(refused.console, "is not a run directory"));
  CHECK(read_file(other / "notes.txt") == "not a run");
  for (const fs::path& p : {dir, old1, old2, other}) fs::remove_all(p);
}

TEST_CASE("run: --dry-run validates, prints the resolved config as TOML and creates nothing") {
  fs::path dir = fresh_run_dir("dry");
  RunRequest r{"example", "quick", "", {"train.steps=7", "model.attention=talking_heads(heads=4)"}, dir, "test"};
  std::ostringstream out, console;
  CHECK(dry_run_experiment(r, out, console) == kExitComplete);
  CHECK(has(console.str(), "would start a fresh run in " + dir.string()));
  CHECK_FALSE(fs::exists(dir));
  const Experiment& e = find_experiment("example");
  Config printed(e.schema);
  printed.merge_toml(out.str(), "dry run");
  CHECK(printed == resolve_config(e, "quick", "", r.sets));
  CHECK(printed.get_int("train.steps") == 7);

  std::ostringstream out2, console2;
  RunRequest bad = r;
  bad.sets.push_back("model.attention=nope(heads=4)");
  CHECK(dry_run_experiment(bad, out2, console2) == kExitUsage);
  CHECK(has(console2.str(), "unknown variant nope"));
  CHECK(out2.str().empty());

  // Against a complete run: same config, nothing to do; another config, refused (or set aside with --force).
  REQUIRE(run_example(dir, {}).status == kExitComplete);
  std::ostringstream o3, c3, o4, c4, o5, c5;
  RunRequest same{"example", "quick", "", {"train.steps=2"}, dir, "test"};
  CHECK(dry_run_experiment(same, o3, c3) == kExitComplete);
  CHECK(has(c3.str(), "nothing to do"));
  CHECK(dry_run_experiment(r, o4, c4) == kExitUsage);
  CHECK(has(c4.str(), "'train.steps' (run directory: 2, now: 7)"));
  r.force = true;
  CHECK(dry_run_experiment(r, o5, c5) == kExitComplete);
  CHECK(has(c5.str(), "would move " + dir.string() + " to " + dir.string() + ".old-1"));
  fs::path old1 = dir;
  old1 += ".old-1";
  CHECK_FALSE(fs::exists(old1));
  fs::remove_all(dir);
}

TEST_CASE("sweep --dry-run: every run's config goes through the experiment's check, as `attnlab run` does") {
  const fs::path dir = fresh_run_dir("sweep_check");
  fs::create_directories(dir);
  const fs::path file = dir / "heads.toml";
  // model.heads = 3 overrides mha(heads=4): the spec alone builds, the model's width does not split in 3.
  write_text_atomic(file.string(), "experiment = \"classify\"\n[set]\n\"model.d_model\" = 64\n"
                                   "\"model.attention\" = \"mha(heads=4)\"\n[grid]\n\"model.heads\" = [4, 3]\n");
  std::ostringstream out;
  try {
    dry_run_sweep(file.string(), out);
    FAIL("the sweep was accepted");
  } catch (const Error& e) {
    const std::string msg = e.what();
    CHECK(has(msg, "heads.toml: run 1 (model.heads=3, seed=0)"));
    CHECK(has(msg, "(as \"mha(heads=3)\" with model.heads / model.key_size)"));
    CHECK(has(msg, "does not build"));
  }
  fs::remove_all(dir);
}
