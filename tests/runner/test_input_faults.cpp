// The input-fault classes of the runner, each one rule in the code with a test here
// (docs/experiments.md: "Bounded counts", "Stopping and resuming", "Before a run"; docs/io.md:
// "Files read whole"; docs/sweeps.md: runs equal as values):
//  - bounded counts: every int key of every registered experiment has a range (Schema::bound);
//  - a stop signal is honoured during evaluation as during training (stop_point, RunStopped);
//  - the dry run runs every check the run makes before its first step (a dry RunContext), so
//    both refuse the same configs with the same message;
//  - a run directory's path is checked before anything is created (check_run_dir_path);
//  - run files are read as regular files within a bound (read_text), and an unparsable
//    metrics.jsonl line dropped on resume is logged;
//  - a sweep whose runs are equal as values is refused, naming both runs.
#include <signal.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "experiments/runner/store.hpp"
#include "experiments/runner/sweep.hpp"
#include "runner/run_helpers.hpp"

using namespace attnlab;
using namespace attnlab::testing;
using namespace attnlab::runner;
namespace fs = std::filesystem;

namespace {

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// A tiny lm: context 24, width 16, one block, 3 steps of batch 2.
std::vector<std::string> tiny(std::vector<std::string> more = {}) {
  std::vector<std::string> s = {"task.length=24",   "train.steps=3",  "train.eval_every=3",  "train.batch_size=2",
                                "eval.batches=1",   "model.layers=1", "model.d_model=16",    "model.ffn_hidden=32",
                                "model.attention=mha(heads=2)"};
  s.insert(s.end(), more.begin(), more.end());
  return s;
}

// The rest of the first line of `text` after `marker`, or "" without it.
std::string after(const std::string& text, const std::string& marker) {
  const size_t at = text.find(marker);
  if (at == std::string::npos) return "";
  const size_t from = at + marker.size();
  return text.substr(from, text.find('\n', from) - from);
}

}  // namespace

TEST_CASE("bounded counts: every int key of the catalog's experiments has a range; eval.batches 0, -1, 2^31-1 refused") {
  const std::set<std::string> seeds = {"seed", "task.seed", "fit.data_seed"};  // any int64 is a seed
  // The catalog (experiments/catalog/*.cpp); this binary also registers test experiments of its own.
  for (const char* name : {"classify", "collab_compress", "example", "head_pruning", "lm", "lowrank_fit", "recall"})
    for (const Field& f : find_experiment(name).schema.fields()) {
      const Experiment* e = &find_experiment(name);
      if (f.type != FieldType::Int || seeds.count(f.key)) continue;
      CAPTURE(e->name);
      CAPTURE(f.key);
      CHECK(f.max < int64_t(1) << 31);  // every count ends in bounded time
      CHECK(f.min >= 0);
    }
  const Experiment& lm = find_experiment("lm");
  for (const char* v : {"0", "-1", "2147483647"}) {
    CAPTURE(v);
    Config c(lm.schema);
    const std::string e = error_of([&] { c.set(std::string("eval.batches=") + v); });
    CHECK_MESSAGE(has(e, fmt::format("--set: eval.batches = {} is out of its range [1, 100000]", v)), e);
  }
  Config c(lm.schema);
  const std::string toml = error_of([&] { c.merge_toml("[train]\nsteps = 100000001\n", "run.toml"); });
  CHECK_MESSAGE(has(toml, "run.toml:2: train.steps = 100000001 is out of its range [0, 100000000]"), toml);
}

