// The recall experiment (experiments/catalog/recall.cpp): a tiny mqar run end to end with its
// summary's metrics and cost columns, induction refusing non-causal attention by naming
// model.causal, and mqar's option errors naming the key.
#include <sstream>

#include "helpers.hpp"
#include "runner/catalog_run.hpp"

using namespace attnlab;
using namespace attnlab::runner;
using namespace attnlab::testing;

namespace {

const std::vector<std::string> kTiny = {"task.length=16", "task.num_pairs=4", "task.num_keys=8", "task.num_values=8",
                                        "task.train_size=64", "task.val_size=32", "task.test_size=32",
                                        "model.d_model=16", "model.ffn_hidden=16", "train.steps=5",
                                        "train.batch_size=8", "train.eval_every=0"};

}  // namespace

TEST_CASE("recall: a tiny mqar run writes accuracies, state_per_token and density") {
  const auto dir = fresh_run_dir("recall", "mqar");
  REQUIRE(run_catalog("recall", dir, kTiny, {"model.attention=local(heads=2, window=2)"}) == kExitComplete);
  auto m = summary_metrics(dir);
  for (const char* key : {"val_acc", "test_acc", "train_loss", "state_per_token", "density", "steps_per_s"})
    CHECK(m.contains(key));
  CHECK(m["val_acc"].get<double>() >= 0.0);
  CHECK(m["val_acc"].get<double>() <= 1.0);
  // local(window=2) at N = 16, D = 16: (5 * 16 - 6) / 256 pairs; its cache holds 2 positions of
  // h (dk + dv) = 2 (8 + 8) numbers.
  CHECK(m["density"].get<double>() == doctest::Approx(74.0 / 256));
  CHECK(m["state_per_token"].get<double>() == doctest::Approx(2.0 * 32 / 16));
  std::filesystem::remove_all(dir);
}

TEST_CASE("recall: induction runs causal, refuses model.causal = false, mqar errors name the key") {
  const auto dir = fresh_run_dir("recall", "induction");
  std::string out;
  CHECK(run_catalog("recall", dir, kTiny, {"task.name=induction", "model.causal=false"}, &out) == kExitUsage);
  CHECK(out.find("model.causal") != std::string::npos);
  CHECK_FALSE(std::filesystem::exists(dir / "summary.json"));
  REQUIRE(run_catalog("recall", dir, kTiny, {"task.name=induction", "task.vocab=6"}) == kExitComplete);
  // mha mixes every pair by design: no density is recorded for it (nn::attention_restricts_pairs).
  CHECK_FALSE(summary_metrics(dir).contains("density"));
  std::filesystem::remove_all(dir);

  const auto bad = fresh_run_dir("recall", "bad");
  CHECK(run_catalog("recall", bad, kTiny, {"task.num_queries=5"}, &out) != kExitComplete);
  CHECK(out.find("task.num_queries") != std::string::npos);
  std::filesystem::remove_all(bad);
}
