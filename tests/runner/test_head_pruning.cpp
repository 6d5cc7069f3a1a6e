// The `head_pruning` experiment (experiments/catalog/head_pruning.cpp) on a tiny gated recall
// model: a large L0 weight closes gates, pruning equals masking, the importance baseline and the
// gate trajectories are recorded.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "experiments/runner/experiment.hpp"
#include "helpers.hpp"

using namespace attnlab;
namespace fs = std::filesystem;

namespace {

std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

TEST_CASE("head_pruning: a large lambda closes gates; pruned accuracy equals masked accuracy") {
  fs::path dir = fs::temp_directory_path() / fmt::format("attnlab_test_pruning_{}", long(getpid()));
  fs::remove_all(dir);
  std::vector<std::string> sets = {"task.name=recall",   "task.num_pairs=3",    "task.num_keys=6",
                                   "task.num_values=6",  "task.train_size=200", "task.val_size=60",
                                   "task.test_size=60",  "model.d_model=16",    "model.layers=2",
                                   "model.ffn_hidden=32", "model.attention=mha(heads=4,gate=hard_concrete,gate_init=0.5)",
                                   "train.steps=40",     "train.lr=0.05",       "train.warmup=1",
                                   "train.eval_every=10", "train.l0_lambda=5"};
  std::ostringstream console;
  runner::RunRequest r{"head_pruning", "", "", sets, dir, "test"};
  REQUIRE(runner::run_experiment(r, console, false) == 0);
  auto m = nlohmann::json::parse(slurp(dir / "summary.json"))["metrics"];
  CHECK(m["heads_total"].get<double>() == 8);
  CHECK(m["heads_kept"].get<double>() < 8);
  CHECK(m["pruned_acc"].get<double>() == m["masked_acc"].get<double>());
  CHECK(m["attn_params_kept"].get<double>() < 1.0);
  CHECK(m["acc_keep8"].get<double>() == m["test_acc"].get<double>());  // nothing removed yet
  CHECK(m.contains("acc_keep0"));

  // One surviving-head line per kept head.
  std::istringstream survivors(slurp(dir / "artifacts" / "surviving_heads.txt"));
  int lines = 0;
  for (std::string line; std::getline(survivors, line);) lines += line.rfind('#', 0) != 0;
  CHECK(lines == int(m["heads_kept"].get<double>()));

  // Gate trajectories: every evaluation line has all 8 gates, values in [0, 1].
  std::istringstream metrics(slurp(dir / "metrics.jsonl"));
  int evals = 0;
  for (std::string line; std::getline(metrics, line);) {
    auto j = nlohmann::json::parse(line);
    if (!j.contains("val_acc")) continue;
    ++evals;
    for (int l = 0; l < 2; ++l)
      for (int i = 0; i < 4; ++i) {
        const std::string key = fmt::format("gate.blocks.{}.attn.{}", l, i);
        REQUIRE(j.contains(key));
        CHECK(j[key].get<double>() >= 0.0);
        CHECK(j[key].get<double>() <= 1.0);
      }
  }
  CHECK(evals == 4);
  CHECK(fs::exists(dir / "artifacts" / "gates.svg"));
  CHECK(fs::exists(dir / "artifacts" / "accuracy_vs_heads.svg"));
  fs::remove_all(dir);
}