TEST_CASE("stop signal during evaluation: the run stops cleanly, keeping what training produced, and resumes") {
  const fs::path dir = fresh_run_dir("eval_stop");
  // 100000 evaluation batches: minutes without a stop, so the signal lands inside the evaluation.
  const std::vector<std::string> sets = tiny({"eval.batches=100000"});
  // Sends SIGTERM to this process once log.txt holds `trigger`.
  auto signal_when = [&](const std::string& trigger) {
    return std::thread([dir, trigger] {
      for (int i = 0; i < 6000; ++i) {
        if (has(read_file(dir / "log.txt"), trigger)) {
          std::this_thread::sleep_for(std::chrono::milliseconds(100));
          kill(getpid(), SIGTERM);
          return;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
    });
  };
  // The evaluation at the last step, inside the Trainer: the trained step's checkpoint is saved.
  std::thread first = signal_when("step 3/3");
  const auto t0 = std::chrono::steady_clock::now();
  RunResult r = run_in(dir, "lm", sets, "");
  first.join();
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(60));
  CHECK_MESSAGE(r.status == kExitStopped, r.console);
  CHECK(has(r.console, "stop signal during the evaluation at step 3: that evaluation is not recorded"));
  CHECK(has(r.console, "stopped at step 3: checkpoint saved"));
  CHECK(fs::exists(dir / "checkpoint.safetensors"));
  CHECK_FALSE(fs::exists(dir / "summary.json"));
  CHECK_FALSE(fs::exists(dir / "failure.json"));
  // Resumed: the final evaluation (after training) is stopped too, and the checkpoint kept.
  std::thread second = signal_when("resuming lm from step 3");
  RunResult again = run_in(dir, "lm", sets, "");
  second.join();
  CHECK_MESSAGE(again.status == kExitStopped, again.console);
  CHECK(fs::exists(dir / "checkpoint.safetensors"));
  CHECK_FALSE(fs::exists(dir / "summary.json"));
  CHECK_FALSE(fs::exists(dir / "failure.json"));
  fs::remove_all(dir);
}

TEST_CASE("dry run parity: the dry run refuses what the run refuses before its first step, with the same message") {
  const fs::path blocker = fresh_run_dir("dry_parity_file");
  { std::ofstream(blocker) << "a file, not a directory"; }
  struct Case {
    std::vector<std::string> sets;
    fs::path run_dir;  // empty: a fresh directory
    std::string words;  // a part of the shared message
  };
  const std::vector<Case> cases = {
      {{"train.groups=*.nothing.*: lr=0.1"}, {}, "train.groups"},
      {{"train.init_from=/nonexistent/attnlab_run"}, {}, "train.init_from: '/nonexistent/attnlab_run' does not exist"},
      {{"task.level=word"}, {}, "task.level must be char or byte"},
      {{"train.lr=inf"}, {}, "train.lr must be finite and > 0"},
      {{"train.clip=-1"}, {}, "train.clip must be finite and >= 0"},
      {{"model.positions=none", "model.attention=mha(heads=2, alibi=true)", "eval.context=1000000"}, {},
       "validation tokens"},
      {{"task.pack=true", "model.attention=retention(heads=2)"}, {}, "retention"},
      {{"task.pack=true", "model.attention=fnet"}, {}, "fnet"},
      {{}, blocker / "run", "cannot be created"},
  };
  int index = 0;
  for (const Case& c : cases) {
    const fs::path dir = c.run_dir.empty() ? fresh_run_dir(fmt::format("dry_parity_{}", index)) : c.run_dir;
    ++index;
    CAPTURE(dir);
    CAPTURE(c.words);
    RunRequest request{"lm", "", "", tiny(c.sets), dir, "test"};
    std::ostringstream out, dry_console;
    CHECK(dry_run_experiment(request, out, dry_console) == kExitUsage);
    CHECK_FALSE(fs::exists(dir / "config.toml"));  // the dry run creates nothing
    const RunResult run = run_in(dir, "lm", tiny(c.sets), "");
    CHECK(run.status != kExitComplete);
    // The message: what follows "lm failed: " (an error inside the run) or "attnlab run: ".
    const std::string marker = has(run.console, "lm failed: ") ? "lm failed: " : "run: ";
    const std::string dry_message = after(dry_console.str(), marker), run_message = after(run.console, marker);
    CHECK_MESSAGE(has(run_message, c.words), run.console);
    CHECK_MESSAGE(dry_message == run_message, dry_console.str());
    if (c.run_dir.empty()) fs::remove_all(dir);
  }
  fs::remove(blocker);

  // sweep --dry-run runs the same config checks as run --dry-run: the micro-batch split too.
  const fs::path sweep_dir = fresh_run_dir("dry_parity_sweep");
  fs::create_directories(sweep_dir);
  const fs::path file = sweep_dir / "acc.toml";
  write_text_atomic(file.string(), "experiment = \"lm\"\n[set]\n\"train.batch_size\" = 4\n\"train.accumulate\" = 3\n");
  std::ostringstream sweep_out;
  const std::string e = error_of([&] { dry_run_sweep(file.string(), sweep_out); });
  CHECK_MESSAGE(has(e, "train.batch_size = 4 (from " + file.string() + ":3) does not split into 1 ranks x train.accumulate = 3"), e);
  fs::remove_all(sweep_dir);
}

TEST_CASE("run directory path: empty or not UTF-8 is refused before anything is created") {
  const fs::path base = fresh_run_dir("bad_run_dir");
  fs::create_directories(base);
  const fs::path latin1 = base / std::string("caf\xE9");
  RunResult r = run_in(latin1, "lm", tiny(), "");
  CHECK(r.status == kExitUsage);
  CHECK_MESSAGE(has(r.console, "--run-dir: '" + base.string() + "/caf\\xE9' is not valid UTF-8"), r.console);
  CHECK(fs::is_empty(base));  // no directory, config.toml or .lock left behind
  RunResult empty = run_in("", "lm", tiny(), "");
  CHECK(empty.status == kExitUsage);
  CHECK(has(empty.console, "--run-dir: the path is empty"));
  fs::remove_all(base);
}

TEST_CASE("run files: a link to /dev/zero or a FIFO is refused naming the file; a dropped metrics line is logged") {
  const fs::path dir = fresh_run_dir("run_files");
  REQUIRE(run_in(dir, "lm", tiny(), "").status == kExitComplete);
  // report reads summary.json; resume reads metrics.jsonl.
  fs::remove(dir / "summary.json");
  fs::create_symlink("/dev/zero", dir / "summary.json");
  CHECK(has(error_of([&] { read_run_dir(1, dir); }), (dir / "summary.json").string() + ": is a character device"));
  fs::remove(dir / "summary.json");
  const std::string metrics = read_file(dir / "metrics.jsonl");
  std::ofstream(dir / "metrics.jsonl") << "{\"step\": 1, oops\n" << metrics;
  RunResult resumed = run_in(dir, "lm", tiny(), "");
  CHECK_MESSAGE(resumed.status == kExitComplete, resumed.console);
  CHECK_MESSAGE(has(resumed.console, (dir / "metrics.jsonl").string() + ": line 1 is not a metrics line and is dropped: "
                                                                        "{\"step\": 1, oops"),
                resumed.console);
  CHECK(read_file(dir / "metrics.jsonl") == metrics);
  fs::remove_all(dir);
}

TEST_CASE("sweep: runs equal as values are refused, naming both runs") {
  const fs::path dir = fresh_run_dir("sweep_same");
  fs::create_directories(dir);
  struct Case {
    std::string body, words;
  };
  for (const Case& c : std::vector<Case>{
           {"[grid]\n\"train.lr\" = [1, 1.0]\n", "run 0 (train.lr=1, seed=0) and run 1 (train.lr=1.0, seed=0)"},
           {"[grid]\n\"model.attention\" = [\"mha(heads=2, kv_heads=1)\", \"mha( kv_heads = 1,heads=2 )\"]\n",
            "are the same configuration"},
           {"[zip]\n\"train.lr\" = [0.1, 0.1]\n\"train.steps\" = [5, 5]\n", "run 0 (train.lr=0.1, train.steps=5, seed=0) and run 1"},
       }) {
    CAPTURE(c.body);
    const fs::path file = dir / "same.toml";
    write_text_atomic(file.string(), "experiment = \"lm\"\n" + c.body);
    std::ostringstream out;
    const std::string e = error_of([&] { dry_run_sweep(file.string(), out); });
    CHECK_MESSAGE(has(e, c.words), e);
    CHECK_MESSAGE(has(e, "remove one"), e);
  }
  fs::remove_all(dir);
}
