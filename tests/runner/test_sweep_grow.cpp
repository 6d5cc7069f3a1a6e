// A sweep file grows (experiments/runner/sweep.hpp, plan_sweep): its directory's runs are
// compared by point and resolved config, not by the file's bytes. Appended configurations and
// seeds become new runs after the numbered ones, [report] and comments change freely, and only a
// change that would renumber or alter a numbered run is refused (SweepConflictError), by the
// plan, the dry run and the Slurm script alike.
#include <unistd.h>

#include <filesystem>
#include <sstream>

#include "experiments/runner/sweep.hpp"
#include "helpers.hpp"
#include "runner/scratch_dir.hpp"
#include "tensor/io.hpp"

using namespace attnlab;
using namespace attnlab::runner;
using attnlab::testing::error_of;
using attnlab::testing::ScratchDir;
namespace fs = std::filesystem;

namespace {

// The example experiment over train.lr (grid) and seeds; `extra` goes at the end of the file.
std::string sweep_text(const std::string& lrs, const std::string& seeds, int steps = 20, const std::string& extra = "") {
  return "experiment = \"example\"\nseeds = [" + seeds + "]\n[set]\n\"train.steps\" = " + std::to_string(steps) +
         "\n[grid]\n\"train.lr\" = [" + lrs + "]\n" + extra;
}

SweepSpec spec_of(const fs::path& file, const std::string& text) {
  write_text_atomic(file.string(), text);
  return load_sweep(file.string());
}

std::vector<std::string> labels(const std::vector<Point>& points) {
  std::vector<std::string> out;
  for (const Point& p : points) out.push_back(point_label(p));
  return out;
}

}  // namespace

TEST_CASE("sweep growth: appended seeds and configurations run after the numbered runs; [report] and comments apply") {
  ScratchDir tmp("sweep_grow");
  const fs::path file = tmp.path / "s.toml", dir = tmp.path / "dir";
  const SweepSpec first = spec_of(file, sweep_text("0.003, 0.01", "0, 1"));
  const SweepPlan fresh = plan_sweep(first, expand_sweep(first), dir);
  CHECK(fresh.fresh);
  fs::create_directories(dir);
  record_sweep_plan(first, fresh, dir);
  CHECK(read_text((dir / "sweep.toml").string()) == first.text);
  CHECK_FALSE(fs::exists(dir / "sweep.runs.jsonl"));  // the numbering is the expansion

  // A seed and a learning rate appended, a comment and a [report] table added.
  const SweepSpec grown = spec_of(file, "# one more seed and rate\n" + sweep_text("0.003, 0.01, 0.03", "0, 1, 2", 20,
                                                                                   "[report]\nmetric = \"val_loss\"\n"));
  const SweepPlan plan = plan_sweep(grown, expand_sweep(grown), dir);
  CHECK(plan.changed);
  CHECK(plan.added == 5);
  const std::vector<std::string> want = {
      "train.lr=0.003, seed=0", "train.lr=0.003, seed=1", "train.lr=0.01, seed=0", "train.lr=0.01, seed=1",  // numbered
      "train.lr=0.003, seed=2", "train.lr=0.01, seed=2",  "train.lr=0.03, seed=0", "train.lr=0.03, seed=1",
      "train.lr=0.03, seed=2"};
  CHECK(labels(plan.points) == want);
  record_sweep_plan(grown, plan, dir);
  CHECK(read_text((dir / "sweep.toml").string()) == grown.text);  // the new [report] applies
  REQUIRE(fs::exists(dir / "sweep.runs.jsonl"));
  CHECK(labels(numbered_points(grown, dir / "sweep.toml")) == want);

  // The same file again: the recorded numbering, nothing added.
  const SweepPlan again = plan_sweep(grown, expand_sweep(grown), dir);
  CHECK_FALSE(again.changed);
  CHECK(again.added == 0);
  CHECK(labels(again.points) == want);

  // The dry run prints the directory's numbering and marks the new runs.
  const SweepSpec more = spec_of(file, sweep_text("0.003, 0.01, 0.03", "0, 1, 2, 3"));
  std::ostringstream out;
  dry_run_sweep(file.string(), out, dir);
  CAPTURE(out.str());
  CHECK(out.str().find("12 runs, every config valid; " + dir.string() + " numbers 9 of them, 3 new") != std::string::npos);
  CHECK(out.str().find("0004  train.lr=0.003, seed=2\n") != std::string::npos);
  CHECK(out.str().find("0009  train.lr=0.003, seed=3, new\n") != std::string::npos);
  CHECK(read_text((dir / "sweep.toml").string()) == grown.text);  // a dry run writes nothing
  (void)more;
}

TEST_CASE("sweep growth: a change that would renumber or alter a numbered run is refused, naming it") {
  ScratchDir tmp("sweep_grow");
  const fs::path file = tmp.path / "s.toml", dir = tmp.path / "dir";
  const SweepSpec first = spec_of(file, sweep_text("0.003, 0.01", "0, 1"));
  fs::create_directories(dir);
  record_sweep_plan(first, plan_sweep(first, expand_sweep(first), dir), dir);

  auto conflict = [&](const std::string& text) {
    const SweepSpec spec = spec_of(file, text);
    std::string message;
    try {
      plan_sweep(spec, expand_sweep(spec), dir);
    } catch (const SweepConflictError& e) {
      message = e.what();
    }
    return message;
  };
  // [set] changes every numbered run's config
  const std::string set = conflict(sweep_text("0.003, 0.01", "0, 1", 21));
  CAPTURE(set);
  CHECK(set.find("run runs/0000 (train.lr=0.003, seed=0) would change: 'train.steps' (") != std::string::npos);
  CHECK(set.find(": 20, ") != std::string::npos);
  CHECK(set.find(": 21)") != std::string::npos);
  // a seed left out
  const std::string dropped = conflict(sweep_text("0.003, 0.01", "0"));
  CHECK(dropped.find("run runs/0001 ({\"train.lr\":0.003,\"seed\":1}) is not in the file") != std::string::npos);
  // a value inserted before others does not renumber: runs keep their numbers
  const SweepSpec inserted = spec_of(file, sweep_text("0.001, 0.003, 0.01", "0, 1"));
  const SweepPlan plan = plan_sweep(inserted, expand_sweep(inserted), dir);
  CHECK(labels(plan.points)[0] == "train.lr=0.003, seed=0");
  CHECK(labels(plan.points)[4] == "train.lr=0.001, seed=0");
  // another experiment, another axis
  CHECK(conflict("experiment = \"classify\"\nseeds = [0, 1]\n[grid]\n\"train.lr\" = [0.003, 0.01]\n")
            .find("experiment 'classify', but") != std::string::npos);
  CHECK(conflict(sweep_text("0.003, 0.01", "0, 1", 20, "\"train.batch_size\" = [8]\n")).find("axes train.lr, train.batch_size, seed") !=
        std::string::npos);
  // the dry run finds the same conflict
  spec_of(file, sweep_text("0.003, 0.01", "0, 1", 21));
  std::ostringstream out;
  CHECK_THROWS_AS(dry_run_sweep(file.string(), out, dir), SweepConflictError);
  CHECK(read_text((dir / "sweep.toml").string()) == first.text);  // nothing rewritten by a refusal
}
