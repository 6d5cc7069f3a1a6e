// The lm experiment's length-extrapolation keys: model.positions (learned | none) and
// eval.context (the final val_bpc on longer windows, reported as val_bpc_long); task.pack
// (packed training rows); and eval.ngram (the n-gram calibration in the summary).
#include "catalog_run.hpp"
#include "experiments/analysis/ngram.hpp"
#include "experiments/runner/task.hpp"
#include "experiments/models/models.hpp"
#include "helpers.hpp"

using namespace attnlab;
using namespace attnlab::testing;

TEST_CASE("lm eval.context: val_bpc_long equals val_bpc at the training context, is absent when 0") {
  const auto dir = fresh_run_dir("lm_positions", "same");
  std::string console;
  REQUIRE_MESSAGE(tiny_lm(dir, {"eval.context=24"}, &console) == 0, console);
  auto m = summary_metrics(dir);
  REQUIRE(m.contains("val_bpc_long"));
  CHECK(m["val_bpc_long"].get<double>() == m["val_bpc"].get<double>());
  CHECK(m["eval_context"].get<double>() == 24.0);

  const auto off = fresh_run_dir("lm_positions", "off");
  REQUIRE(tiny_lm(off, {}) == 0);
  CHECK_FALSE(summary_metrics(off).contains("val_bpc_long"));
  CHECK(summary_metrics(off)["val_bpc"].get<double>() == m["val_bpc"].get<double>());  // eval.context changes nothing else
  std::filesystem::remove_all(dir);
  std::filesystem::remove_all(off);
}

TEST_CASE("lm model.positions = none: no pos_emb in the checkpoint, evaluated at 4x the training context") {
  const auto dir = fresh_run_dir("lm_positions", "none");
  std::string console;
  REQUIRE_MESSAGE(tiny_lm(dir, {"model.positions=none", "eval.context=96"}, &console) == 0, console);
  auto m = summary_metrics(dir);
  const double long_bpc = m["val_bpc_long"].get<double>();
  CHECK(std::isfinite(long_bpc));
  CHECK(long_bpc > 0);
  CHECK(long_bpc != m["val_bpc"].get<double>());  // other windows
  CHECK(m["eval_context"].get<double>() == 96.0);
  models::LoadedRun run = models::load_run(dir);
  auto& lm = dynamic_cast<nn::CausalLM&>(*run.model);
  CHECK(lm.config.positions == "none");
  CHECK(!lm.pos_emb);
  const auto state = lm.state_dict();
  CHECK(state.count("pos_emb.weight") == 0);
  CHECK(state.count("tok_emb.weight") == 1);
  std::filesystem::remove_all(dir);
}

TEST_CASE("lm: bad model.positions and eval.context values are errors naming the key and the numbers") {
  std::string console;
  const auto a = fresh_run_dir("lm_positions", "bad_positions");
  CHECK(tiny_lm(a, {"model.positions=rope"}, &console) != 0);
  CHECK(console.find("model.positions must be learned or none, got 'rope' (from --set)") != std::string::npos);
  const auto b = fresh_run_dir("lm_positions", "learned_long");
  // Both refused by the experiment's check, before the run directory exists (usage, exit 2).
  CHECK(tiny_lm(b, {"eval.context=48"}, &console) == runner::kExitUsage);
  CHECK(console.find("eval.context = 48 (from --set) exceeds the learned position table of task.length = 24 rows") !=
        std::string::npos);
  CHECK_FALSE(std::filesystem::exists(b));
  const auto c = fresh_run_dir("lm_positions", "negative");
  CHECK(tiny_lm(c, {"eval.context=-1"}, &console) == runner::kExitUsage);
  CHECK(console.find("--set: eval.context = -1 is out of its range [0, 1048576]") != std::string::npos);
  CHECK_FALSE(std::filesystem::exists(c));
  const auto d = fresh_run_dir("lm_positions", "too_long");
  CHECK(tiny_lm(d, {"model.positions=none", "eval.context=1000000"}, &console) != 0);
  CHECK(console.find("eval.context = 1000000 (from --set) needs more than the") != std::string::npos);
  for (const auto& dir : {a, b, c, d}) std::filesystem::remove_all(dir);
}

TEST_CASE("lm task.pack = true trains on packed rows (learned positions restart per fortune)") {
  const auto dir = fresh_run_dir("lm_positions", "packed");
  std::string console;
  REQUIRE_MESSAGE(tiny_lm(dir, {"task.pack=true"}, &console) == 0, console);
  CHECK(console.find("packed rows") != std::string::npos);
  auto m = summary_metrics(dir);
  const double packed = m["val_bpc"].get<double>();
  CHECK(std::isfinite(packed));
  const auto plain = fresh_run_dir("lm_positions", "windows");
  REQUIRE(tiny_lm(plain, {}) == 0);
  CHECK(summary_metrics(plain)["val_bpc"].get<double>() != packed);  // other training batches
  std::filesystem::remove_all(dir);
  std::filesystem::remove_all(plain);
}

TEST_CASE("lm eval.ngram: the summary holds the split's Kneser-Ney 3-, 4- and 5-gram bpc; absent by default") {
  const auto dir = fresh_run_dir("lm_positions", "ngram");
  std::string console;
  REQUIRE_MESSAGE(tiny_lm(dir, {"eval.ngram=true"}, &console) == 0, console);
  auto m = summary_metrics(dir);
  runner::Config config = runner::resolve_config(runner::find_experiment("lm"), "", "", {"task.length=24"});
  const runner::TaskData task = runner::make_task(config);
  const std::vector<double> bpc = analysis::ngram_bits_per_token(task.train_tokens, task.val_tokens, task.vocab_size, 5);
  for (int order : {3, 4, 5}) {
    CAPTURE(order);
    REQUIRE(m.contains(fmt::format("ngram_bpc_{}", order)));
    CHECK(m[fmt::format("ngram_bpc_{}", order)].get<double>() == bpc[size_t(order - 1)]);
  }
  CHECK(console.find("lm: n-gram calibration (Kneser-Ney): 3-gram") != std::string::npos);
  const auto off = fresh_run_dir("lm_positions", "ngram_off");
  REQUIRE(tiny_lm(off, {}) == 0);
  CHECK_FALSE(summary_metrics(off).contains("ngram_bpc_5"));
  CHECK(summary_metrics(off)["val_bpc"].get<double>() == m["val_bpc"].get<double>());  // training is unchanged
  std::filesystem::remove_all(dir);
  std::filesystem::remove_all(off);
}
