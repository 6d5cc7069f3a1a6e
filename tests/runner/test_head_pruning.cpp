// The `head_pruning` experiment (experiments/catalog/head_pruning.cpp) on a tiny recall model:
// a large L0 weight closes gates, pruning equals masking, the importance baseline, its
// random-order control and the gate trajectories are recorded; an ungated model keeps every
// head and still gets both pruning curves.
#include <filesystem>
#include <sstream>

#include "helpers.hpp"
#include "runner/catalog_run.hpp"

using namespace attnlab;
using namespace attnlab::testing;
namespace fs = std::filesystem;

namespace {

fs::path fresh(const std::string& name) { return fresh_run_dir("pruning", name); }

// A 2-layer, 4-head recall model (8 heads), gated unless `sets` overrides model.attention.
int run(const fs::path& dir, const std::vector<std::string>& sets, std::string* console_out = nullptr) {
  return run_catalog("head_pruning", dir,
                     {"task.name=recall", "task.num_pairs=3", "task.num_keys=6", "task.num_values=6",
                      "task.train_size=200", "task.val_size=60", "task.test_size=60", "model.d_model=16",
                      "model.layers=2", "model.ffn_hidden=32",
                      "model.attention=mha(heads=4,gate=hard_concrete,gate_init=0.5)", "train.steps=40",
                      "train.lr=0.05", "train.warmup=1", "train.eval_every=10"},
                     sets, console_out);
}

}  // namespace

TEST_CASE("head_pruning: a large lambda closes gates; pruned accuracy equals masked accuracy") {
  fs::path dir = fresh("gated");
  REQUIRE(run(dir, {"train.l0_lambda=5"}) == 0);
  auto m = summary_metrics(dir);
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

TEST_CASE("head_pruning: without gates every head is kept and both pruning curves are measured") {
  fs::path dir = fresh("ungated");
  REQUIRE(run(dir, {"model.attention=mha(heads=4)", "prune.random_orders=3"}) == 0);
  auto m = summary_metrics(dir);
  CHECK(m["heads_total"].get<double>() == 8);
  CHECK(m["heads_kept"].get<double>() == 8);
  CHECK(m["pruned_acc"].get<double>() == m["test_acc"].get<double>());
  CHECK(m["masked_acc"].get<double>() == m["test_acc"].get<double>());
  CHECK(m["attn_params_kept"].get<double>() == 1.0);
  for (int k = 0; k <= 8; ++k) {
    CAPTURE(k);
    CHECK(m.contains(fmt::format("acc_keep{}", k)));
    CHECK(m.contains(fmt::format("acc_rand{}", k)));
  }
  CHECK(m["acc_rand8"].get<double>() == m["test_acc"].get<double>());  // nothing masked
  CHECK(m["acc_rand0"].get<double>() == m["acc_keep0"].get<double>());  // everything masked
  for (const char* auc : {"auc_importance", "auc_random"}) {
    CAPTURE(auc);
    CHECK(m[auc].get<double>() >= 0.0);
    CHECK(m[auc].get<double>() <= 1.0);
  }
  double keep_sum = 0;  // auc_importance is the mean of acc_keep7 .. acc_keep1
  for (int k = 1; k <= 7; ++k) keep_sum += m[fmt::format("acc_keep{}", k)].get<double>();
  CHECK(m["auc_importance"].get<double>() == doctest::Approx(keep_sum / 7));

  // No gate trajectories: nothing to log or draw; every head listed as surviving.
  CHECK(slurp(dir / "metrics.jsonl").find("\"gate.") == std::string::npos);
  CHECK_FALSE(fs::exists(dir / "artifacts" / "gates.svg"));
  CHECK(fs::exists(dir / "artifacts" / "accuracy_vs_heads.svg"));
  std::istringstream survivors(slurp(dir / "artifacts" / "surviving_heads.txt"));
  int lines = 0;
  for (std::string line; std::getline(survivors, line);) lines += line.rfind('#', 0) != 0;
  CHECK(lines == 8);
  fs::remove_all(dir);
}

TEST_CASE("head_pruning: random orders are deterministic for a seed and change nothing else") {
  const std::vector<std::string> ungated = {"model.attention=mha(heads=4)", "train.steps=20"};
  auto with = [&](std::vector<std::string> extra) {
    extra.insert(extra.begin(), ungated.begin(), ungated.end());
    return extra;
  };
  fs::path a = fresh("orders_a"), b = fresh("orders_b"), none = fresh("orders_none");
  REQUIRE(run(a, with({"prune.random_orders=2"})) == 0);
  REQUIRE(run(b, with({"prune.random_orders=2"})) == 0);
  REQUIRE(run(none, with({"prune.random_orders=0"})) == 0);
  auto ma = summary_metrics(a), mb = summary_metrics(b), mn = summary_metrics(none);
  for (int k = 0; k <= 8; ++k) {
    const std::string key = fmt::format("acc_rand{}", k);
    CAPTURE(key);
    CHECK(ma[key].get<double>() == mb[key].get<double>());
    CHECK_FALSE(mn.contains(key));
    // The training and the importance curve do not see the random orders.
    CHECK(mn[fmt::format("acc_keep{}", k)].get<double>() == ma[fmt::format("acc_keep{}", k)].get<double>());
  }
  CHECK(ma["auc_random"].get<double>() == mb["auc_random"].get<double>());
  CHECK(mn["test_acc"].get<double>() == ma["test_acc"].get<double>());
  CHECK(mn["auc_importance"].get<double>() == ma["auc_importance"].get<double>());
  CHECK_FALSE(mn.contains("auc_random"));
  for (const fs::path& d : {a, b, none}) fs::remove_all(d);
}

TEST_CASE("head_pruning: an L0 weight without gates, or a negative number of orders, fails naming the keys") {
  std::string console;
  fs::path dir = fresh("bad");
  CHECK(run(dir, {"model.attention=mha(heads=4)", "train.l0_lambda=0.1", "train.steps=1"}, &console) ==
        runner::kExitFailed);
  CHECK(console.find("train.l0_lambda = 0.1") != std::string::npos);
  CHECK(console.find("model.attention = \"mha(heads=4)\" has no gates") != std::string::npos);
  fs::remove_all(dir);
  CHECK(run(dir, {"prune.random_orders=-1", "train.steps=1"}, &console) == runner::kExitUsage);
  CHECK(console.find("prune.random_orders = -1 is out of its range [0, 10000]") != std::string::npos);
  fs::remove_all(dir);
}
