// The lowrank_fit experiment (experiments/catalog/lowrank_fit.cpp): one head with key_size k fits
// an arbitrary N x N attention pattern when k >= N - 1 (here k = N) and cannot when k = 1; with h
// heads a talking-heads pre mix fits h targets better than separate heads of the same key size.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "experiments/runner/experiment.hpp"
#include "helpers.hpp"

using namespace attnlab;
using namespace attnlab::runner;
namespace fs = std::filesystem;

namespace {

// The final metrics of a lowrank_fit run with the given overrides (null when it fails).
nlohmann::json run_fit(const std::vector<std::string>& sets, std::string* console_out = nullptr) {
  static int runs = 0;
  fs::path dir = fs::temp_directory_path() / fmt::format("attnlab_test_lowrank_{}_{}", runs++, long(getpid()));
  fs::remove_all(dir);
  std::ostringstream console;
  RunRequest r{"lowrank_fit", "", "", sets, dir, "test"};
  int status = run_experiment(r, console, false);
  if (console_out) *console_out = console.str();
  nlohmann::json metrics;
  if (status == kExitComplete) {
    std::ifstream in(dir / "summary.json");
    metrics = nlohmann::json::parse(in)["metrics"];
  }
  fs::remove_all(dir);
  return metrics;
}

// One head with N = 4 tokens, D = 8, key size k.
nlohmann::json fit(int64_t k, std::string* console_out = nullptr) {
  return run_fit({"fit.tokens=4", "fit.input_dim=8", fmt::format("fit.key_size={}", k), "train.steps=1000",
                  "train.eval_every=0"},
                 console_out);
}

// h heads of key size k on the default N = 8, D = 16, 1500 steps.
nlohmann::json fit_heads(int64_t h, int64_t k, const std::string& mix) {
  return run_fit({fmt::format("fit.heads={}", h), fmt::format("fit.key_size={}", k), "fit.mix=" + mix,
                  "train.eval_every=0"});
}

}  // namespace

TEST_CASE("lowrank_fit: key_size >= N fits an arbitrary pattern, key_size 1 does not") {
  nlohmann::json full = fit(4), one = fit(1);
  REQUIRE(full.contains("kl"));
  REQUIRE(one.contains("kl"));
  CHECK(full["kl"].get<double>() < 1e-4);
  CHECK(full["max_abs_err"].get<double>() < 1e-2);
  // Rank-1 logits: the error stays a sizeable fraction of the uniform pattern's.
  CHECK(one["kl"].get<double>() > 0.1 * one["kl_uniform"].get<double>());
  CHECK(one["max_abs_err"].get<double>() > 0.05);
  CHECK(one["kl_uniform"].get<double>() == full["kl_uniform"].get<double>());  // same target
}

TEST_CASE("lowrank_fit: a key size below 1 fails naming the key") {
  std::string console;
  CHECK(fit(0, &console).is_null());
  CHECK(console.find("fit.key_size must be >= 1, got 0") != std::string::npos);
}

TEST_CASE("lowrank_fit: heads=1, mix=none is the one-head fit") {
  nlohmann::json plain = run_fit({"train.eval_every=0"}), explicit_one = fit_heads(1, 4, "none");
  REQUIRE(plain.contains("kl"));
  REQUIRE(explicit_one.contains("kl"));
  CHECK(explicit_one["kl"].get<double>() == plain["kl"].get<double>());
  CHECK(explicit_one["params"].get<double>() == 2 * 4 * 16);
  // N = 8, D = 16, key size 4 after 1500 steps, as in docs/results/lowrank_fit (KL 0.014)
  CHECK(plain["kl"].get<double>() == doctest::Approx(0.013632860688244928).epsilon(1e-6));
  CHECK(plain["kl_uniform"].get<double>() == doctest::Approx(0.847361315724565).epsilon(1e-9));
}

TEST_CASE("lowrank_fit: a talking-heads pre mix fits h targets better than h separate heads") {
  // Measured at data_seed 0: h = 4, k = 2: kl 0.084 (talking) against 0.154 (none);
  // h = 8, k = 1: 0.142 against 0.420. Talking does not reach zero: the heads share one
  // h-dimensional span of rank-k logit matrices (the header of lowrank_fit.cpp counts it).
  struct Case {
    int h, k;
    double ratio;  // bound on kl(talking) / kl(none)
  };
  for (const Case& c : {Case{4, 2, 0.7}, Case{8, 1, 0.5}}) {
    const int h = c.h, k = c.k;
    CAPTURE(h);
    nlohmann::json none = fit_heads(h, k, "none"), talking = fit_heads(h, k, "talking");
    REQUIRE(none.contains("kl"));
    REQUIRE(talking.contains("kl"));
    CHECK(talking["kl"].get<double>() < c.ratio * none["kl"].get<double>());
    CHECK(talking["max_abs_err"].get<double>() < none["max_abs_err"].get<double>());
    CHECK(none["kl"].get<double>() > 0.1 * none["kl_uniform"].get<double>());
    CHECK(talking["kl_uniform"].get<double>() == none["kl_uniform"].get<double>());  // same targets
    CHECK(none["params"].get<double>() == 2 * h * k * 16);
    CHECK(talking["params"].get<double>() == 2 * h * k * 16 + h * h);  // + pre_mix (h, h)
  }
}

TEST_CASE("lowrank_fit: an unknown fit.mix or heads below 1 fails naming the key") {
  std::string console;
  CHECK(run_fit({"fit.mix=collab"}, &console).is_null());
  CHECK(console.find("fit.mix must be none or talking, got 'collab'") != std::string::npos);
  CHECK(run_fit({"fit.heads=0"}, &console).is_null());
  CHECK(console.find("fit.heads must be >= 1, got 0") != std::string::npos);
}
