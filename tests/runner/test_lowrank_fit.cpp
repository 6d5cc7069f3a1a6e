// The lowrank_fit experiment (experiments/catalog/lowrank_fit.cpp): one head with key_size k fits
// an arbitrary N x N attention pattern when k >= N - 1 (here k = N) and cannot when k = 1.
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

// The final metrics of a lowrank_fit run with N = 4 tokens, D = 8, key size k.
nlohmann::json fit(int64_t k, std::string* console_out = nullptr) {
  fs::path dir = fs::temp_directory_path() / fmt::format("attnlab_test_lowrank_{}_{}", k, long(getpid()));
  fs::remove_all(dir);
  std::ostringstream console;
  RunRequest r{"lowrank_fit", "", "",
               {"fit.tokens=4", "fit.input_dim=8", fmt::format("fit.key_size={}", k), "train.steps=1000",
                "train.eval_every=0"},
               dir, "test"};
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
